"""Pretraining the base policy to read: the loss sits on the targets it says, the output head on
targets only gives the full-logits loss, the one-pass reading check is exactly greedy decoding,
training lowers the answer loss deterministically, and the stage writes the base, its gate and
curves (or a reference to a downloaded model) atomically."""

from __future__ import annotations

import json
import random
from itertools import islice
from types import SimpleNamespace

import pytest
import torch

from agentr1 import stages
from agentr1.config import ScratchModelConfig, config_from_dict
from agentr1.data.drills import gate_drills, stream_docs
from agentr1.data.world import build_world, corpus_rows, fresh_world
from agentr1.errors import StageError
from agentr1.lm.pretrain import (
    collate_docs,
    document_batches,
    encode_docs,
    gate_report,
    packed_rows,
    pretrain_reader,
    reading_accuracy,
    target_logits,
    weighted_loss,
)
from agentr1.models import build_scratch_model, is_checkpoint, load_checkpoint, resolve_checkpoint, train_tokenizer

torch.set_num_threads(1)
TINY = ScratchModelConfig(
    vocab_size=600, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64
)
SMALL_WORLD = {
    "families": {"train": 12, "dev": 3, "test": 3, "ood": 3},
    "questions": {"train": 40, "dev": 10, "test": 10, "ood": 10},
}


@pytest.fixture(scope="module")
def drills():
    docs = list(islice(stream_docs(fresh_world(6, "t"), random.Random(0), 1, (1, 2), 3), 64))
    tok = train_tokenizer([d.text for d in docs], TINY.vocab_size)
    return docs, tok


def _cfg(**over):
    base = dict(
        steps=30,
        batch_size=8,
        lr=1e-2,
        warmup_steps=2,
        weight_decay=0.01,
        loss_on="answers",
        context=0,
        answer_weight=1.0,
    )
    return SimpleNamespace(**{**base, **over})


def test_targets_are_the_answers_or_all_but_first_mentions(drills):
    docs, tok = drills
    doc = docs[0]
    [(ids, answers, marked)] = encode_docs(tok, [doc], "answers")
    [(_, text, marked_too)] = encode_docs(tok, [doc], "text")
    assert answers == marked == marked_too  # the answer tokens are marked whatever the targets
    pieces = "".join(tok.decode([i]) for i, t in zip(ids, answers) if t)
    assert pieces == "".join(doc.text[a:b] for a, b in doc.targets)  # the answers and their newlines, nothing else
    offsets = tok(doc.text, return_offsets_mapping=True)["offset_mapping"]
    for (a, b), t in zip(offsets, text):
        first = any(a < fb and fa < b for fa, fb in doc.first_mentions)
        assert t == (not first) or (a, b) == offsets[0]
    assert not answers[0] and not text[0]
    with pytest.raises(ValueError, match="loss_on 'everything'"):
        encode_docs(tok, [doc], "everything")


def test_packed_rows_hold_consecutive_documents_with_their_targets(drills):
    docs, tok = drills
    encoded = encode_docs(tok, docs[:64], "text")
    rows = list(islice(packed_rows(tok, iter(docs), 300, "text"), 5))
    assert all(len(ids) <= 300 for ids, _, _ in rows)
    flat = [(i, t, a) for ids, ts, ans in rows for i, t, a in zip(ids, ts, ans)]
    expected = [(i, t, a) for ids, ts, ans in encoded for i, t, a in zip(ids, ts, ans)]
    assert flat == expected[: len(flat)]  # the documents in order, each whole, none cut or dropped
    assert sum(len(r[0]) for r in rows) > 4 * 250  # rows are filled
    cfg = _cfg(context=300, batch_size=2)
    batch = next(document_batches(tok, iter(docs), cfg))
    assert batch["input_ids"].shape == (2, max(len(r[0]) for r in rows[:2]))
    assert torch.equal(batch["answers"][0, : len(rows[0][2])], torch.tensor(rows[0][2]))


def test_the_head_on_targets_only_gives_the_full_logits_loss(drills):
    docs, tok = drills
    model = build_scratch_model(TINY, tok, seed=0)
    batch = collate_docs(encode_docs(tok, docs[:6], "answers"), tok.pad_token_id)
    logits, tokens = target_logits(model, batch)
    loss = torch.nn.functional.cross_entropy(logits, tokens)
    full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    mask = batch["targets"][:, 1:]
    expected = torch.nn.functional.cross_entropy(full[mask].float(), batch["input_ids"][:, 1:][mask])
    assert torch.allclose(loss, expected, atol=1e-6)


def test_answer_weight_weighs_the_answers_tokens(drills):
    docs, tok = drills
    model = build_scratch_model(TINY, tok, seed=0)
    batch = collate_docs(encode_docs(tok, docs[:4], "text"), tok.pad_token_id)
    logits, tokens = target_logits(model, batch)
    nll = torch.nn.functional.cross_entropy(logits, tokens, reduction="none")
    on_answer = batch["answers"][:, 1:][batch["targets"][:, 1:]]
    assert 0 < int(on_answer.sum()) < len(nll)
    assert torch.allclose(weighted_loss(logits, tokens, batch, 1.0), nll.mean())
    expected = (nll[~on_answer].sum() + 10 * nll[on_answer].sum()) / (
        int((~on_answer).sum()) + 10 * int(on_answer.sum())
    )
    assert torch.allclose(weighted_loss(logits, tokens, batch, 10.0), expected)


def test_pretraining_lowers_the_answer_loss_and_is_deterministic(drills):
    docs, tok = drills
    runs = []
    for _ in range(2):
        model = build_scratch_model(TINY, tok, seed=0)
        batch = collate_docs(encode_docs(tok, docs[:16], "answers"), tok.pad_token_id)
        with torch.no_grad():
            before = torch.nn.functional.cross_entropy(*target_logits(model, batch))
        history = pretrain_reader(model, tok, iter(docs * 10), _cfg(), log_every=0)
        with torch.no_grad():
            after = torch.nn.functional.cross_entropy(*target_logits(model, batch))
        runs.append([h["loss"] for h in history])
    assert [h["step"] for h in history] == list(range(1, 31)) and not model.training
    assert all(h["targets"] < h["tokens"] for h in history)
    assert after < 0.7 * before
    assert runs[0] == runs[1]


def test_the_one_pass_reading_check_is_greedy_decoding(drills):
    docs, tok = drills
    model = build_scratch_model(TINY, tok, seed=0)
    pretrain_reader(model, tok, iter(docs[:8] * 40), _cfg(steps=40), log_every=0)  # memorize a few
    probe = [d for d in docs[:8]] + docs[40:48]
    prompts = [d.text[: d.targets[0][0]] for d in probe]
    answers = [d.text[d.targets[0][0] : d.targets[0][1]] for d in probe]
    fast = reading_accuracy(model, tok, probe, batch_size=5)
    greedy = []
    for prompt, answer in zip(prompts, answers):
        ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
        n = len(tok(prompt + answer, add_special_tokens=False)["input_ids"]) - ids.shape[1]
        out = model.generate(ids, max_new_tokens=n, do_sample=False, attention_mask=torch.ones_like(ids))
        greedy.append(tok.decode(out[0, ids.shape[1] :]) == answer)
    assert fast == greedy
    assert any(fast) and not all(fast)  # both outcomes are exercised
    detail = reading_accuracy(model, tok, probe, detail=True)
    assert [d["correct"] for d in detail] == fast and all(d["first"] for d in detail if d["correct"])


def test_gate_report_requires_every_relation_of_every_split(drills):
    docs, tok = drills
    model = build_scratch_model(TINY, tok, seed=0)
    report = gate_report(model, tok, {("dev", "one_hop"): docs[:10], ("dev", "multi"): docs[10:20]}, 0.0, 0.0)
    assert report["passed"] and report["failing"] == []
    entry = report["splits"]["dev"]["one_hop"]
    assert entry["n"] == 10 and sum(r["n"] for r in entry["relations"].values()) == 10
    strict = gate_report(model, tok, {("dev", "one_hop"): docs[:10]}, 1.0, 1.0)
    assert not strict["passed"] and "dev/one_hop" in strict["failing"]


# ------------------------------------------------------------------------------ the stage
def _stage_cfg(tmp_path, **pretrain):
    return config_from_dict(
        {
            "data": {"synthetic": SMALL_WORLD},
            "model": {"scratch": {**TINY.model_dump(), "vocab_size": 700}},
            "pretrain": {
                "steps": 6,
                "batch_size": 4,
                "warmup_steps": 1,
                "world_families": 6,
                "docs_per_world": 8,
                "tokenizer_docs": 100,
                "num_threads": None,
                "out_dir": str(tmp_path / "init"),
                "report_dir": str(tmp_path / "pretrain"),
                "gate": {"per_split": 12, "every": 3},
                **pretrain,
            },
            "tracking": {"enabled": False},
        }
    )


def test_the_stage_writes_the_base_its_gate_and_curves(tmp_path):
    cfg = _stage_cfg(tmp_path)
    metrics = stages.run("pretrain", cfg, None)
    model, tok = load_checkpoint(cfg.pretrain.out_dir)
    assert sum(p.numel() for p in model.parameters()) == metrics["model"]["parameters"]
    written = json.loads((tmp_path / "pretrain" / "metrics.json").read_text())
    assert written == json.loads(json.dumps(metrics))
    gate = written["gate"]
    assert set(gate["splits"]) == {"dev", "test"} and set(gate["splits"]["dev"]) == {"one_hop", "multi"}
    assert gate["splits"]["test"]["multi"]["n"] == 12 and gate["thresholds"] == {"one_hop": 0.95, "multi": 0.9}
    assert gate["passed"] is False and "dev/one_hop" in gate["failing"]  # 6 steps do not teach reading
    assert written["pretrain"]["steps"] == 6 and written["pretrain"]["tokens"] > written["pretrain"]["targets"] > 0
    assert (tmp_path / "pretrain" / "loss.csv").read_text().count("\n") == 7
    assert (tmp_path / "pretrain" / "gate.csv").read_text().splitlines()[0] == "step,one_hop,multi"
    assert [r.split(",")[0] for r in (tmp_path / "pretrain" / "gate.csv").read_text().splitlines()[1:]] == ["3", "6"]
    # every name part is one token: a held-out name is two tokens
    world = build_world(cfg.data.synthetic, cfg.seed)
    held = next(e for e in world.entities if e.split == "test" and e.kind == "city")
    assert len(tok(" " + held.name, add_special_tokens=False)["input_ids"]) == 2
    # deterministic: a second run writes the same weights and metrics
    first = (
        (tmp_path / "init" / "model.safetensors").read_bytes(),
        (tmp_path / "pretrain" / "metrics.json").read_bytes(),
    )
    stages.run("pretrain", cfg, None)
    assert (
        (tmp_path / "init" / "model.safetensors").read_bytes(),
        (tmp_path / "pretrain" / "metrics.json").read_bytes(),
    ) == first


def test_the_gate_reads_held_out_entities_the_stream_never_shows(tmp_path):
    cfg = _stage_cfg(tmp_path)
    world = build_world(cfg.data.synthetic, cfg.seed)
    corpus = corpus_rows(world, cfg.data.synthetic.distractor_sentences, cfg.seed)
    held = {e.name for e in world.entities if e.split in ("dev", "test")}
    asked = {d.facts[0].pid for d in gate_drills(world, corpus, ["dev", "test"], 1, 12, cfg.seed)}
    assert asked <= {e.pid for e in world.entities if e.split in ("dev", "test")}
    from agentr1.data.drills import pretraining_docs

    texts = [d.text for d in islice(pretraining_docs({e.name for e in world.entities}, cfg.seed, 6, 8, 2), 64)]
    assert not any(f"Title: {name})" in t for name in held for t in texts)


def test_a_failing_stage_leaves_nothing(tmp_path, monkeypatch):
    cfg = _stage_cfg(tmp_path)

    def boom(*args, **kwargs):
        raise RuntimeError("pretraining crashed")

    monkeypatch.setattr("agentr1.stages.pretrain.gate_report", boom)
    with pytest.raises(RuntimeError, match="pretraining crashed"):
        stages.run("pretrain", cfg, None)
    assert not (tmp_path / "init").exists() and not (tmp_path / "pretrain").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_gate_split_without_entities_is_refused(tmp_path):
    cfg = _stage_cfg(tmp_path, gate={"splits": ["ood"]})
    cfg.data.synthetic.families.ood = 0
    with pytest.raises(StageError, match="pretrain.gate.splits"):
        stages.run("pretrain", cfg, None)


def test_a_downloaded_model_is_referenced_not_copied(tmp_path):
    """``model.kind: hf``: no training; the base policy directory refers to the local checkpoint."""
    docs = list(islice(stream_docs(fresh_world(4, "hf"), random.Random(0), 1), 50))
    tok = train_tokenizer([d.text for d in docs], TINY.vocab_size)
    local = tmp_path / "downloaded"
    build_scratch_model(TINY, tok, seed=3).save_pretrained(local)
    tok.save_pretrained(local)
    cfg = _stage_cfg(tmp_path)
    cfg.model = cfg.model.model_copy(update={"kind": "hf", "name_or_path": str(local)})
    metrics = stages.run("pretrain", cfg, None)
    assert metrics["pretrain"]["steps"] == 0 and metrics["model"]["kind"] == "hf"
    assert [p.name for p in (tmp_path / "init").iterdir()] == ["reference.json"]
    assert resolve_checkpoint(tmp_path / "init") == local and is_checkpoint(tmp_path / "init")
    model, _ = load_checkpoint(tmp_path / "init")
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), load_checkpoint(local)[0].state_dict().values())
    )
