"""A scripted oracle policy for the synthetic world, run through the real rollout engine.

The oracle knows each question's ``supporting_ids`` (ordered in hop order) and the corpus titles
(a passage's title is its entity's name; BM25 with the exact title returns that passage first).
Its script for a question with ``n`` hops is::

    turn i < n : env.fmt.render_call("search", {"query": title(supporting_ids[i])})
    turn n     : env.fmt.render_answer(answers[0])

A calculator question (a row with an ``expression``: ``data.task: tools``, see
:mod:`agentr1.data.toolquestions`) gets one more turn before the answer, after its searches
(none for an arithmetic problem, one per entity for a multi-tool question, whose passages state
the years the expression uses)::

    turn n     : env.fmt.render_call("calculator", {"expression": expression})
    turn n + 1 : env.fmt.render_answer(answers[0])

**Noise** (``noise`` in [0, 1]): each episode is imperfect with probability ``noise``, decided by
a private RNG seeded from ``(seed, question id)`` (so the decision for a question does not
depend on which other questions are in the batch). An imperfect episode gets one of three kinds,
uniformly, among the kinds that fit the env's turn limit. ``noise`` may instead map kinds to
their own shares (``{"early_answer": 0.5, "wrong_query": 0.1}``, summing to at most 1): one
uniform draw ``u`` picks the first kind whose cumulative share (in :data:`NOISE_KINDS` order)
exceeds ``u``, and an episode whose picked kind does not fit stays clean. The kinds:

* ``wrong_query``   - at a random hop, first search a random other corpus title, then go on
  correctly (one wasted turn, the final answer is still right);
* ``redundant_query`` - repeat one hop's query right after it (one wasted turn);
* ``early_answer``  - after ``k`` searches (``1 <= k < n``), answer with the title of
  ``supporting_ids[k]``: the bridge entity the last observation named, not the answer (and no
  calculation). Only for questions with ``n >= 2`` hops.

**How the backend knows which episode a prompt belongs to.** :class:`OracleBackend` implements
the backend interface (``generate(prompts, ...)``). The engine hands it, per live sample, the
whole context ``prompt_ids + response_ids``. Scripts are registered under the exact token ids of
the episode's prompt (:meth:`RolloutEngine.prompt_ids`); a context is matched by trying every
registered prompt length ``L`` (few distinct values) and looking ``tuple(context[:L])`` up. The
turn to play next is the number of the script's turns already present, in order, in the decoded
response (``str.find`` from the end of the previous match; observations are passage text and
never contain a complete call of the script). Two episodes with the same prompt text must have
the same script (registering a different one raises) - :func:`oracle_rollout` keeps only the
first question per distinct question text.

Token-exactness: a scripted turn is ``encode_data(turn_text)`` (its answer or query is data text:
a special-token string in it is never a control token), returned as the "sampled" ids with
log-prob 0.0 each (the oracle is deterministic: probability 1). The engine then treats them like
any policy's tokens: ``action_mask`` 1, observations tokenized once and appended with mask 0.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentr1.data.schema import gold_unknown
from agentr1.rollout.backends import Generation
from agentr1.rollout.engine import RolloutEngine, decode, encode_data
from agentr1.rollout.trajectory import Trajectory

NOISE_KINDS = ("wrong_query", "redundant_query", "early_answer")
CLEAN = "clean"
SEARCH, CALCULATOR = "search", "calculator"
PROBE_EXAMPLES = 64  # dev questions of the copy probe (probe_episodes)


@dataclass(frozen=True)
class OraclePlan:
    """The oracle's turn texts for one question and the kind of episode (``clean`` or one of
    :data:`NOISE_KINDS`)."""

    qid: str
    turns: tuple[str, ...]
    kind: str


def _episode_rng(seed: int, qid: str) -> random.Random:
    return random.Random(f"agentr1-oracle:{seed}:{qid}")


def plan_episode(
    question: Mapping[str, Any],
    titles: Mapping[str, str],
    fmt,
    noise: float | Mapping[str, float],
    seed: int,
    max_turns: int,
    all_titles: Sequence[str] | None = None,
    tool: str = SEARCH,
    lead_space: bool = False,
) -> OraclePlan:
    """The oracle's script for ``question`` (see the module docstring).

    ``titles`` maps passage id -> title; ``all_titles`` (default: the values of ``titles``) is
    where a wrong query's random title is drawn from; ``fmt`` is the env's ``ToolFormat``.
    ``lead_space`` writes a space before every query and answer (``<search> Ada Vell</search>``;
    the env strips it) so a byte-level BPE tokenizes the name exactly as in running text.
    Raises ``KeyError`` when a supporting id is not in ``titles`` and ``ValueError`` when the
    clean script (hops + calculation + answer) does not fit in ``max_turns``.
    """
    qid = str(question["id"])
    hops = [titles[str(pid)] for pid in question["supporting_ids"]]
    answer = str(question["answers"][0])
    expression = question.get("expression")
    calc = 0 if expression is None else 1
    if len(hops) + calc + 1 > max_turns:
        raise ValueError(
            f"{qid}: {len(hops)} searches + {calc} calculation(s) + answer do not fit in max_turns={max_turns}"
        )
    rng = _episode_rng(seed, qid)
    kind = _choose_kind(noise, rng, len(hops), max_turns - calc)
    queries, final = _script_queries(kind, qid, hops, answer, titles, all_titles, rng)
    sp = " " if lead_space else ""
    turns = [fmt.render_call(tool, {"query": sp + q}) for q in queries]
    if expression is not None and kind != "early_answer":
        turns.append(fmt.render_call(CALCULATOR, {"expression": sp + str(expression)}))
    turns.append(fmt.render_answer(sp + final))
    return OraclePlan(qid, tuple(turns), kind)


def _choose_kind(noise: float | Mapping[str, float], rng: random.Random, hops: int, max_turns: int) -> str:
    """The episode's kind: drawn from ``rng`` by the per-kind shares or the overall ``noise``
    rate, :data:`CLEAN` when the drawn kind does not fit ``hops`` searches in ``max_turns``."""
    if isinstance(noise, Mapping):
        kind = _pick_kind(noise, rng.random())
        if kind != CLEAN and not _fits(kind, hops, max_turns):
            kind = CLEAN
    else:
        imperfect = rng.random() < noise
        kinds = [k for k in NOISE_KINDS if _fits(k, hops, max_turns)]
        kind = rng.choice(kinds) if imperfect and kinds else CLEAN
    return kind


def _script_queries(
    kind: str,
    qid: str,
    hops: list[str],
    answer: str,
    titles: Mapping[str, str],
    all_titles: Sequence[str] | None,
    rng: random.Random,
) -> tuple[list[str], str]:
    """``(queries, final)``: the search queries and the final answer of a ``kind`` episode."""
    queries = list(hops)
    final = answer
    if kind == "wrong_query":
        pool = all_titles if all_titles is not None else sorted(set(titles.values()))
        hop_set = set(hops)
        if all(t in hop_set for t in pool):
            raise ValueError(f"{qid}: no title other than the supporting ones to draw a wrong query from")
        at = rng.randrange(len(hops))
        wrong = pool[rng.randrange(len(pool))]
        while wrong in hop_set:
            wrong = pool[rng.randrange(len(pool))]
        queries.insert(at, wrong)
    elif kind == "redundant_query":
        at = rng.randrange(len(hops))
        queries.insert(at + 1, hops[at])
    elif kind == "early_answer":
        k = rng.randrange(1, len(hops))
        queries, final = hops[:k], hops[k]
    return queries, final


def _pick_kind(shares: Mapping[str, float], u: float) -> str:
    """The kind whose cumulative share (in :data:`NOISE_KINDS` order) first exceeds ``u``."""
    unknown = set(shares) - set(NOISE_KINDS)
    if unknown:
        raise ValueError(f"unknown oracle noise kind(s) {sorted(unknown)}; allowed: {', '.join(NOISE_KINDS)}")
    total = 0.0
    for kind in NOISE_KINDS:
        total += shares.get(kind, 0.0)
        if u < total:
            return kind
    return CLEAN


def _fits(kind: str, hops: int, max_turns: int) -> bool:
    if kind == "early_answer":
        return hops >= 2
    return hops >= 1 and hops + 2 <= max_turns  # one extra search + the answer


class OracleBackend:
    """A rollout backend that replays registered scripts (see the module docstring)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._scripts: dict[tuple[int, ...], tuple[list[str], list[list[int]]]] = {}
        self._lengths: set[int] = set()

    def register(self, prompt_ids: Sequence[int], turns: Sequence[str]) -> None:
        """Play ``turns`` (texts) for the episode whose prompt is ``prompt_ids``."""
        key = tuple(int(t) for t in prompt_ids)
        turns = list(turns)
        if key in self._scripts and self._scripts[key][0] != turns:
            raise ValueError("two different oracle scripts for the same prompt")
        self._scripts[key] = (turns, [encode_data(self.tokenizer, t) for t in turns])  # answers are data text
        self._lengths.add(len(key))

    def _lookup(self, context: Sequence[int]) -> tuple[int, list[str], list[list[int]]]:
        for n in sorted(self._lengths, reverse=True):
            hit = self._scripts.get(tuple(context[:n])) if len(context) >= n else None
            if hit is not None:
                return n, hit[0], hit[1]
        raise KeyError("the oracle has no script for this prompt (register it first)")

    def next_turn(self, context: Sequence[int]) -> int:
        """Index of the script turn to play for ``context`` (= turns already in the response)."""
        n, texts, _ = self._lookup(context)
        response = decode(self.tokenizer, list(context[n:]))
        pos, k = 0, 0
        while k < len(texts):
            found = response.find(texts[k], pos)
            if found < 0:
                break
            pos, k = found + len(texts[k]), k + 1
        return k

    def generate(self, prompts, max_new_tokens, stop_strings, temperature, top_p, seed) -> list[Generation]:
        """The next scripted turn of each context; sampling arguments are ignored (the oracle is
        deterministic). A script that is already complete yields no tokens (finish "eos")."""
        out = []
        for context in prompts:
            _, _, ids = self._lookup(context)
            k = self.next_turn(context)
            if k >= len(ids):
                out.append(Generation([], [], "eos"))
                continue
            turn = ids[k][:max_new_tokens]
            finish = "stop" if len(turn) == len(ids[k]) else "length"
            out.append(Generation(list(turn), [0.0] * len(turn), finish))
        return out


def corpus_titles(corpus: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Passage id -> title."""
    return {str(p["id"]): str(p["title"]) for p in corpus}


def unique_questions(questions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first question of each distinct question text (the oracle keys scripts by prompt)."""
    seen, out = set(), []
    for q in questions:
        text = " ".join(str(q["question"]).split())
        if text not in seen:
            seen.add(text)
            out.append(q)
    return out


def plan_all(questions, titles, fmt, noise, seed, max_turns, lead_space: bool = False) -> list[OraclePlan]:
    """:func:`plan_episode` for each question (one shared sorted title pool)."""
    pool = sorted(set(titles.values()))
    return [plan_episode(q, titles, fmt, noise, seed, max_turns, pool, lead_space=lead_space) for q in questions]


def oracle_rollout(
    questions: Sequence[Mapping[str, Any]],
    env,
    tokenizer,
    rollout_cfg,
    plans: Sequence[OraclePlan],
) -> list[Trajectory]:
    """Run ``plans`` (one per question, same order) through the real :class:`RolloutEngine` and
    ``env``; returns one trajectory per question. The questions must have distinct texts
    (:func:`unique_questions`)."""
    if len(plans) != len(questions):
        raise ValueError(f"{len(plans)} plans for {len(questions)} questions")
    backend = OracleBackend(tokenizer)
    engine = RolloutEngine(backend, env, tokenizer, rollout_cfg)
    for q, plan in zip(questions, plans):
        backend.register(engine.prompt_ids(q), plan.turns)
    return engine.rollout([dict(q) for q in questions], group_size=1, seed=0)


def oracle_texts(questions, env, plans: Sequence[OraclePlan], system: bool = True) -> list[str]:
    """Text of each oracle episode (system prompt, question, turns and the env's observations),
    produced by stepping ``env`` on the scripts without any tokenizer - what a scratch model's
    tokenizer is trained on before the token-level rollout can run, and (``system=False``: without
    the system prompt) what it is pretrained on."""
    head = [env.system_prompt()] if system else []
    transcripts = [[*head, env.user_prompt(q["question"])] for q in questions]
    live = list(range(len(questions)))
    turn = 0
    while live:
        live = [i for i in live if turn < len(plans[i].turns)]
        if not live:
            break
        texts = [plans[i].turns[turn] for i in live]
        results = env.step_batch(texts, [turn] * len(live), [list(questions[i]["supporting_ids"]) for i in live])
        still = []
        for i, text, res in zip(live, texts, results):
            transcripts[i].append(text)
            if not res.done:
                transcripts[i].append(res.observation)
                still.append(i)
        live = still
        turn += 1
    return ["\n".join(parts) for parts in transcripts]


def probe_episodes(ds, env, tokenizer, cfg, titles: dict[str, str], limit: int = PROBE_EXAMPLES) -> list[Trajectory]:
    """Clean oracle episodes (no noise) of the first ``limit`` distinct dev questions of the
    dataset ``ds`` whose gold passages are in the corpus (not
    :func:`~agentr1.data.schema.gold_unknown`: no search to script), the inputs of the SFT copy
    probe (seeded ``cfg.seed``, ``cfg.sft.oracle_lead_space``, rolled out under ``cfg.rollout``);
    ``[]`` without such questions."""
    questions = [q for q in unique_questions(ds.split("dev")) if not gold_unknown(q)][:limit]
    if not questions:
        return []
    plans = plan_all(questions, titles, env.fmt, 0.0, cfg.seed, env.max_turns, cfg.sft.oracle_lead_space)
    return oracle_rollout(questions, env, tokenizer, cfg.rollout, plans)


def world_texts(ds, env, questions, plans: Sequence[OraclePlan]) -> list[str]:
    """Everything a policy of this world reads or writes, for ``model.restrict_vocab``: the
    passages of the dataset ``ds``, the questions of every split and the oracle's episode texts
    of ``questions`` under ``plans`` (system prompt, calls, observations, answers)."""
    passages = [f"{p['title']}\n{p['text']}" for p in ds.corpus]
    asked = [str(q["question"]) for split in sorted(ds.questions) for q in ds.split(split)]
    return passages + asked + oracle_texts(questions, env, plans)
