"""The evaluate stage: bootstrap statistics and answer metrics by hand, split summaries, and
The ``evaluate`` stage end to end on a tiny world (real BM25 index, a tiny SFT cold start, one RL
step) for an RL run and every baseline - outputs, determinism, MLflow traces, the registry."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

import tiny_world as tw
from agentr1 import stages
from agentr1.config import ConfigError, RewardConfig, RolloutConfig, config_from_dict
from agentr1.env.rewards import answer_scores
from agentr1.errors import StageError
from agentr1.eval.episodes import EPISODE_FIELDS, naive_rag_batch, tool_policy_batch
from agentr1.eval.metrics import bootstrap_ci, paired_bootstrap_diff, summarize_split
from agentr1.eval.quick import episode_metrics
from agentr1.eval.setup import EvalSetup
from agentr1.eval.support import early_answer, recording, support_found
from agentr1.rollout.trajectory import Trajectory

torch.set_num_threads(1)


# -------------------------------------------------------------------------------- bootstrap
def test_bootstrap_ci_of_two_values_by_hand():
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4: the 2.5th
    # percentile is 0 and the 97.5th is 1
    assert bootstrap_ci([0.0, 1.0], samples=1000, ci=0.95, seed=0) == (0.0, 1.0)
    # a 40% interval lies inside the middle mass at 0.5
    assert bootstrap_ci([0.0, 1.0], samples=1000, ci=0.4, seed=0) == (0.5, 0.5)


def test_bootstrap_ci_contains_the_mean_and_shrinks_with_n():
    pattern = [1, 0, 1, 1, 0]  # mean 0.6
    widths = []
    for reps in (2, 20, 200):
        values = pattern * reps
        lo, hi = bootstrap_ci(values, samples=1000, ci=0.95, seed=1)
        assert lo <= 0.6 <= hi and lo < hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    # the width shrinks like 1/sqrt(n): 100x the questions -> about a tenth of the width
    assert widths[2] == pytest.approx(widths[0] / 10, rel=0.35)
    # sd of the mean of 1000 Bernoulli(0.6) = sqrt(0.24 / 1000) = 0.0155; 95% ~ +-1.96 sd
    assert widths[2] == pytest.approx(2 * 1.96 * np.sqrt(0.24 / 1000), rel=0.15)


def test_bootstrap_ci_is_deterministic_per_seed():
    values = np.random.default_rng(7).integers(0, 2, 50).astype(float)
    assert bootstrap_ci(values, 500, 0.95, seed=3) == bootstrap_ci(values, 500, 0.95, seed=3)
    draws = {bootstrap_ci(values, 500, 0.9, seed=s) for s in range(6)}
    assert len(draws) > 1


def test_bootstrap_ci_degenerate_and_invalid_inputs():
    assert bootstrap_ci([1.0] * 7) == (1.0, 1.0)
    lo, hi = bootstrap_ci([0.1, 0.1, 0.1])
    assert lo == hi == pytest.approx(0.1)
    with pytest.raises(ValueError, match="empty"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="non-finite"):
        bootstrap_ci([0.0, float("nan")])
    with pytest.raises(ValueError, match="ci must be"):
        bootstrap_ci([0.0, 1.0], ci=1.0)


def test_bootstrap_ci_is_scipys_percentile_interval_and_degenerate_samples_never_warn():
    import warnings

    from scipy.stats import bootstrap

    values = np.random.default_rng(11).integers(0, 2, 80).astype(float)
    ref = bootstrap(
        (values,), np.mean, n_resamples=700, confidence_level=0.9, method="percentile", rng=np.random.default_rng(5)
    ).confidence_interval
    assert bootstrap_ci(values, 700, 0.9, seed=5) == pytest.approx((ref.low, ref.high), abs=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's BCa would warn (and give NaN) on these
        assert bootstrap_ci(np.zeros(300)) == (0.0, 0.0)
        assert bootstrap_ci([0.25]) == (0.25, 0.25)
        assert paired_bootstrap_diff([0.0], [1.0])["lo"] == -1.0


def test_paired_diff_of_identical_vectors_is_zero():
    a = [1, 0, 1, 1, 0, 0, 1]
    out = paired_bootstrap_diff(a, list(a), samples=1000, seed=0)
    assert out == {"mean_diff": 0.0, "lo": 0.0, "hi": 0.0, "p_value": 1.0}


def test_paired_diff_hand_cases():
    # always right vs always wrong: every resampled difference is 1, none as extreme as 0
    out = paired_bootstrap_diff([1.0] * 40, [0.0] * 40, samples=999, seed=0)
    assert (out["mean_diff"], out["lo"], out["hi"]) == (1.0, 1.0, 1.0)
    assert out["p_value"] == pytest.approx(1 / 1000)
    # a constant per-question gain of 0.1 over questions of very different difficulty: pairing
    # cancels the difficulty (the interval is the point), while the unpaired CIs overlap widely
    b = [0.0, 0.9, 0.2, 0.8, 0.1, 0.7, 0.3, 0.6]
    a = [x + 0.1 for x in b]
    out = paired_bootstrap_diff(a, b, samples=1000, seed=0)
    assert (
        out["mean_diff"] == pytest.approx(0.1) and out["lo"] == pytest.approx(0.1) and out["hi"] == pytest.approx(0.1)
    )
    assert bootstrap_ci(a)[0] < bootstrap_ci(b)[1]
    # two policies that differ on one question of 20: within the noise
    x = [1.0] * 10 + [0.0] * 10
    y = list(x)
    y[0] = 0.0
    out = paired_bootstrap_diff(x, y, samples=1000, seed=0)
    assert out["mean_diff"] == pytest.approx(0.05) and out["lo"] <= 0.0 < out["hi"] and out["p_value"] > 0.2
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap_diff([1.0, 0.0], [1.0])


def _row(em, f1, type_, hops, reason="answer"):
    return {
        "em": em,
        "f1": f1,
        "subem": em,
        "format_ok": 1.0,
        "answered": 1.0,
        "tool_calls": float(hops),
        "turns": float(hops + 1),
        "reward": em,
        "type": type_,
        "hops": hops,
        "reason": reason,
        "early_answer": float(hops == 3),
    }


def test_summarize_split_by_hand():
    rows = [
        _row(1.0, 1.0, "bridge", 2),
        _row(0.0, 0.5, "bridge", 2),
        _row(1.0, 1.0, "comparison", 1),
        _row(1.0, 1.0, "comparison", 3, reason="max_turns"),
    ]
    s = summarize_split(rows, {"samples": 500, "ci": 0.95}, seed=0)
    assert s["n"] == 4 and s["em"] == 0.75 and s["f1"] == 0.875 and s["subem"] == 0.75
    assert s["tool_calls"] == 2.0 and s["turns"] == 3.0 and s["reward"] == 0.75 and s["format_ok"] == 1.0
    assert s["early_answer"] == 0.25  # a mean over all episodes
    assert s["em_ci_lower"] <= 0.75 <= s["em_ci_upper"] and s["em_ci_upper"] == 1.0
    assert s["reasons"] == {"answer": 3, "max_turns": 1}
    assert s["by_type"]["bridge"] == {
        "n": 2,
        "em": 0.5,
        "em_ci_lower": 0.0,
        "em_ci_upper": 1.0,
        "f1": 0.75,
        "subem": 0.5,
    }
    assert s["by_type"]["comparison"] == {
        "n": 2,
        "em": 1.0,
        "em_ci_lower": 1.0,
        "em_ci_upper": 1.0,
        "f1": 1.0,
        "subem": 1.0,
    }
    assert sorted(s["by_hops"]) == ["1", "2", "3"] and s["by_hops"]["2"]["n"] == 2 and s["by_hops"]["2"]["f1"] == 0.75
    assert summarize_split([], {"samples": 500, "ci": 0.95}) == {"n": 0}
    again = summarize_split(rows, SimpleNamespace(samples=500, ci=0.95), seed=0)
    assert again == s


# ---------------------------------------------------------------- answer metrics (not in test_rewards)
@pytest.mark.parametrize(
    ("answer", "golds", "em", "subem", "f1"),
    [
        ("\tAda\n  Vell ", ["ada vell"], 1.0, 1.0, 1.0),  # tabs/newlines collapse like spaces
        ("Ada-Vell", ["adavell"], 1.0, 1.0, 1.0),  # ASCII punctuation is deleted, not a separator
        ("Ada-Vell", ["Ada Vell"], 0.0, 0.0, 0.0),  # ... so the hyphenated name is one token
        ("Ada\u2013Vell", ["adavell"], 0.0, 0.0, 0.0),  # an en dash is not ASCII punctuation: kept
        ("1,000", ["1000"], 1.0, 1.0, 1.0),
        ("Anna Theron", ["anna theron"], 1.0, 1.0, 1.0),  # "an"/"the" inside words stay
        ("A Tale of Korvash", ["tale of korvash"], 1.0, 1.0, 1.0),  # a leading article goes
        ("\u00c9COLE Vell", ["\u00e9cole vell"], 1.0, 1.0, 1.0),  # case folding beyond ASCII
        # pred tokens [vell, vell, ada] vs gold [ada, vell]: common 2, P = 2/3, R = 1, F1 = 0.8
        ("Vell Vell Ada", ["Ada Vell"], 0.0, 0.0, 0.8),
        # gold "korvash" occurs in the prediction; F1: P = 1/5, R = 1 -> 2 * 0.2 / 1.2 = 1/3
        ("born in the city of Korvash", ["The Korvash"], 0.0, 1.0, 1 / 3),
        # max over golds: "oren tal" and "o tal" both give P = 1, R = 1/2 -> 2/3
        ("Tal", ["Oren Tal", "O. Tal"], 0.0, 0.0, 2 / 3),
        ("Yes.", ["yes"], 1.0, 1.0, 1.0),
        (None, ["Korvash"], 0.0, 0.0, 0.0),  # no answer scores 0 everywhere
    ],
)
def test_answer_scores_normalization_cases(answer, golds, em, subem, f1):
    got = answer_scores(answer, golds)
    assert got["em"] == em and got["subem"] == subem and got["f1"] == pytest.approx(f1)


# ------------------------------------------------------------------------------- early answer
B0, S0 = tw.questions("test")[:2]  # B0: 2 hops, support f0 (the film) + c0 (its company); S0: 1 hop, c0
FILM, COMPANY = "Drozis Letters", "Pusesu Labs"  # BM25 top 2 in the tiny world: FILM -> [f0], COMPANY -> [c0, f0]


def _play(env, q, turns):
    """One episode driven by hand in ``env``: each scripted turn is a step -> its Trajectory."""
    t = Trajectory(qid=q["id"], question=q["question"], golds=list(q["answers"]), prompt_ids=[1])
    for k, text in enumerate(turns):
        res = env.step_batch([text], [k], [q["supporting_ids"]])[0]
        t.outcomes.append(list(res.outcomes))
        t.turn_spans.append((0, 1))
        t.answer = res.answer if res.answer is not None else t.answer
        if res.done:
            break
    return t


def test_early_answer_definition():
    two = {"hops": 2, "supporting_ids": ["a", "b"]}
    assert early_answer(two, True, ["a"]) == 1.0 and early_answer(two, True, []) == 1.0
    assert early_answer(two, True, ["b", "x", "a"]) == 0.0
    assert early_answer(two, False, ["a"]) == 0.0  # no answer: never early
    assert early_answer({"hops": 1, "supporting_ids": ["a"]}, True, []) == 0.0  # single hop: never early
    assert early_answer({"hops": 2, "supporting_ids": []}, True, []) == 0.0  # nothing to retrieve
    assert (
        early_answer({"hops": 0}, True, []) == 0.0
        and early_answer({"hops": None, "supporting_ids": ["a"]}, True, []) == 0.0
    )
    assert (
        support_found(two, ["b", "x"]) == 0.5
        and support_found(two, ["a", "b"]) == 1.0
        and support_found(two, []) == 0.0
    )
    assert support_found({"supporting_ids": []}, ["a"]) is None  # nothing to find: no breakdown for it


def test_early_answer_of_hand_played_episodes():
    env = tw.env("tags")
    search, tools = (lambda x: env.fmt.render_call("search", {"query": x})), env.tools
    answer = env.fmt.render_answer(B0["answers"][0])
    with recording(env) as log:
        cases = [  # (question, turns, early_answer, retrieved)
            (B0, [search(FILM), answer], 1.0, {"f0"}),  # answered after the first hop only
            (B0, [search(FILM), search(FILM), answer], 1.0, {"f0"}),  # two searches found support, one passage
            (B0, [search(FILM), search(COMPANY), answer], 0.0, {"f0", "c0"}),  # after both supports
            (B0, [search(COMPANY), answer], 0.0, {"c0", "f0"}),  # one search brought both
            (B0, [answer], 1.0, set()),  # no search at all
            (B0, [search(FILM), "I do not know"], 0.0, {"f0"}),  # no answer: not early
            (S0, [answer], 0.0, set()),  # single hop: never early
        ]
        for q, turns, want, ids in cases:
            t = _play(log.env, q, turns)
            assert log.retrieved(t) == ids, turns
            assert early_answer(q, t.answer is not None, log.retrieved(t)) == want, turns
        # the trajectory's own record cannot tell: two searches found support, as many as the hops
        twice = _play(log.env, B0, cases[1][1])
        assert episode_metrics(twice, RewardConfig())["searches_found_support"] == 2.0 == B0["hops"]
        with pytest.raises(RuntimeError, match="did not record"):  # played outside the log's env
            log.retrieved(_play(tw.env("tags"), B0, [search(FILM), answer]))
    assert env.tools is tools  # the tools are back as they were


def test_retrieval_log_pairs_each_call_with_its_episode_in_a_batch():
    from agentr1.env import ToolEnv
    from agentr1.env.tools import make_tool

    env = ToolEnv(
        [make_tool("search", retriever=tw.retriever(), topk=2), make_tool("calculator")],
        "tags",
        multi_call="all",
        max_turns=4,
    )

    def search(x: str) -> str:
        return env.fmt.render_call("search", {"query": x})

    calc = env.fmt.render_call("calculator", {"expression": "1 + 2"})
    turns = [
        search(FILM) + calc,
        calc + search(COMPANY) + search(FILM),
        search(COMPANY) + env.fmt.render_answer("x"),
        search(""),
    ]
    with recording(env) as log:
        results = log.env.step_batch(turns, [0] * 4, [["f0", "c0"]] * 4)
        trajs = [
            Trajectory(qid=str(i), question="q", golds=["x"], prompt_ids=[1], outcomes=[list(r.outcomes)])
            for i, r in enumerate(results)
        ]
        assert [log.retrieved(t) for t in trajs] == [{"f0"}, {"c0", "f0"}, set(), set()]
        assert [len(r.outcomes) for r in results] == [2, 3, 1, 1]  # the answer's call and the blank query not executed
        # a tool that fails as a whole: the env fails its calls, which retrieved nothing
        env.tools["search"]._tool.execute_batch = lambda batch: 1 / 0
        failed = log.env.step_batch([search(FILM)], [0], [["f0"]])
        assert not failed[0].outcomes[0].success
        assert (
            log.retrieved(
                Trajectory(qid="f", question="q", golds=[], prompt_ids=[1], outcomes=[list(failed[0].outcomes)])
            )
            == set()
        )


@pytest.fixture(scope="module")
def scripted():
    """The tiny world's env, a tokenizer for it and a backend whose every turn is a given text."""
    from agentr1.rollout import Generation
    from agentr1.rollout.engine import encode

    env = tw.env("tags")
    tok = tw.tokenizer([env.fmt.render_answer(q["answers"][0]) for q in tw.questions("test")])

    class Scripted:
        def __init__(self, text):
            self.ids = encode(tok, text)

        def generate(self, prompts, max_new_tokens, stop_strings, temperature, top_p, seed):
            return [
                Generation(self.ids[:max_new_tokens], [0.0] * len(self.ids[:max_new_tokens]), "stop") for _ in prompts
            ]

    return env, tok, Scripted


def test_stage_rows_carry_early_answer_for_agents_and_naive_rag(scripted):
    env, tok, Scripted = scripted
    rollout, reward = RolloutConfig(max_turn_tokens=32, max_total_tokens=1024, batch_size=4), RewardConfig()
    qs = tw.questions("test")[:4]  # b0 (2 hops), s0 (1 hop), b1, s1
    # an agent that answers at once: the multi-hop questions are answered early, the single-hop ones never
    rows, _ = tool_policy_batch(
        EvalSetup(Scripted(" <answer>Derlin Brisarn</answer>"), tok, env, rollout, reward), qs, "test"
    )
    assert [r["early_answer"] for r in rows] == [1.0, 0.0, 1.0, 0.0] and all(r["tool_calls"] == 0.0 for r in rows)
    assert [r["support_found"] for r in rows] == [0.0] * 4  # no search: no supporting passage in context
    assert list(rows[0]) == list(EPISODE_FIELDS)
    # one search for the film, then (the same turn text again) the turn limit: never answered, never early
    rows, _ = tool_policy_batch(
        EvalSetup(Scripted(f" <search>{FILM}</search>"), tok, env, rollout, reward), qs[:1], "test"
    )
    assert rows[0]["answered"] == 0.0 and rows[0]["early_answer"] == 0.0
    assert rows[0]["support_found"] == 0.5  # the film's passage, not its company's
    # naive RAG makes no call: its retrieved passages are its one retrieval's (the question as the query,
    # BM25 top 2): both supports of b0 ([f0, c0]) but not both of b1, nor the founder's passage p0
    deeper = {**qs[0], "id": "test-b0-deeper", "supporting_ids": ["f0", "c0", "p0"], "hops": 3}
    rows, _ = naive_rag_batch(
        EvalSetup(Scripted(" Derlin Brisarn</answer>"), tok, env, rollout, reward), [*qs, deeper], "test"
    )
    for q, r in zip([*qs, deeper], rows):
        got = set(env.tools["search"].execute_batch([{"query": q["question"]}])[0].metadata["ids"])
        assert r["answered"] == 1.0 and r["early_answer"] == float(
            q["hops"] >= 2 and not set(q["supporting_ids"]) <= got
        )
        assert r["support_found"] == len(set(q["supporting_ids"]) & got) / len(q["supporting_ids"])
    assert [r["early_answer"] for r in rows] == [0.0, 0.0, 1.0, 0.0, 1.0]


# ------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"splits": []}, "evaluate.splits"),
        ({"splits": ["test", "holdout"]}, "evaluate.splits"),
        ({"splits": ["test", "test"]}, "distinct"),
        ({"bootstrap": {"samples": 10}}, "evaluate.bootstrap.samples"),
        ({"bootstrap": {"ci": 1.0}}, "evaluate.bootstrap.ci"),
        ({"max_examples": 0}, "evaluate.max_examples"),
    ],
)
def test_evaluate_config_is_validated(section, words):
    with pytest.raises(ConfigError, match=words):
        config_from_dict({"evaluate": section})


def test_evaluate_config_register_alias():
    cfg = config_from_dict({"evaluate": {"register": False, "max_examples": 5}})
    assert cfg.evaluate.register_ is False and cfg.evaluate.max_examples == 5
    assert cfg.model_dump(mode="json", by_alias=True)["evaluate"]["register"] is False


# ------------------------------------------------------------------------- the stage, end to end
POLICIES = ("grpo", "cold_start", "base_tool_call", "naive_rag")


def _project_cfg(root: Path):
    ood = [q for q in tw.questions("ood") if q["hops"] == 2]
    return tw.stage_config(
        root,
        {"train": tw.questions("train"), "dev": tw.questions("dev")[:2], "test": tw.questions("test"), "ood": ood},
        rollout={"max_turn_tokens": 24, "max_total_tokens": 1024, "batch_size": 8},
        sft={"steps": 100, "batch_size": 4, "warmup_steps": 5, "lr": 1e-2, "oracle_noise": 0.0, "train_examples": None},
        train={
            "steps": 1,
            "batch_questions": 2,
            "group_size": 2,
            "micro_batch_size": 2,
            "out_dir": str(root / "runs"),
            "dev": {"every": 0},
            "checkpoint": {"every": 0},
        },
        evaluate={"out_dir": str(root / "eval"), "batch_size": 5, "bootstrap": {"samples": 200}},
        tracking={"artifact_root": str(root / "artifacts"), "trace_sample": 3},
    )


TRACKED = ("grpo", "cold_start", "naive_rag")  # MLflow is the slow part: base_tool_call and the reruns go without


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tiny world, its cold start (SFT), one tracked RL step (run grpo), then every policy evaluated
    (with MLflow tracking into a store of this module for :data:`TRACKED`), and grpo and naive
    RAG evaluated a second time."""
    root = tmp_path_factory.mktemp("evaluate")
    with pytest.MonkeyPatch.context() as mp:
        uri = f"sqlite:///{root / 'mlflow.db'}"
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
        cfg = _project_cfg(root)
        quiet = cfg.model_copy(deep=True)
        quiet.tracking.enabled = False
        stages.run("sft", quiet)
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))  # tracked: versions link to it
        metrics = {
            name: stages.run("evaluate", cfg if name in TRACKED else quiet, SimpleNamespace(policy=name))
            for name in POLICIES
        }
        first = {name: (root / "eval" / name / "metrics.json").read_bytes() for name in ("grpo", "naive_rag")}
        episodes = (root / "eval" / "grpo" / "episodes.jsonl").read_bytes()
        runs = {name: _read(root, name)[2]["mlflow"] for name in POLICIES}
        for name in ("grpo", "naive_rag"):  # a second run must write the same bytes
            stages.run("evaluate", quiet, SimpleNamespace(policy=name))
        yield SimpleNamespace(
            root=root, cfg=cfg, uri=uri, metrics=metrics, first=first, first_episodes=episodes, runs=runs
        )


def _read(root: Path, name: str):
    out = root / "eval" / name
    metrics = json.loads((out / "metrics.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return metrics, episodes, json.loads((out / "timing.json").read_text())


@pytest.mark.parametrize("name", POLICIES)
def test_outputs_per_policy(project, name):
    metrics, episodes, timing = _read(project.root, name)
    assert metrics == json.loads(json.dumps(project.metrics[name]))
    kind = "rl" if name == "grpo" else name
    assert metrics["policy"] == name and metrics["kind"] == kind
    assert metrics["overrides"] == ({"estimator": "grpo"} if name == "grpo" else None)
    ckpt = {"grpo": project.root / "runs" / "grpo" / "checkpoint", "base_tool_call": project.root / "models" / "init"}
    assert metrics["checkpoint"] == str(ckpt.get(name, project.root / "models" / "sft"))
    assert metrics["bootstrap"] == {"samples": 200, "ci": 0.95} and "time_s" not in metrics

    sizes = {"test": 12, "ood": 6}
    assert sorted(metrics["splits"]) == ["ood", "test"]
    for split, n in sizes.items():
        s = metrics["splits"][split]
        assert s["n"] == n == metrics[f"{split}/n"]
        rows = [r for r in episodes if r["split"] == split]
        assert len(rows) == n and len({r["id"] for r in rows}) == n
        for m in ("em", "f1", "subem"):
            assert s[f"{m}_ci_lower"] <= s[m] <= s[f"{m}_ci_upper"]
            assert metrics[f"{split}/{m}"] == s[m] and metrics[f"{split}/{m}_ci_lower"] == s[f"{m}_ci_lower"]
            assert s[m] == pytest.approx(sum(r[m] for r in rows) / n, abs=1e-6)
        for group in (*s["by_type"].values(), *s["by_hops"].values()):
            assert group["em_ci_lower"] <= group["em"] <= group["em_ci_upper"]
        assert sum(g["n"] for g in s["by_hops"].values()) == n
        # early_answer: 0/1 per episode, 0 for a single-hop one; the split's is the mean over all episodes
        assert all(r["early_answer"] in (0.0, 1.0) and (r["hops"] >= 2 or r["early_answer"] == 0.0) for r in rows)
        assert (
            metrics[f"{split}/early_answer"]
            == s["early_answer"]
            == pytest.approx(sum(r["early_answer"] for r in rows) / n, abs=1e-6)
        )
    assert metrics["splits"]["test"]["by_hops"].keys() == {"1", "2"}
    assert [(r["split"], r["id"]) for r in episodes] == sorted((r["split"], r["id"]) for r in episodes)
    assert all(list(r) == sorted(EPISODE_FIELDS) for r in episodes)  # written with sorted keys
    assert {r["type"] for r in episodes} == {"bridge"} and {r["hops"] for r in episodes} == {1, 2}
    if name == "naive_rag":
        assert all(r["tool_calls"] == 0.0 and r["turns"] == 1.0 for r in episodes)
    assert timing["time_s"]["total"] > 0 and set(timing) == {"time_s", "device", "mlflow"}
    assert bool(project.runs[name]["run_id"]) == (name in TRACKED)


def test_policies_differ_as_expected(project):
    m = project.metrics
    # the cold start learned the format and answers some questions (its base here is untrained: no
    # reading was pretrained); the base policy cannot even write a call
    assert m["cold_start"]["test/format_ok"] > 0.5 and m["cold_start"]["test/em"] > 0
    assert m["base_tool_call"]["test/format_ok"] == 0.0 and m["base_tool_call"]["test/em"] == 0.0
    assert m["grpo"]["test/tool_calls"] > 0 and m["naive_rag"]["test/tool_calls"] == 0.0


def test_metrics_are_deterministic(project):
    for name in ("grpo", "naive_rag"):
        assert (project.root / "eval" / name / "metrics.json").read_bytes() == project.first[name]
    assert (project.root / "eval" / "grpo" / "episodes.jsonl").read_bytes() == project.first_episodes


def test_mlflow_run_metrics_traces_and_table(project):
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import SpanType

    client = MlflowClient(tracking_uri=project.uri)
    for name, stage_key, types in (
        ("grpo", "evaluate@grpo", {SpanType.AGENT, SpanType.LLM, SpanType.RETRIEVER}),
        ("naive_rag", "evaluate_baseline@naive_rag", {SpanType.AGENT, SpanType.LLM}),
    ):
        _, episodes, _ = _read(project.root, name)
        run = client.get_run(project.runs[name]["run_id"])
        assert run.info.status == "FINISHED" and run.info.run_name == stage_key
        assert run.data.tags["agentr1.stage"] == "evaluate" and run.data.tags["agentr1.policy"] == name
        assert run.data.metrics["test/em"] == project.metrics[name]["test/em"]
        assert run.data.metrics["ood/em_ci_upper"] == project.metrics[name]["ood/em_ci_upper"]
        mlflow.set_tracking_uri(project.uri)
        traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, return_type="list")
        assert len(traces) == 6  # trace_sample 3 per split
        assert sorted(t.info.tags["agentr1.split"] for t in traces) == ["ood"] * 3 + ["test"] * 3
        seen = {s.span_type for t in traces for s in t.data.spans}
        assert types <= seen
        by_id = {r["id"]: r for r in episodes}
        for t in traces:
            root = next(s for s in t.data.spans if s.parent_id is None)
            assert root.span_type == SpanType.AGENT
            assert root.outputs["answer"] == by_id[root.attributes["agentr1.qid"]]["answer"]
        table = mlflow.load_table("eval/test_trajectories.json", run_ids=[run.info.run_id])
        assert sorted(table["qid"]) == sorted(r["id"] for r in episodes if r["split"] == "test")


def test_registry_versions_aliases_and_gate(project):
    from mlflow import MlflowClient

    from agentr1.tracking.registry import version_metrics

    client = MlflowClient(tracking_uri=project.uri)
    name = project.cfg.tracking.registered_model
    versions = sorted(client.search_model_versions(f"name = '{name}'"), key=lambda v: int(v.version))
    # grpo (v1), then cold_start (v2); naive RAG has no weights of its own and is not registered
    assert [str(v.version) for v in versions] == ["1", "2"]
    first, second = project.runs["grpo"], project.runs["cold_start"]
    assert (
        first["version"] == "1"
        and first["promotion"]["decision"] == "promote"
        and first["promotion"]["champion"] == "1"
    )
    # the cold start is a baseline: its own alias, never challenger, never gated
    assert second["version"] == "2" and "promotion" not in second
    assert {
        a: str(client.get_model_version_by_alias(name, a).version) for a in ("challenger", "champion", "cold_start")
    } == {"challenger": "1", "champion": "1", "cold_start": "2"}
    # v1 links to the train@grpo run that wrote its weights
    train = client.get_run(first["train_run_id"])
    assert train.info.run_name == "train@grpo" and versions[0].tags["agentr1.train_run_id"] == train.info.run_id
    assert versions[0].tags["agentr1.checkpoint_sha256"] == train.data.tags["agentr1.checkpoint_sha256"]
    assert (
        versions[0].description.startswith("grpo: weights from [train@grpo](#/experiments/")
        and "train_run_id" not in versions[1].tags
    )
    champion = client.get_model_version_by_alias(name, "champion")
    assert champion.tags["agentr1.gate.decision"] == "promote"
    assert "agentr1.gate.decision" not in versions[1].tags  # the baseline is not gated
    eval_data = project.metrics["grpo"]["eval_data"]
    assert {v.tags["agentr1.eval_data"] for v in versions} == {eval_data}
    got = version_metrics(client, champion)
    assert got["test/em"] == project.metrics["grpo"]["test/em"]
    assert got["test/em_ci_lower"] <= got["test/em"] <= got["test/em_ci_upper"]
    assert "version" not in project.runs["naive_rag"]


# ------------------------------------------------------------------------------------- errors
def test_unknown_and_missing_policies_are_clear_errors(project, tmp_path, capsys):
    from agentr1.cli import main

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(project.cfg.model_dump(mode="json", by_alias=True)))
    assert main(["--params", str(params), "evaluate", "--policy", "gpt5"]) == 1
    err = capsys.readouterr().err
    assert "unknown policy 'gpt5'" in err and "grpo" in err and "cold_start, base_tool_call, naive_rag" in err
    assert main(["--params", str(params), "evaluate", "--policy", "ppo"]) == 1  # never trained
    assert "agentr1 train --run ppo" in capsys.readouterr().err
    cfg = project.cfg.model_copy(deep=True)
    cfg.pretrain.out_dir = str(tmp_path / "nothing")
    with pytest.raises(StageError, match="agentr1 pretrain"):
        stages.run("evaluate", cfg, SimpleNamespace(policy="base_tool_call"))


def test_gate_metric_must_be_evaluated(project):
    cfg = project.cfg.model_copy(deep=True)
    cfg.evaluate.splits = ["ood"]
    with pytest.raises(StageError, match="tracking.gate_metric 'test/em'"):
        stages.run("evaluate", cfg, SimpleNamespace(policy="cold_start"))
    cfg.evaluate.register_ = False  # without registration the split choice is free
    cfg.evaluate.max_examples = 2
    cfg.evaluate.out_dir = str(project.root / "eval_ood")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", project.uri)
        mp.setattr("agentr1.data.validation.require_validated", lambda c: None)
        metrics = stages.run("evaluate", cfg, SimpleNamespace(policy="cold_start"))
    assert list(metrics["splits"]) == ["ood"] and metrics["ood/n"] == 2
    ids = [
        json.loads(line)["id"]
        for line in (project.root / "eval_ood" / "cold_start" / "episodes.jsonl").read_text().splitlines()
    ]
    assert ids == ["ood-b0", "ood-b1"]  # the first N of the split, in dataset order
