"""Can a checkpoint copy names? The SFT stage's copy probe, for any checkpoints side by side.

Not a test. Run from the repository root after ``dvc repro index`` (it uses the processed dev
split, the index and the env of ``--params``):

    python bench/copy_probe.py data/models/init data/models/sft
    python bench/copy_probe.py --params params.yaml --examples 64 DIR [DIR ...]

For each checkpoint: clean oracle episodes of the first ``--examples`` dev questions (unseen
entities), tokenized with that checkpoint's tokenizer, and :func:`agentr1.lm.sft.copy_probe`:
teacher-forced top-1 accuracy and NLL on the action tokens only the context supplies, split into
``start`` (which name) and ``continue`` (the rest of a name begun). Each checkpoint needs the
retriever its episodes were made with: ``--params`` of its profile.
Results: a table on stdout and ``bench/results/copy_probe.json``.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.schema import read_dataset  # noqa: E402
from agentr1.env.load import load_env as _load_env  # noqa: E402
from agentr1.io import write_json_atomic  # noqa: E402
from agentr1.lm.sft import copy_probe  # noqa: E402
from agentr1.models import load_checkpoint  # noqa: E402
from agentr1.rollout.oracle import corpus_titles, probe_episodes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--examples", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/copy_probe.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = load_config(a.params)
    ds = read_dataset(cfg.data.processed_dir)
    env = _load_env(cfg)
    titles = corpus_titles(ds.corpus)
    rows = []
    for ckpt in a.checkpoints:
        model, tok = load_checkpoint(ckpt)
        episodes = probe_episodes(ds, env, tok, cfg, titles, limit=a.examples)
        rows.append(
            {"checkpoint": ckpt, "episodes": len(episodes), **copy_probe(model.eval(), episodes, tok.pad_token_id)}
        )
    print(f"{'checkpoint':40s} {'tokens':>6s} {'top1':>6s} {'nll':>6s} {'start':>6s} {'cont.':>6s}")
    for r in rows:
        print(
            f"{r['checkpoint']:40s} {r['tokens']:6d} {r['top1']:6.3f} {r['nll']:6.2f} "
            f"{r['start']['top1'] or 0:6.3f} {r['continue']['top1'] or 0:6.3f}"
        )
    write_json_atomic(
        Path(a.out),
        {
            "params": a.params,
            "examples": a.examples,
            "torch": torch.__version__,
            "machine": platform.machine(),
            "rows": rows,
        },
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
