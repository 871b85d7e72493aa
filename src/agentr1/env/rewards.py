"""Answer metrics, the outcome reward (format + answer) and per-call process rewards.

Answer metrics (SQuAD / HotpotQA convention)
--------------------------------------------
``normalize_answer``: lowercase -> drop ASCII punctuation -> drop the articles a/an/the ->
collapse whitespace. Every metric is the maximum over the gold answers; a gold answer that
normalizes to "" (``"?"``, ``"the"``) never matches, under every metric (else an empty or
article-only prediction would score 1 against it; ``agentr1 validate`` refuses such golds):

* ``em``    1 if normalize(pred) == normalize(gold) else 0;
* ``subem`` 1 if normalize(gold) is a substring of normalize(pred) else 0 (Search-R1's
  "substring EM"; blank golds are ignored);
* ``f1``    token F1 of the normalized token bags, P = |common|/|pred|, R = |common|/|gold|,
  F1 = 2PR/(P+R); as in HotpotQA, when either side normalizes to "yes", "no" or "noanswer" and the
  two differ, F1 = 0.

Metrics are registered by name in :data:`agentr1.registry.METRICS`; ``reward.metric`` picks one.

Outcome reward (Agent-R1, arXiv 2511.14460, Eq. 6 — our reading)
-----------------------------------------------------------------
The paper's outcome reward combines a format score with an answer score that counts only when the
format is valid; an invalid format earns ``format - 1``. We could not read Eq. 6 itself, so this
is the reading implemented (and tested with hand-computed values):

* format score of an episode, f in [0, 1]::

      f = 0.5 * v + 0.5 * a
      v = (#valid call attempts) / (#call attempts)   (1 when the episode made no attempt)
      a = 1 if the episode ended with a well-formed <answer>...</answer>, else 0

  where a call attempt is *valid* when it parsed, named a known tool and had valid arguments
  (``CallOutcome.valid``; a call that was valid but failed to execute, e.g. the retriever was
  down, is the environment's fault and stays valid).
* the format is valid iff f = 1 (every call attempt valid and a final answer given);
* outcome reward, with m = metric(answer, golds) in [0, 1] and lambda = ``reward.format_score``::

      R = lambda + (1 - lambda) * m     if the format is valid      (R in [lambda, 1])
      R = f - 1                         otherwise                   (R in [-1, 0))

  ``format_score`` = lambda = 0 (default) gives R = m for a valid episode, i.e. exactly "answer
  reward only when the format is valid, else format - 1"; lambda > 0 is a Search-R1-style bonus
  for a valid format with a wrong answer. Any valid-format episode outranks any invalid one.

Process rewards (optional, ``reward.process``)
----------------------------------------------
One value per call attempt, placed on the character that closes the call (``CallOutcome.end - 1``
in that turn's text; the trainer maps it to the token containing that character):

* ``invalid_call``        when the attempt was not valid (malformed, unknown tool, bad arguments);
* ``failed_call``         when it was valid but did not execute successfully;
* a successful call earns its tool's hook ``Tool.success_reward(outcome, process)``: search pays
  ``successful_search`` when it returned a supporting passage (``found_support``), any other
  tool ``successful_<name>`` (``successful_calculator``; 0 when not set); a tool that is not
  registered earns 0;
* nothing otherwise (a 0 is never listed). With ``process.enabled: false`` there are no process
  rewards at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentr1.data.answers import normalize_answer
from agentr1.env.base import CallOutcome
from agentr1.registry import METRICS, TOOLS

Metric = Callable[[str, Sequence[str]], float]

_SPECIAL = {"yes", "no", "noanswer"}


def _golds(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 if the normalized prediction equals a (non-blank) normalized gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any((g := normalize_answer(gold)) and pred == g for gold in _golds(golds)))


def substring_exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 if a (non-blank) normalized gold answer occurs in the normalized prediction."""
    pred = normalize_answer(prediction)
    return float(any((g := normalize_answer(gold)) and g in pred for gold in _golds(golds)))


def _f1_single(prediction: str, gold: str) -> float:
    pred_n, gold_n = normalize_answer(prediction), normalize_answer(gold)
    if not gold_n:  # a blank gold never matches (module docstring)
        return 0.0
    if (pred_n in _SPECIAL or gold_n in _SPECIAL) and pred_n != gold_n:
        return 0.0
    pred_toks, gold_toks = pred_n.split(), gold_n.split()
    common = sum((Counter(pred_toks) & Counter(gold_toks)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_toks), common / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: str | Sequence[str]) -> float:
    """Max over golds of the token F1 (HotpotQA rules for yes/no/noanswer)."""
    return max((_f1_single(prediction, g) for g in _golds(golds)), default=0.0)


# ------------------------------------------------------------------------------ format score
@dataclass(frozen=True)
class FormatReport:
    """Format of one episode: call attempts, how many were valid, whether it answered, f, ok."""

    attempts: int
    valid: int
    answered: bool
    score: float
    ok: bool


def episode_format(outcomes_per_turn: Sequence[Sequence[CallOutcome]], answered: bool) -> FormatReport:
    """``f = 0.5 * v + 0.5 * a`` (see the module docstring); ``ok`` iff f == 1."""
    outcomes = [o for turn in outcomes_per_turn for o in turn]
    valid = sum(1 for o in outcomes if o.valid)
    v = valid / len(outcomes) if outcomes else 1.0
    a = 1.0 if answered else 0.0
    score = 0.5 * v + 0.5 * a
    return FormatReport(len(outcomes), valid, bool(answered), score, valid == len(outcomes) and bool(answered))


def format_score(outcomes_per_turn: Sequence[Sequence[CallOutcome]], answered: bool) -> float:
    """The episode's format score f in [0, 1]."""
    return episode_format(outcomes_per_turn, answered).score


def episode_format_ok(outcomes_per_turn: Sequence[Sequence[CallOutcome]], answered: bool) -> bool:
    """True iff every call attempt was valid and the episode ended with a well-formed answer."""
    return episode_format(outcomes_per_turn, answered).ok


# ----------------------------------------------------------------------------- outcome reward
def outcome_reward(
    answer: str | None,
    golds: str | Sequence[str],
    fmt_score: float,
    reward_cfg: Any,
    metric: str | None = None,
) -> float:
    """The episode's outcome reward (module docstring):
    ``lambda + (1 - lambda) * m`` when ``fmt_score == 1`` (which implies an answer), else
    ``fmt_score - 1``. ``reward_cfg`` is ``cfg.reward`` (``metric``, ``format_score`` = lambda);
    ``metric`` overrides ``reward_cfg.metric``."""
    f = min(max(float(fmt_score), 0.0), 1.0)
    if f < 1.0:
        return f - 1.0
    if answer is None:
        raise ValueError("a format score of 1 requires a final answer (got answer=None)")
    lam = float(getattr(reward_cfg, "format_score", 0.0))
    m = METRICS.get(metric or reward_cfg.metric)(answer, golds)
    return lam + (1.0 - lam) * m


# ----------------------------------------------------------------------------- process reward
def process_reward_value(outcome: CallOutcome, process_cfg: Any) -> float:
    """The process reward of one call attempt (0.0 when none applies)."""
    if not outcome.valid:
        return float(process_cfg.invalid_call)
    if not outcome.success:
        return float(process_cfg.failed_call)
    if outcome.name not in TOOLS:
        return 0.0
    return float(TOOLS.get(outcome.name).success_reward(outcome, process_cfg))


def process_rewards(
    outcomes_per_turn: Sequence[Sequence[CallOutcome]], reward_cfg: Any
) -> list[tuple[int, int, float]]:
    """``(turn_index, end_char, value)`` for every call attempt with a non-zero process reward,
    in turn and text order; ``end_char`` = ``CallOutcome.end`` (one past the closing marker: put
    the value on the token holding character ``end_char - 1`` of that turn). Empty when
    ``reward_cfg.process.enabled`` is false."""
    pcfg = reward_cfg.process
    if not pcfg.enabled:
        return []
    out = []
    for t, turn in enumerate(outcomes_per_turn):
        for o in sorted(turn, key=lambda o: o.end):
            value = process_reward_value(o, pcfg)
            if value != 0.0:
                out.append((t, o.end, value))
    return out


# ----------------------------------------------------------------------------- one episode
ANSWER_METRICS = ("em", "subem", "f1")


def answer_scores(answer: str | None, golds: Sequence[str]) -> dict[str, float]:
    """em / subem / f1 of ``answer`` against ``golds`` (0 for all when there is no answer)."""
    if answer is None:
        return {m: 0.0 for m in ANSWER_METRICS}
    return {m: float(METRICS.get(m)(answer, list(golds))) for m in ANSWER_METRICS}


@dataclass(frozen=True)
class EpisodeScore:
    """Everything scored about one episode (:func:`score_episode`).

    reward:    the outcome reward (module docstring; ``reward.metric``, ``reward.format_score``);
    em / subem / f1: the answer metrics (0 without an answer);
    format_score / format_ok: f and f == 1 (:func:`episode_format`); answered: an answer was given;
    tool_calls: call attempts (valid or not); valid_calls: the valid ones;
    searches_found_support: valid calls that returned a supporting passage;
    process:   ``(response_token, value)`` per non-zero process reward, in turn and text order.
    """

    reward: float
    em: float
    subem: float
    f1: float
    format_score: float
    format_ok: bool
    answered: bool
    tool_calls: int
    valid_calls: int
    searches_found_support: int
    process: tuple[tuple[int, float], ...] = ()


def score_episode(traj: Any, reward_cfg: Any) -> EpisodeScore:
    """Score one episode: ``traj`` is a :class:`agentr1.rollout.Trajectory` (``answer``, ``golds``,
    ``outcomes`` = one list of :class:`CallOutcome` per policy turn, and ``token_index_for_char``,
    which maps each process reward from ``(turn, end_char)`` to the response token holding
    character ``end_char - 1``); ``reward_cfg`` is ``cfg.reward``."""
    outcomes = traj.outcomes
    answered = traj.answer is not None
    fmt = episode_format(outcomes, answered)
    flat = [o for turn in outcomes for o in turn]
    scores = answer_scores(traj.answer, traj.golds)
    process = tuple(
        (traj.token_index_for_char(turn, end - 1), value) for turn, end, value in process_rewards(outcomes, reward_cfg)
    )
    return EpisodeScore(
        reward=float(outcome_reward(traj.answer, traj.golds, fmt.score, reward_cfg)),
        em=scores["em"],
        subem=scores["subem"],
        f1=scores["f1"],
        format_score=fmt.score,
        format_ok=fmt.ok,
        answered=answered,
        tool_calls=len(flat),
        valid_calls=fmt.valid,
        searches_found_support=sum(bool(o.valid and o.found_support) for o in flat),
        process=process,
    )
