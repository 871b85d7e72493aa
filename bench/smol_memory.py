"""Where the `smol` profile's memory goes: peak RSS of one SFT-shaped update of SmolLM2-135M (issue 49).

Not a test. The first full `smol` attempt peaked at 10.9 GB (issue 49) for a 135M-parameter model,
whose weights, gradients and AdamW state are ~2.2 GB in fp32. This script runs one update the
shape of the profile's SFT step (``--batch`` sequences of ``--tokens`` tokens, loss on every
token, AdamW) in a fresh process per variant and reads that process's peak RSS
(``resource.getrusage``), so the variants do not share an allocator:

* ``load``: the model loaded, nothing else (the floor);
* ``step``: forward, backward and AdamW step on the whole batch at once (what ``lm.sft.train_sft``
  does today);
* ``micro``: the same batch as ``--micro`` sequences at a time, gradients accumulated;
* ``ckpt``: the whole batch with activation (gradient) checkpointing
  (``model.gradient_checkpointing_enable()``).

The output head is cut to ``--vocab`` rows, as ``model.restrict_vocab`` does in the profile
(49,152 -> ~2,700 tokens). Usage (the GGUF is de-quantized once into ``data/models/base``)::

    python bench/smol_memory.py [--batch 8 --tokens 600 --micro 2 --vocab 2700]

Writes ``bench/results/smol_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("load", "step", "micro", "ckpt")


def one(variant: str, batch: int, tokens: int, micro: int, vocab: int) -> dict:
    """Run ``variant`` in this process; returns its peak RSS (GB) and wall time (s)."""
    import torch

    from agentr1.config import Config
    from agentr1.models.loading import downloaded_checkpoint, load_checkpoint

    torch.manual_seed(0)
    cfg = Config().model.model_copy(update={"kind": "gguf"})
    model, _ = load_checkpoint(downloaded_checkpoint(cfg), "float32")
    head = torch.nn.Linear(model.config.hidden_size, vocab, bias=False)  # the restricted head (untied)
    model.lm_head = head
    model.config.tie_word_embeddings = False
    t0 = time.perf_counter()
    if variant != "load":
        if variant == "ckpt":
            model.gradient_checkpointing_enable()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(0, vocab, (batch, tokens))
        chunks = ids.split(micro) if variant == "micro" else (ids,)
        for chunk in chunks:
            logits = model(input_ids=chunk).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), chunk[:, 1:].reshape(-1))
            (loss * len(chunk) / batch).backward()
        opt.step()
    return {
        "variant": variant,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "update_s": time.perf_counter() - t0,
        "parameters_m": sum(p.numel() for p in model.parameters()) / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=600)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2700)
    ap.add_argument("--variant", choices=VARIANTS, help="run one variant in this process (internal)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/smol_memory.json"))
    args = ap.parse_args(argv)
    shape = (args.batch, args.tokens, args.micro, args.vocab)
    if args.variant:
        print(json.dumps(one(args.variant, *shape)))
        return 0
    rows = []
    for variant in VARIANTS:
        cmd = [sys.executable, __file__, "--variant", variant, "--batch", str(args.batch), "--tokens", str(args.tokens)]
        cmd += ["--micro", str(args.micro), "--vocab", str(args.vocab)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{variant:6s} peak RSS {r['peak_rss_gb']:5.2f} GB  update {r['update_s']:6.1f} s", flush=True)
    result = {"batch": args.batch, "tokens": args.tokens, "micro": args.micro, "vocab": args.vocab, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
