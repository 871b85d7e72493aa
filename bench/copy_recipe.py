"""Which cold-start recipe makes the nano policy copy names? One recipe per run, <= 10 min.

Not a test. Run from the repository root after ``dvc repro index``. Each run builds the scratch
policy the way the ``sft`` stage does (tokenizer on corpus + oracle texts, optional corpus
pretraining, SFT on oracle episodes) with the overrides given on the command line, then reports

* the copy probe (``agentr1.rl.sft.copy_probe``) of the cold start on clean dev oracle episodes;
* greedy dev EM on ``--eval`` unseen-entity dev questions, per question type, and the share of
  searches that found a supporting passage;
* the wall time of each phase.

    python bench/copy_recipe.py --name B --set sft.pretrain.steps=0 --set sft.steps=600 --set sft.batch_size=8
    # row L of bench/RESULTS.md section 10 (the recipe the sft stage now runs by default):
    python bench/copy_recipe.py --name L --pre-main --drills --pre-texts episodes --pre-noise 0 \
        --set sft.pretrain.steps=600 --set sft.pretrain.batch_size=16 --set sft.steps=300 --set sft.batch_size=16

``--set KEY=VALUE`` takes any params key (YAML value). Pretraining texts (``--pre-texts``): the
corpus passages (``corpus``, as params say), or oracle episode transcripts without the system
prompt (``episodes``) of ``--aux-worlds`` freshly generated worlds, of the main train split
(``--pre-main``) and of the one-hop reading drills (``--drills``), or both (``mix``).
``--aux-only`` trains SFT on the aux worlds' episodes only; ``--save``/``--save-base`` keep the
cold start / the pretrained base, ``--base`` starts SFT from a saved base. One JSON line per run
is appended to ``bench/results/copy_recipe.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402
import yaml  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.schema import read_dataset  # noqa: E402
from agentr1.eval.quick import episode_metrics, evaluate_tool_policy  # noqa: E402
from agentr1.models import load_policy  # noqa: E402
from agentr1.rl.sft import copy_probe, pretrain_lm, title_links, train_sft  # noqa: E402
from agentr1.stages.context import load_env as _load_env  # noqa: E402
from agentr1.stages.sft import _questions, probe_episodes  # noqa: E402
from agentr1.rollout import make_backend  # noqa: E402
from agentr1.rollout.oracle import corpus_titles, oracle_rollout, oracle_texts, plan_all, unique_questions  # noqa: E402


def drill_questions(cfg) -> list[dict]:
    """The one-hop reading drills of the train split (what ``sft.pretrain.drills`` adds)."""
    from agentr1.data.drills import one_hop_questions
    from agentr1.data.synthetic import generate

    return one_hop_questions(generate(cfg.data.synthetic, cfg.seed)[0], "train")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/copy_recipe.jsonl")
    ap.add_argument("--aux-worlds", type=int, default=0, help="extra synthetic worlds (fresh entities) for SFT episodes")
    ap.add_argument("--aux-families", type=int, default=600)
    ap.add_argument("--aux-only", action="store_true", help="SFT on the auxiliary worlds' episodes only")
    ap.add_argument("--save", default=None, help="save the cold start here")
    ap.add_argument("--save-base", default=None, help="save the pretrained base policy here")
    ap.add_argument("--base", default=None, help="start SFT from this saved base (skips tokenizer training and pretraining)")
    ap.add_argument("--pre-main", action="store_true", help="episode transcripts of the main train split too")
    ap.add_argument("--pre-noise", type=float, default=None, help="oracle noise of the pretraining transcripts (default sft.oracle_noise)")
    ap.add_argument("--drills", action="store_true", help="1-hop question transcripts over every train entity and relation")
    ap.add_argument("--pre-texts", choices=("corpus", "episodes", "mix"), default="corpus",
                    help="pretraining texts: corpus passages, oracle episode transcripts of the aux worlds (no system prompt), or both")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in a.set)}
    cfg = load_config(a.params, overrides)
    times: dict[str, float] = {}
    t = time.perf_counter()
    ds = read_dataset(cfg.data.processed_dir)
    env = _load_env(cfg)
    train_q = _questions(ds, cfg)
    titles = corpus_titles(ds.corpus)
    plans = plan_all(train_q, titles, env.fmt, cfg.sft.oracle_noise, cfg.seed, env.max_turns, cfg.sft.oracle_lead_space)
    texts = [f"{p['title']}\n{p['text']}" for p in ds.corpus] + oracle_texts(train_q, env, plans)
    whole = [w for p in ds.corpus for w in str(p["title"]).split()]
    model, tok = load_policy(cfg.model, tokenizer_texts=texts, seed=cfg.seed, whole_words=whole)
    if a.base:
        from agentr1.models import load_checkpoint
        model, tok = load_checkpoint(a.base)
    from agentr1.data.synthetic import generate_world
    from agentr1.env import ToolEnv
    from agentr1.retrieval.factory import build_retriever
    auxes = []
    titles_of = {}
    for k in range(a.aux_worlds):
        syn = cfg.data.synthetic.model_copy(update={
            "families": cfg.data.synthetic.families.model_copy(update={"train": a.aux_families, "dev": 5, "test": 5, "ood": 10}),
            "questions": cfg.data.synthetic.questions.model_copy(update={"dev": 10, "test": 10, "ood": 10})})
        aux = generate_world(syn, seed=1000 + k)
        aux_env = ToolEnv.from_config(cfg.env, build_retriever(cfg.retrieval, aux.corpus))
        aq = unique_questions(aux.split("train"))
        ap_ = plan_all(aq, corpus_titles(aux.corpus), aux_env.fmt, cfg.sft.oracle_noise, cfg.seed + k + 1, aux_env.max_turns,
                       cfg.sft.oracle_lead_space)
        auxes.append((aq, aux_env, ap_))
        titles_of[id(aux_env)] = corpus_titles(aux.corpus)
    times["setup"] = time.perf_counter() - t
    pre = []
    if cfg.sft.pretrain.steps and not a.base:
        t = time.perf_counter()
        passages = [f"{p['title']}\n{p['text']}" for p in ds.corpus]
        if a.pre_texts != "corpus":
            sysp = env.system_prompt() + "\n"
            noise = cfg.sft.oracle_noise if a.pre_noise is None else a.pre_noise
            worlds = [(aq, e_, plan_all(aq, titles_of[id(e_)], e_.fmt, noise,
                       cfg.seed + 7, e_.max_turns, cfg.sft.oracle_lead_space)) for aq, e_, _ in auxes]
            if a.pre_main:
                worlds.append((train_q, env, plan_all(train_q, titles, env.fmt, noise, cfg.seed + 7, env.max_turns, cfg.sft.oracle_lead_space)))
            if a.drills:
                dq = drill_questions(cfg)
                worlds.append((dq, env, plan_all(dq, titles, env.fmt, 0.0, cfg.seed, env.max_turns, cfg.sft.oracle_lead_space)))
                print("drills", len(dq), dq[:3], flush=True)
            eps = [x.replace(sysp, "") for aq, e_, pl in worlds for x in oracle_texts(aq, e_, pl)]
            passages = eps if a.pre_texts == "episodes" else passages + eps
            print("pretraining texts", len(passages), repr(passages[-1][:600]), flush=True)
        links = title_links([p["title"] for p in ds.corpus], [p["text"] for p in ds.corpus]) if cfg.sft.pretrain.chain > 1 and a.pre_texts == "corpus" else None
        pre = pretrain_lm(model, tok, passages, cfg.sft.pretrain, seed=cfg.seed, links=links, log_every=100)
        times["pretrain"] = time.perf_counter() - t
    if a.save_base:
        model.save_pretrained(a.save_base); tok.save_pretrained(a.save_base)
    t = time.perf_counter()
    oracle = [] if a.aux_only else oracle_rollout(train_q, env, tok, cfg.rollout, plans)
    for aq, aux_env, ap_ in auxes:
        oracle += oracle_rollout(aq, aux_env, tok, cfg.rollout, ap_)
    print("oracle episodes", len(oracle), flush=True)
    probe_eps = probe_episodes(ds, env, tok, cfg, titles)
    times["oracle"] = time.perf_counter() - t
    t = time.perf_counter()
    hist = train_sft(model, oracle, tok.pad_token_id, cfg.sft, seed=cfg.seed, log_every=50)
    times["sft"] = time.perf_counter() - t
    probe = copy_probe(model, probe_eps, tok.pad_token_id)
    t = time.perf_counter()
    dev = unique_questions(ds.split("dev"))[: a.eval]
    backend = make_backend(cfg.rollout, model, tok)
    summary, trajs = evaluate_tool_policy(backend, tok, env, cfg.rollout, dev, cfg.reward)
    times["eval"] = time.perf_counter() - t
    by_type: dict[str, list[float]] = defaultdict(list)
    for q, tr in zip(dev, trajs):
        by_type[q["type"]].append(episode_metrics(tr, cfg.reward)["em"])
    row = {
        "name": a.name, "set": a.set, "params": sum(p.numel() for p in model.parameters()), "vocab": len(tok),
        "pretrain_loss": sum(r["loss"] for r in pre[-10:]) / max(len(pre[-10:]), 1) if pre else None,
        "sft_loss": sum(r["loss"] for r in hist[-10:]) / max(len(hist[-10:]), 1),
        "copy": {k: probe[k]["top1"] if isinstance(probe[k], dict) else probe[k] for k in ("start", "continue")} | {"top1": probe["top1"]},
        "dev_em": summary["em"], "found_support": summary["searches_found_support"], "tool_calls": summary["tool_calls"],
        "format_ok": summary["format_ok"], "by_type": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_type.items())},
        "times": {k: round(v, 1) for k, v in times.items()},
        "examples": [(q["question"], tr.answer, q["answers"][0]) for q, tr in list(zip(dev, trajs))[:4]],
    }
    hop = defaultdict(lambda: [0, 0])
    for q, tr in zip(dev, trajs):
        outs = [o for turn in tr.outcomes for o in turn]
        found = sum(bool((o.get("found_support") if isinstance(o, dict) else o.found_support)) for o in outs)
        hop[(q["type"], q["hops"])][0] += 1
        hop[(q["type"], q["hops"])][1] += found
    row["found_by_type"] = {f"{k[0]}/{k[1]}": round(v[1] / v[0], 2) for k, v in sorted(hop.items())}
    from agentr1.rollout.engine import decode
    for q, tr in list(zip(dev, trajs))[:3]:
        print("----", q["question"], q["answers"][0]); print(decode(tok, tr.response_ids)[:1500])
    if a.save:
        model.save_pretrained(a.save); tok.save_pretrained(a.save)
    print(json.dumps(row, indent=1))
    with open(a.out, "a") as fh:
        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
