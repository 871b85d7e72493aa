"""SFT on oracle trajectories: the loss is the NLL of action tokens only, training lowers it, a
tiny model learns to reproduce an oracle search, and the stage starts from the base policy and
writes everything (the cold start, deterministic metrics, the MLflow loss curve) or nothing."""

from __future__ import annotations

import csv
import json

import pytest
import torch

import tiny_world as tw
from agentr1 import stages
from agentr1.config import RolloutConfig, SFTConfig
from agentr1.errors import StageError
from agentr1.lm.schedule import lr_at
from agentr1.lm.sft import (
    _sft_update,
    action_logprobs,
    batch_indices,
    common_prefix_length,
    copy_probe,
    copyable_positions,
    mean_action_nll,
    sft_loss,
    train_sft,
)
from agentr1.models import build_scratch_model, load_checkpoint
from agentr1.models.forward import shared_prefix_length
from agentr1.rollout import collate
from agentr1.rollout.hf import HFBackend
from agentr1.rollout.oracle import corpus_titles, oracle_rollout, oracle_texts, plan_all, unique_questions
from agentr1.stages import sft as sft_stage

torch.set_num_threads(1)
ROLLOUT = RolloutConfig(max_turn_tokens=64, max_total_tokens=1024, batch_size=4)


@pytest.fixture(scope="module")
def world():
    env = tw.env("tags")
    qs = unique_questions(tw.questions())
    plans = plan_all(qs, corpus_titles(tw.corpus()), env.fmt, 0.0, 0, env.max_turns, lead_space=True)
    tok = tw.tokenizer(oracle_texts(qs, env, plans))
    trajs = oracle_rollout(qs, env, tok, ROLLOUT, plans)
    return env, qs, plans, tok, trajs


def _manual_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["action_mask"][:, 1:].float()
    return -(logp * mask).sum() / mask.sum()


def test_loss_is_the_mean_nll_of_action_tokens(world):
    *_, tok, trajs = world
    model = tw.model(tok)
    batch = collate(trajs[:4], tok.pad_token_id)
    loss, n = sft_loss(model, batch)
    assert n == sum(t.num_action_tokens for t in trajs[:4])
    assert torch.allclose(loss, _manual_loss(model, batch), atol=1e-5)


def test_observation_labels_do_not_enter_the_loss():
    tok = tw.tokenizer([])
    model = tw.model(tok)
    ids = torch.randint(5, len(tok), (2, 30), generator=torch.Generator().manual_seed(0))
    action = torch.zeros_like(ids)
    action[:, 8:14] = 1  # a policy turn; positions 14.. are an observation
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "action_mask": action}
    loss, _ = sft_loss(model, batch)
    changed = ids.clone()
    changed[:, 20] = (changed[:, 20] + 1) % len(tok)  # an observation token's label
    same, _ = sft_loss(model, {**batch, "input_ids": changed})
    assert torch.equal(loss, same)
    changed = ids.clone()
    changed[:, 10] = (changed[:, 10] + 1) % len(tok)  # an action token's label
    other, _ = sft_loss(model, {**batch, "input_ids": changed})
    assert not torch.allclose(loss, other)
    with pytest.raises(ValueError, match="no action tokens"):
        sft_loss(model, {**batch, "action_mask": torch.zeros_like(ids)})


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    assert lr_at(0, 1.0, 4, 20) == pytest.approx(0.25)
    assert lr_at(3, 1.0, 4, 20) == pytest.approx(1.0)
    assert lr_at(4, 1.0, 4, 20) == pytest.approx(1.0)
    assert lr_at(12, 1.0, 4, 20) == pytest.approx(0.55)
    assert lr_at(20, 1.0, 4, 20) == pytest.approx(0.1)
    assert lr_at(0, 1.0, 0, 10) == pytest.approx(1.0)


def test_batches_are_seeded_permutations():
    a = batch_indices(10, 3, seed=5)
    first = [next(a) for _ in range(3)]
    assert sorted(i for b in first for i in b) == sorted(set(i for b in first for i in b))  # no repeats in an epoch
    b = batch_indices(10, 3, seed=5)
    assert [next(b) for _ in range(3)] == first
    c = batch_indices(10, 3, seed=6)
    assert [next(c) for _ in range(3)] != first
    assert next(batch_indices(2, 8, seed=0)) in ([0, 1], [1, 0])


def test_training_lowers_the_action_loss(world):
    *_, tok, trajs = world
    model = tw.model(tok)
    before = mean_action_nll(model, trajs, tok.pad_token_id)
    cfg = SFTConfig(steps=30, batch_size=4, lr=1e-2, warmup_steps=3)
    history = train_sft(model, trajs, tok.pad_token_id, cfg, seed=0, log_every=0)
    after = mean_action_nll(model, trajs, tok.pad_token_id)
    assert len(history) == 30 and [h["step"] for h in history] == list(range(1, 31))
    assert after < 0.6 * before
    assert not model.training


def test_copyable_tokens_are_action_tokens_only_the_context_supplies():
    # prefix (system prompt) 1 2 3 | question 7 8 9 | action 1 8 9 2 | observation 5 6 | action 1 6 5 4 2
    ids = [1, 2, 3, 7, 8, 9, 1, 8, 9, 2, 5, 6, 1, 6, 5, 4, 2]
    act = [False] * 6 + [True] * 4 + [False] * 2 + [True] * 5
    assert common_prefix_length([ids, ids[:3] + [0], ids[:2]]) == 2 and common_prefix_length([]) == 0
    # 1/2 are shown by the prefix (tags), 4 was never in the context; 8 9 and 6 5 are copied names
    assert copyable_positions(ids, act, prefix=3) == [(7, "start"), (8, "continue"), (13, "start"), (14, "continue")]
    assert copyable_positions(ids, act, prefix=6) == [(13, "start"), (14, "continue")]  # the question counted as shown


class _Scripted(torch.nn.Module):
    """Logits with the maximum on a chosen token per position: the next token (a perfect copier)
    or a constant one."""

    def __init__(self, vocab: int, cheat: bool):
        super().__init__()
        self.vocab, self.cheat = vocab, cheat

    def forward(self, input_ids, attention_mask):
        target = torch.roll(input_ids, -1, dims=1) if self.cheat else torch.zeros_like(input_ids)
        logits = torch.nn.functional.one_hot(target, self.vocab).float() * 30.0
        return type("Out", (), {"logits": logits})()


def test_copy_probe_scores_a_perfect_copier_one_and_a_constant_model_zero(world):
    *_, tok, trajs = world
    perfect = copy_probe(_Scripted(len(tok), cheat=True), trajs, tok.pad_token_id, batch_size=3)
    constant = copy_probe(_Scripted(len(tok), cheat=False), trajs, tok.pad_token_id)
    assert perfect["tokens"] == constant["tokens"] > 0
    assert perfect["tokens"] == perfect["start"]["tokens"] + perfect["continue"]["tokens"]
    assert perfect["top1"] == 1.0 and perfect["nll"] < 1e-3 and perfect["start"]["top1"] == 1.0
    assert constant["top1"] == 0.0 and constant["nll"] > 5
    with pytest.raises(ValueError, match="no trajectories"):
        copy_probe(_Scripted(len(tok), cheat=True), [], tok.pad_token_id)


def test_sft_is_deterministic(world):
    *_, tok, trajs = world
    cfg = SFTConfig(steps=3, batch_size=2, lr=1e-2, warmup_steps=1)
    runs = []
    for _ in range(2):
        model = tw.model(tok)
        runs.append([h["loss"] for h in train_sft(model, trajs, tok.pad_token_id, cfg, seed=3, log_every=0)])
    assert runs[0] == runs[1]


def test_trained_model_reproduces_an_oracle_search(world):
    env, qs, plans, tok, trajs = world
    model = tw.model(tok, seed=1)
    cfg = SFTConfig(steps=120, batch_size=4, lr=1e-2, warmup_steps=10)
    train_sft(model, trajs, tok.pad_token_id, cfg, seed=0, log_every=0)
    backend = HFBackend(model, tok)
    gen = backend.generate([trajs[0].prompt_ids], 32, env.stop_strings, 0.0, 1.0, 0)[0]
    assert tok.decode(gen.token_ids) == plans[0].turns[0]


# ------------------------------------------------------------------------------ the stage
def _stage_cfg(tmp_path, **sft):
    return tw.stage_config(
        tmp_path,
        {"train": tw.questions("train"), "dev": tw.questions("dev")[:4]},
        rollout={"max_turn_tokens": 24, "max_total_tokens": 1024, "batch_size": 4},
        sft={"steps": 4, "batch_size": 4, "warmup_steps": 1, "train_examples": 8, "oracle_noise": 0.2, **sft},
    )


@pytest.fixture
def validated(monkeypatch):
    calls = []
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: calls.append(cfg))
    return calls


def test_run_sft_writes_checkpoints_metrics_and_loss_curve(tmp_path, validated, monkeypatch):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    cfg = _stage_cfg(tmp_path)
    cfg.tracking.artifact_root = str(tmp_path / "artifacts")
    metrics = stages.run("sft", cfg, None)
    assert validated == [cfg]
    model, tok = load_checkpoint(cfg.sft.out_dir)
    assert sum(p.numel() for p in model.parameters()) == metrics["model"]["parameters"]
    written = json.loads((tmp_path / "sft" / "metrics.json").read_text())
    assert written == json.loads(json.dumps(metrics))
    assert set(written) == {"oracle", "train", "copy", "model"}  # the baselines moved to `agentr1 evaluate`
    copy = written["copy"]
    assert (copy["split"], copy["episodes"]) == ("dev", 4) and set(copy) >= {"base", "cold_start", "gate"}
    assert copy["cold_start"]["tokens"] == copy["base"]["tokens"] > 0  # same probe episodes for both models
    assert 0 <= copy["cold_start"]["top1"] <= 1 and copy["cold_start"]["nll"] > 0
    assert copy["gate"]["thresholds"] == {"start": 0.9, "continue": 0.95}
    assert copy["gate"]["passed"] == (
        copy["cold_start"]["start"]["top1"] >= 0.9 and copy["cold_start"]["continue"]["top1"] >= 0.95
    )
    assert written["oracle"]["n"] == 8 and written["oracle"]["em"] > 0.5
    assert written["train"]["steps"] == 4 and written["train"]["examples"] == 8 and "time_s" not in written
    timing = json.loads((tmp_path / "sft" / "timing.json").read_text())
    assert timing["time_s"]["total"] > 0 and timing["time_s"]["train"] >= 0 and timing["tokens_per_s"] > 0
    rows = list(csv.DictReader((tmp_path / "sft" / "loss.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4] and all(float(r["loss"]) > 0 for r in rows)
    assert (tmp_path / "sft" / "oracle_examples.jsonl").read_text().count("\n") == 8

    # the cold start is the base policy (pretrain.out_dir, left as it was), trained: same tokenizer, new weights
    init, init_tok = load_checkpoint(cfg.pretrain.out_dir)
    assert init_tok.get_vocab() == tok.get_vocab()
    fresh = build_scratch_model(cfg.model.scratch, init_tok, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(init.state_dict().values(), fresh.state_dict().values()))
    assert not all(torch.equal(a, b) for a, b in zip(init.state_dict().values(), model.state_dict().values()))

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(f"{cfg.tracking.experiment_prefix}-{cfg.profile}")
    [run] = client.search_runs([experiment.experiment_id], filter_string="tags.`agentr1.stage` = 'sft'")
    losses = client.get_metric_history(run.info.run_id, "sft/loss")
    assert [(m.step, round(m.value, 6)) for m in losses] == [(int(r["step"]), float(r["loss"])) for r in rows]
    assert run.data.metrics["summary/oracle.em"] == written["oracle"]["em"]
    assert run.data.metrics["summary/copy.cold_start.top1"] == copy["cold_start"]["top1"]

    # deterministic metrics: a second run writes the same bytes
    first = (tmp_path / "sft" / "metrics.json").read_bytes()
    stages.run("sft", cfg, None)
    assert (tmp_path / "sft" / "metrics.json").read_bytes() == first


def test_run_sft_needs_the_base_policy(tmp_path, validated):
    cfg = _stage_cfg(tmp_path)
    cfg.pretrain.out_dir = str(tmp_path / "no-base")
    with pytest.raises(StageError, match="agentr1 pretrain"):
        stages.run("sft", cfg, None)
    assert not (tmp_path / "sft").exists()


def test_run_sft_failure_leaves_no_output(tmp_path, validated, monkeypatch):
    cfg = _stage_cfg(tmp_path)

    def boom(*args, **kwargs):
        raise RuntimeError("training crashed")

    monkeypatch.setattr(sft_stage, "train_sft", boom)
    with pytest.raises(RuntimeError, match="training crashed"):
        stages.run("sft", cfg, None)
    assert not (tmp_path / "models" / "sft").exists()
    assert not (tmp_path / "sft").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sft")]


def test_run_sft_needs_an_index(tmp_path, validated):
    cfg = _stage_cfg(tmp_path)
    cfg.retrieval.index_dir = str(tmp_path / "missing")
    with pytest.raises(StageError, match="agentr1 index"):
        stages.run("sft", cfg, None)


def test_shared_prefix_gives_the_same_loss_and_gradients(world):
    *_, tok, trajs = world
    batch = collate(trajs[:4], tok.pad_token_id)
    assert shared_prefix_length(batch) > 16  # the system prompt and chat header
    grads, losses = [], []
    for share in (True, False):
        model = tw.model(tok)
        logp, mask = action_logprobs(model, batch, share_prefix=share)
        loss = -(logp * mask).sum() / mask.sum()
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    assert torch.allclose(losses[0], losses[1], atol=1e-6)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_trainer_logprob_pass_shares_the_prefix_without_changing_anything(world):
    from agentr1.models.forward import PolicyLogProbs

    *_, tok, trajs = world
    batch = collate(trajs[:4], tok.pad_token_id)
    ids, attn, target = batch["input_ids"], batch["attention_mask"], batch["action_mask"]
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(0))
    outs = []
    for share in (True, False):
        model = tw.model(tok)
        logp, ent = PolicyLogProbs(model, temperature=0.7, share_prefix=share)(ids, attn, target, with_entropy=True)
        (logp * weights).sum().backward()
        outs.append((logp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp1, e1, g1), (lp0, e0, g0) = outs
    assert (lp0 != 0).sum() == target[:, 1:].sum()  # one log-prob per action token after the first column
    assert torch.allclose(lp1, lp0, atol=1e-5) and torch.allclose(e1, e0, atol=1e-5)
    for a, b in zip(g1, g0):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_shared_prefix_never_covers_an_action_token():
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7]])
    action = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "action_mask": action}
    assert shared_prefix_length(batch, min_length=1) == 2  # position 2 predicts the first action token
    assert shared_prefix_length(batch, min_length=3) == 0
    assert shared_prefix_length({k: v[:1] for k, v in batch.items()}, min_length=1) == 0


def test_critic_shares_the_prefix_and_gives_the_same_values_where_they_are_used(world):
    from agentr1.rl.critic import ValueModel

    *_, tok, trajs = world
    batch = collate(trajs[:4], tok.pad_token_id)
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["action_mask"]
    assert shared_prefix_length(batch) > 16
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(0))
    outs = []
    for share in (True, False):
        model = tw.model(tok)
        critic = ValueModel(model.base_model, model.config.hidden_size, share_prefix=share)
        torch.nn.init.normal_(critic.value_head.weight, generator=torch.Generator().manual_seed(1))
        v = critic(ids, attn, mask)
        (v * weights * mask).sum().backward()
        outs.append((v.detach(), [p.grad.clone() for p in critic.parameters()]))
    (v1, g1), (v0, g0) = outs
    used = mask.bool()
    assert torch.allclose(v1[used], v0[used], atol=1e-5)
    assert (v1[:, : shared_prefix_length(batch) + 1] == 0).all()  # inside the shared prefix: not computed
    for a, b in zip(g1, g0):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("loss_on", ["actions", "response"])
def test_micro_batches_accumulate_the_whole_batch_gradient(world, loss_on):
    """sft.micro_batch_size: the batch in micro-batches of 1 and 3 gives the whole batch's loss,
    target count and gradient (up to float rounding), so the update is the same, with one
    micro-batch's activations held at a time (issue 49: SmolLM2 peaked at 8.5 GB on a batch of 8)."""
    *_, tok, trajs = world
    batch = collate(trajs[:5], tok.pad_token_id)

    def update(micro):
        model = tw.model(tok)
        rows = []  # the rows of every forward: at most `micro` at a time
        model.get_input_embeddings().register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
        cfg = SFTConfig(steps=1, batch_size=5, micro_batch_size=micro, loss_on=loss_on, lr=1e-2, warmup_steps=0)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        loss, _, n = _sft_update(model, opt, sched, batch, cfg, 0)
        return loss, n, [p.grad.clone() for p in model.parameters() if p.grad is not None], max(rows)

    whole = update(None)
    assert whole[3] == 5
    for micro in (1, 3):
        part = update(micro)
        assert part[3] == micro
        assert part[1] == whole[1] and part[0] == pytest.approx(whole[0], rel=1e-5)
        assert len(part[2]) == len(whole[2])
        for a, b in zip(part[2], whole[2]):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert update(5)[0] == whole[0]  # a micro-batch as large as the batch is the whole batch, same bits
