"""The rollout engine on a tiny scratch model and a scripted fake env: token-exact trajectories,
masks, log-probs that a training forward pass reproduces, truncation, early finishers leaving
the batch, storage round trips."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from agentr1.config import ModelConfig, RolloutConfig, ScratchModelConfig
from agentr1.env.base import CallOutcome, StepResult
from agentr1.models import build_scratch_model, load_policy, train_tokenizer
from agentr1.rollout import (
    RolloutEngine,
    Trajectory,
    collate,
    first_stop,
    load_trajectories,
    make_backend,
    save_trajectories,
)
from agentr1.rollout.engine import decode
from agentr1.rollout.hf import HFBackend

torch.set_num_threads(1)

OBS = "\n<information>Doc 1 (Vantrix Holdings): founded by Zorvath Quellin in Brindlemoor.</information>\n"
TINY = ScratchModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, max_position=512
)
QUESTIONS = [
    {
        "id": "q0",
        "question": "Who founded Vantrix Holdings?",
        "answers": ["Zorvath Quellin"],
        "supporting_ids": ["turns:3"],
    },
    {"id": "q1", "question": "Where was Kael Veshtar born?", "answers": ["Trelloway"], "supporting_ids": ["turns:1"]},
    {
        "id": "q2",
        "question": "Which film did Kael Veshtar direct first, and when?",
        "answers": ["Ombrel Dusk"],
        "supporting_ids": ["turns:4"],
    },
]


class FakeEnv:
    """Scripted env. Its script is the question's ``supporting_ids``: ``["turns:N"]`` makes the
    episode end with an answer after N policy turns (``never_answer`` overrides); every other
    turn gets the fixed observation ``OBS``. Records every ``step_batch`` call."""

    format = "tags"
    stop_strings = ["</search>", "</answer>"]

    def __init__(self, observation=OBS, never_answer=False):
        self.observation = observation
        self.never_answer = never_answer
        self.calls: list[tuple[list[str], list[int], list[list[str]] | None]] = []

    def system_prompt(self) -> str:
        return "Search with <search> query </search>, answer with <answer> x </answer>."

    def user_prompt(self, question: str) -> str:
        return f"Question: {question}"

    def step_batch(self, turn_texts, turn_indices, supporting_ids=None):
        self.calls.append((list(turn_texts), list(turn_indices), supporting_ids))
        out = []
        for text, k, support in zip(turn_texts, turn_indices, supporting_ids):
            limit = int(support[0].split(":")[1])
            outcome = CallOutcome(name="search", valid=True, success=True, end=len(text), found_support=k == 0)
            if not self.never_answer and k + 1 >= limit:
                out.append(StepResult("", True, "answer", answer="Zorvath Quellin", outcomes=[outcome]))
            else:
                out.append(StepResult(self.observation, False, "continue", outcomes=[outcome]))
        return out


class SpyBackend:
    """Records every prompt batch handed to the wrapped backend."""

    def __init__(self, inner):
        self.inner = inner
        self.batches: list[list[list[int]]] = []

    def generate(self, prompts, *args):
        self.batches.append([list(p) for p in prompts])
        return self.inner.generate(prompts, *args)

    def reset(self):
        self.inner.reset()

    @property
    def counters(self):
        return self.inner.counters


def _turns(q) -> int:
    return int(q["supporting_ids"][0].split(":")[1])


@pytest.fixture(scope="module")
def tok():
    env = FakeEnv()
    texts = [env.system_prompt(), OBS] + [env.user_prompt(q["question"]) for q in QUESTIONS]
    return train_tokenizer(texts * 10, TINY.vocab_size)


@pytest.fixture(scope="module")
def model(tok):
    return build_scratch_model(TINY, tok, seed=0)


def _engine(model, tok, never_answer=False, max_turns=None, reuse_cache=True, **cfg):
    rcfg = RolloutConfig(**{"max_turn_tokens": 12, "max_total_tokens": 400, "batch_size": 8, "temperature": 1.0, **cfg})
    env = FakeEnv(never_answer=never_answer)
    backend = HFBackend(model, tok, reuse_cache=reuse_cache)
    return RolloutEngine(SpyBackend(backend), env, tok, rcfg, max_turns=max_turns), env


@pytest.fixture(scope="module")
def rolled(model, tok):
    engine, env = _engine(model, tok)
    trajs = engine.rollout(QUESTIONS, group_size=2, seed=7)
    return engine, env, trajs


def test_action_mask_marks_exactly_the_sampled_tokens(rolled, tok):
    engine, env, trajs = rolled
    assert max(t.num_turns for t in trajs) >= 3
    for t in trajs:
        t.check()
        expected = [0] * len(t.response_ids)
        for s, e in t.turn_spans:
            expected[s:e] = [1] * (e - s)
        assert t.action_mask == expected
        # every observation token is exactly the single tokenization of the observation text
        obs_ids = [i for i, m in zip(t.response_ids, t.action_mask) if m == 0]
        assert obs_ids == [x for o in t.observations for x in tok(o, add_special_tokens=False)["input_ids"]]
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.action_mask) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(t.logprobs, t.action_mask) if m == 1)


def test_turns_and_reasons_follow_the_env(rolled):
    _, _, trajs = rolled
    by_q = {q["id"]: _turns(q) for q in QUESTIONS}
    for t in trajs:
        assert t.num_turns == by_q[t.qid] and t.reason == "answer" and t.answer == "Zorvath Quellin"
        assert len(t.outcomes) == t.num_turns and t.outcomes[0][0].found_support is True
        assert len(t.observations) == t.num_turns - 1
    assert [t.sample_index for t in trajs] == [0, 1] * len(QUESTIONS)
    assert [t.golds for t in trajs[::2]] == [q["answers"] for q in QUESTIONS]


def test_decoding_reproduces_what_the_env_saw(rolled, tok):
    _, env, trajs = rolled
    seen = {}
    for texts, indices, _ in env.calls:
        for text, k in zip(texts, indices):
            seen.setdefault(k, []).append(text)
    for t in trajs:
        for k, (s, e) in enumerate(t.turn_spans):
            assert decode(tok, t.response_ids[s:e]) == t.turn_texts[k]
            assert t.turn_texts[k] in seen[k]
        interleaved = "".join(
            x + (t.observations[k] if k < len(t.observations) else "") for k, x in enumerate(t.turn_texts)
        )
        assert decode(tok, t.response_ids) == interleaved == t.response_text
        assert decode(tok, t.prompt_ids) == t.prompt_text
        assert t.prompt_text.endswith("<|im_start|>assistant\n") and "Question: " in t.prompt_text


def test_env_gets_turn_indices_and_supporting_ids(rolled):
    _, env, _ = rolled
    first_texts, first_idx, first_support = env.calls[0]
    assert first_idx == [0] * 6
    assert first_support == [q["supporting_ids"] for q in QUESTIONS for _ in range(2)]
    assert [c[1][0] for c in env.calls] == list(range(len(env.calls)))


def test_sampling_logprobs_match_a_training_forward_pass(rolled, model, tok):
    _, _, trajs = rolled
    batch = collate(trajs, tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    recomputed = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["action_mask"][:, 1:].bool()
    assert mask.sum() == sum(t.num_action_tokens for t in trajs)
    diff = (recomputed - batch["logprobs"][:, 1:])[mask].abs().max().item()
    assert diff < 1e-4, diff


def test_logprobs_use_the_sampling_temperature(model, tok):
    engine, _ = _engine(model, tok, temperature=0.7)
    trajs = engine.rollout(QUESTIONS[:2], seed=1)
    batch = collate(trajs, tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    recomputed = torch.log_softmax(logits[:, :-1] / 0.7, -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["action_mask"][:, 1:].bool()
    assert (recomputed - batch["logprobs"][:, 1:])[mask].abs().max().item() < 1e-4


def test_finished_samples_are_not_generated_again(rolled, model, tok):
    engine, _, trajs = rolled
    sizes = [len(b) for b in engine.backend.batches]
    # q1 (2 samples) answers after turn 0, q0 after turn 2, q2 after turn 3
    assert sizes == [6, 4, 4, 2]
    q1_prompt = trajs[2].prompt_ids
    for batch in engine.backend.batches[1:]:
        assert all(p[: len(q1_prompt)] != q1_prompt for p in batch)


def test_rollout_is_deterministic_for_a_seed(model, tok):
    a = _engine(model, tok)[0].rollout(QUESTIONS, seed=3)
    b = _engine(model, tok)[0].rollout(QUESTIONS, seed=3)
    c = _engine(model, tok)[0].rollout(QUESTIONS, seed=4)
    assert [t.response_ids for t in a] == [t.response_ids for t in b]
    assert [t.logprobs for t in a] == [t.logprobs for t in b]
    assert [t.response_ids for t in a] != [t.response_ids for t in c]


def test_micro_batches_respect_batch_size(model, tok):
    engine, _ = _engine(model, tok, batch_size=2)
    engine.rollout(QUESTIONS, group_size=2, seed=0)
    assert max(len(b) for b in engine.backend.batches) == 2


def test_max_turns_truncation(model, tok):
    engine, env = _engine(model, tok, never_answer=True, max_turns=2, max_turn_tokens=6)
    trajs = engine.rollout(QUESTIONS, seed=0)
    assert all(t.num_turns == 2 and t.reason == "max_turns" and t.answer is None for t in trajs)
    assert [c[1] for c in env.calls] == [[0, 0, 0], [1, 1, 1]]


def test_max_length_truncation(model, tok):
    prompt_len = max(len(_engine(model, tok)[0].prompt_ids(q)) for q in QUESTIONS)
    limit = prompt_len + 20
    engine, env = _engine(model, tok, never_answer=True, max_turn_tokens=12, max_total_tokens=limit)
    trajs = engine.rollout(QUESTIONS, seed=0)
    for t in trajs:
        t.check()
        assert t.reason == "max_length"
        assert len(t.input_ids) == limit  # filled exactly: turn, then the observation cut to fit
        assert all(e - s <= 12 for s, e in t.turn_spans)
        interleaved = "".join(
            x + (t.observations[k] if k < len(t.observations) else "") for k, x in enumerate(t.turn_texts)
        )
        assert decode(tok, t.response_ids) == interleaved


def test_prompt_longer_than_limit_ends_without_turns(model, tok):
    engine, env = _engine(model, tok, max_total_tokens=16)
    trajs = engine.rollout(QUESTIONS[:1], seed=0)
    assert trajs[0].reason == "max_length" and trajs[0].num_turns == 0 and env.calls == []
    assert engine.backend.batches == []


def test_token_index_for_char_places_call_ends(rolled, tok):
    _, _, trajs = rolled
    t = trajs[0]
    for k, (s, e) in enumerate(t.turn_spans):
        text = t.turn_texts[k]
        for c in range(len(text)):
            idx = t.token_index_for_char(k, c)
            assert s <= idx < e
            assert len(decode(tok, t.response_ids[s : idx + 1])) > c >= len(decode(tok, t.response_ids[s:idx]))
        end = t.outcomes[k][0].end
        assert t.token_index_for_char(k, end - 1) == e - 1
        with pytest.raises(IndexError):
            t.token_index_for_char(k, len(text))


def test_first_stop_trims_after_stop_string_or_eos(tok):
    ids = tok("abc <search> q </search> tail", add_special_tokens=False)["input_ids"]
    k, why = first_stop(tok, ids, ["</search>"], {tok.eos_token_id})
    assert why == "stop" and decode(tok, ids[:k]) == "abc <search> q </search>"
    ids2 = tok("abc<|im_end|>def", add_special_tokens=False)["input_ids"]
    k2, why2 = first_stop(tok, ids2, ["</search>"], {tok.eos_token_id})
    assert why2 == "eos" and decode(tok, ids2[:k2]) == "abc<|im_end|>"
    assert first_stop(tok, ids2[:1], ["</search>"], {tok.eos_token_id}) == (1, "length")


def test_hf_backend_stops_on_a_stop_string_and_keeps_logprobs(model, tok):
    backend = HFBackend(model, tok)
    prompts = [
        tok("Question: Who founded", add_special_tokens=False)["input_ids"],
        tok("Hi", add_special_tokens=False)["input_ids"],
    ]
    free = backend.generate(prompts, 8, [], 0.0, 1.0, 0)
    assert all(len(g.token_ids) == 8 and g.finish == "length" for g in free if tok.eos_token_id not in g.token_ids)
    stop = decode(tok, free[0].token_ids[:3])
    stopped = backend.generate(prompts[:1], 8, [stop], 0.0, 1.0, 0)[0]
    assert stopped.finish == "stop" and stopped.token_ids == free[0].token_ids[: len(stopped.token_ids)]
    # the prompt ends in the same words: only generated text may match the stop string
    assert decode(tok, stopped.token_ids) == stop and len(stopped.token_ids) == 3
    assert stopped.logprobs == pytest.approx(free[0].logprobs[: len(stopped.token_ids)], abs=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_kv_cache_reuse_changes_nothing_but_the_prefill(model, tok, temperature):
    runs = {}
    for reuse in (True, False):
        engine, _ = _engine(model, tok, reuse_cache=reuse, temperature=temperature, batch_size=4)
        runs[reuse] = (engine.rollout(QUESTIONS, group_size=2, seed=11), dict(engine.stats))
    (cached, s1), (plain, s0) = runs[True], runs[False]
    assert [t.response_ids for t in cached] == [t.response_ids for t in plain]
    for a, b in zip(cached, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    # every later turn reused its row's history and the first turn the shared system prompt
    # (run once): only question tails, observations and the odd unfed last token were prefilled
    assert s0["reused_tokens"] == s0["shared_prefix_tokens"] == 0 and s1["shared_prefix_tokens"] > 16
    assert s1["prefilled_tokens"] - s1["shared_prefix_tokens"] + s1["reused_tokens"] == s0["prefilled_tokens"]
    assert s1["prefilled_tokens"] < 0.6 * s0["prefilled_tokens"]
    assert engine.backend.inner.store.entries == {}  # dropped after the rollout


def test_cached_states_are_dropped_when_the_weights_change(tok):
    model = build_scratch_model(TINY, tok, seed=3)
    backend = HFBackend(model, tok)
    prompt = tok("Question: Who founded", add_special_tokens=False)["input_ids"]
    first = backend.generate([prompt], 6, [], 0.0, 1.0, 0)[0]
    follow = prompt + first.token_ids + tok(OBS, add_special_tokens=False)["input_ids"]
    assert backend.store.take(follow)[0] == len(prompt) + len(first.token_ids)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    again = backend.generate([follow], 6, [], 0.0, 1.0, 0)[0]
    assert backend.counters["reused"] == 0  # the step's in-place writes invalidated the store
    fresh = HFBackend(model, tok, reuse_cache=False).generate([follow], 6, [], 0.0, 1.0, 0)[0]
    assert again.token_ids == fresh.token_ids
    assert again.logprobs == pytest.approx(fresh.logprobs, abs=1e-5)


def test_prefix_store_takes_the_longest_prefix_and_stays_bounded():
    from agentr1.rollout.hf import _PrefixStore

    kv = lambda n: [(torch.zeros(1, n, 2), torch.zeros(1, n, 2))]  # noqa: E731 - 16 bytes per token
    store = _PrefixStore(max_bytes=16 * 10)
    store.put((1, 2), kv(2))
    store.put((1, 2, 3, 4), kv(4))
    assert store.take([1, 2, 3, 4, 5])[0] == 4
    assert store.take([1, 2, 9])[0] == 2
    assert store.take([7, 1, 2]) == (0, None)
    store.put((5, 6, 7, 8, 9), kv(5))  # 11 tokens > 10: the least recently used entry goes
    assert (1, 2, 3, 4) not in store.entries and store.nbytes == 16 * 7


def test_hermes_chat_wrapping_keeps_chat_structure(model, tok):
    engine, _ = _engine(model, tok, max_turn_tokens=8, observation_wrap="chat")
    trajs = engine.rollout(QUESTIONS[:1], seed=0)
    obs = trajs[0].observations[0]
    assert obs == "<|im_end|>\n<|im_start|>user\n" + OBS.strip("\n") + "<|im_end|>\n<|im_start|>assistant\n"
    assert engine.wrap_observation("x", "turn<|im_end|>") == "\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    # auto: the env's format picks the wrapping
    hermes_env = FakeEnv()
    hermes_env.format = "hermes"
    assert RolloutEngine(engine.backend, hermes_env, tok, RolloutConfig()).wrap == "chat"
    assert RolloutEngine(engine.backend, FakeEnv(), tok, RolloutConfig()).wrap == "inline"


def test_save_load_parquet_and_jsonl(rolled, tmp_path):
    _, _, trajs = rolled
    trajs = [Trajectory.from_dict(t.to_dict()) for t in trajs]
    trajs[0].outcome_reward = 1.0
    trajs[0].process_rewards = [0.0] * len(trajs[0].response_ids)
    trajs[0].process_rewards[trajs[0].token_index_for_char(0, trajs[0].outcomes[0][0].end - 1)] = 0.1
    for name in ("t.parquet", "t.jsonl"):
        save_trajectories(trajs, tmp_path / name)
        back = load_trajectories(tmp_path / name)
        assert [b.to_dict() for b in back] == [t.to_dict() for t in trajs]
        assert isinstance(back[0].turn_spans[0], tuple)
    with pytest.raises(ValueError, match="parquet"):
        save_trajectories(trajs, tmp_path / "t.csv")


def test_outcomes_are_call_outcomes_in_memory_and_field_dicts_on_disk(rolled, tmp_path):
    """The engine keeps each call's CallOutcome; to_dict writes it as the dict of its fields (the
    saved format of every committed trajectory file) and from_dict / load_trajectories rebuild it."""
    _, _, trajs = rolled
    t = trajs[0]
    assert all(isinstance(o, CallOutcome) for turn in t.outcomes for o in turn) and t.outcomes[0]
    d = t.to_dict()
    assert d["outcomes"] == [[dataclasses.asdict(o) for o in turn] for turn in t.outcomes]
    assert list(d["outcomes"][0][0]) == ["name", "valid", "success", "end", "found_support", "error"]
    assert Trajectory.from_dict(json.loads(json.dumps(d))) == t
    save_trajectories([t], tmp_path / "t.jsonl")
    line = (tmp_path / "t.jsonl").read_text().strip()
    assert line == json.dumps(d, ensure_ascii=False, sort_keys=True)
    assert load_trajectories(tmp_path / "t.jsonl") == [t]
    d["outcomes"][0][0] = {"name": "search", "valid": True}
    with pytest.raises(
        ValueError, match=r"outcomes\[0\] holds .*not the fields of a CallOutcome \(name, valid, success, end"
    ):
        Trajectory.from_dict(d)


def test_collate_pads_and_aligns(rolled, tok):
    _, _, trajs = rolled
    trajs = [Trajectory.from_dict(t.to_dict()) for t in trajs[:3]]
    batch = collate(trajs, tok.pad_token_id)
    L = max(len(t.input_ids) for t in trajs)
    assert batch["input_ids"].shape == (3, L) and "outcome_rewards" not in batch
    for b, t in enumerate(trajs):
        n, p = len(t.input_ids), len(t.prompt_ids)
        assert batch["input_ids"][b, :n].tolist() == t.input_ids
        assert batch["attention_mask"][b].sum() == n and batch["response_start"][b] == p
        assert batch["action_mask"][b, :p].sum() == 0 and batch["action_mask"][b, p:n].tolist() == t.action_mask
        assert (batch["input_ids"][b, n:] == tok.pad_token_id).all()
    for t in trajs:
        t.outcome_reward, t.process_rewards = 0.5, [0.0] * len(t.response_ids)
    batch = collate(trajs, tok.pad_token_id)
    assert batch["outcome_rewards"].tolist() == [0.5] * 3 and batch["process_rewards"].shape == (3, L)


def test_vllm_backend_missing_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    with pytest.raises(ImportError, match=r"\[gpu\]"):
        make_backend(RolloutConfig(backend="vllm"), model_path="/nonexistent")


@pytest.mark.slow
def test_smollm2_gguf_loads_offline_and_rolls_out(tmp_path):
    cfg = ModelConfig(kind="gguf", cache_dir=str(tmp_path / "models"))
    model, tok = load_policy(cfg)
    assert model.config.model_type == "llama" and getattr(model.config, "quantization_config", None) is None
    assert any((tmp_path / "models").glob("*/model.safetensors"))
    questions = [dict(QUESTIONS[0], supporting_ids=["turns:2"])]
    rcfg = RolloutConfig(max_turn_tokens=8, max_total_tokens=512, temperature=1.0)
    env = FakeEnv()
    engine = RolloutEngine(HFBackend(model, tok), env, tok, rcfg)
    (t,) = engine.rollout(questions, seed=0)
    assert t.num_turns == 2 and t.reason == "answer"
    assert decode(tok, t.response_ids) == t.response_text
    batch = collate([t], tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits
    recomputed = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["action_mask"][:, 1:].bool()
    assert (recomputed - batch["logprobs"][:, 1:])[mask].abs().max().item() < 1e-3
    reloaded, _ = load_policy(cfg)  # second call reuses the safetensors cache
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
