"""Which CPU kernels give this machine other bits than another: a fingerprint of a training step.

Under one numerics pin (``agentr1.numerics``: ``--pin avx2``, the stages' default, or
``portable``), in a process where the pin is set before torch loads, this hashes the result of
each kernel a training step of the nano policy uses - matrix products (MKL), elementwise and
reduction kernels, softmax, norms, SDPA (torch's own AVX2 code), a small MLP's forward, backward
and AdamW step, and a small Llama's (the nano architecture) - at 1 and 2 threads. The inputs are
built from integers by numpy's PCG64 (the same bits on any machine), so two machines that run the
same kernels print the same hashes; the first entries that differ, in the order below, are where
they part ways (everything built on them differs too).

    .venv/bin/python scripts/numerics_fingerprint.py                      # JSON on stdout
    .venv/bin/python scripts/numerics_fingerprint.py --compare tests/data/numerics/AuthenticAMD-avx2.json

``--compare`` exits 1 when an entry differs. ``tests/test_numerics.py`` compares this machine with
the committed file of its CPU vendor and pin, ``tests/data/numerics/<vendor>-<pin>.json``
(``--write`` makes one for a vendor that has none).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "numerics"


def cpu_info() -> dict:
    """The machine's architecture, CPU vendor and model, and the vector ISA flags that matter here."""
    info = {"machine": platform.machine(), "vendor_id": "unknown", "model_name": "unknown", "isa": []}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return info
    fields = dict(line.split(":", 1) for line in text.splitlines()[:40] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    info["vendor_id"] = fields.get("vendor_id", "unknown")
    info["model_name"] = fields.get("model name", "unknown")
    flags = set(fields.get("flags", "").split())
    info["isa"] = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return info


def reference_file(vendor: str, pin: str) -> Path:
    """The committed fingerprint of ``vendor``'s CPUs under ``pin``."""
    return DATA / f"{vendor}-{pin}.json"


def fingerprint() -> dict[str, str]:
    """``{kernel@threads: short SHA-256 of its result's bytes}`` (module docstring); torch must load
    after the pin is set (:func:`main` does so)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    rng = np.random.Generator(np.random.PCG64(47))
    hashes: dict[str, str] = {}

    def x(*shape: int, scale: float = 1.0) -> torch.Tensor:
        ints = rng.integers(-(1 << 16), 1 << 16, size=shape)  # exact in float32: no transcendental in the inputs
        return torch.from_numpy((ints / float(1 << 16) * scale).astype(np.float32))

    def record(name: str, *tensors: torch.Tensor) -> None:
        flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
        hashes[name] = hashlib.sha256(flat.contiguous().numpy().tobytes()).hexdigest()[:16]

    a, b, c = x(96, 128), x(128, 320), x(512, 512)
    w, bias = x(200, 128), x(200)
    batch_a, batch_b = x(6, 40, 72), x(6, 72, 40)
    v = x(5000, scale=4.0)
    h = x(8, 96, 128)
    logits, labels = x(24, 700, scale=6.0), torch.from_numpy(rng.integers(0, 700, size=24))
    q, k, val = x(2, 4, 48, 32), x(2, 4, 48, 32), x(2, 4, 48, 32)
    w1, w2 = x(128, 192, scale=0.1), x(192, 700, scale=0.1)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        t = f"@{threads}t"
        kernels = {
            "matmul": lambda: a @ b,
            "matmul_square": lambda: c @ c,
            "matmul_transposed": lambda: b.T @ a.T,
            "bmm": lambda: torch.bmm(batch_a, batch_b),
            "linear": lambda: F.linear(a, w, bias),
            "sum": lambda: v.sum(),
            "mean_last": lambda: h.mean(-1),
            "exp": lambda: torch.exp(v),
            "log": lambda: torch.log(v.abs() + 1e-3),
            "tanh": lambda: torch.tanh(v),
            "sigmoid": lambda: torch.sigmoid(v),
            "silu": lambda: F.silu(v),
            "rsqrt": lambda: torch.rsqrt(v.abs() + 1e-3),
            "rms_norm": lambda: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6),
            "softmax": lambda: torch.softmax(logits, -1),
            "log_softmax": lambda: torch.log_softmax(logits, -1),
            "layer_norm": lambda: F.layer_norm(h, (128,)),
            "cross_entropy": lambda: F.cross_entropy(logits, labels),
            "sdpa_causal": lambda: F.scaled_dot_product_attention(q, k, val, is_causal=True),
        }
        for name, fn in kernels.items():
            record(name + t, fn())
        p1, p2 = w1.clone().requires_grad_(), w2.clone().requires_grad_()
        opt = torch.optim.AdamW([p1, p2], lr=1e-3, weight_decay=0.01)
        loss = F.cross_entropy(F.silu(a[:24] @ p1) @ p2, labels)
        loss.backward()
        record("mlp_loss" + t, loss)
        record("mlp_grads" + t, p1.grad, p2.grad)
        opt.step()
        record("mlp_adamw" + t, p1, p2)
    _llama(x, record, rng)
    return hashes


def _llama(x, record, rng) -> None:
    """A 2-layer Llama (the nano policy's architecture) from integer weights: logits, grads, AdamW."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=384,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=96,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    state = {n: x(*p.shape, scale=0.05) for n, p in sorted(LlamaForCausalLM(cfg).state_dict().items())}
    ids = torch.from_numpy(rng.integers(0, 384, size=(3, 40)))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        model = LlamaForCausalLM(cfg)
        model.load_state_dict(state, strict=False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        out = model(input_ids=ids, labels=ids)
        record(f"llama_logits@{threads}t", out.logits)
        out.loss.backward()
        named = sorted(model.named_parameters())
        record(f"llama_grads@{threads}t", *(p.grad for _, p in named))
        opt.step()
        record(f"llama_adamw@{threads}t", *(p for _, p in named))


def differing(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The entries of ``mine`` whose hash ``theirs`` lacks or holds otherwise, in order."""
    return [k for k, v in mine.items() if theirs.get(k) != v]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pin", default=None, help="avx2 | portable (default: AGENTR1_CPU_NUMERICS, else avx2)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--compare", metavar="FILE", help="a fingerprint JSON of another machine: list what differs")
    mode.add_argument("--write", action="store_true", help="write tests/data/numerics/<vendor>-<pin>.json")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from agentr1.numerics import DEFAULT, PINS, SWITCH, pin_cpu_numerics

    if args.pin is not None:
        os.environ[SWITCH] = args.pin
    pin = os.environ.get(SWITCH, DEFAULT)
    if pin not in PINS:
        ap.error(f"--pin / {SWITCH}={pin!r}: a fingerprint needs a pin: {', '.join(PINS)}")
    pinned = pin_cpu_numerics()  # before torch loads, as every stage does
    import torch

    report = {
        "cpu": cpu_info(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "pin": pin,
        "pinned": pinned,
        "hashes": fingerprint(),
    }
    if args.compare:
        other = json.loads(Path(args.compare).read_text(encoding="utf-8"))
        diff = differing(report["hashes"], other.get("hashes", {}))
        print(
            f"this machine: {report['cpu']['vendor_id']} {report['cpu']['model_name']} (pin {pin}); "
            f"{args.compare}: {other.get('cpu', {}).get('vendor_id')} {other.get('cpu', {}).get('model_name')} "
            f"(pin {other.get('pin')})"
        )
        print(f"{len(report['hashes']) - len(diff)} of {len(report['hashes'])} entries identical")
        for k in diff:
            print(f"  differs: {k}  mine {report['hashes'][k]}  theirs {other.get('hashes', {}).get(k)}")
        return 1 if diff else 0
    text = json.dumps(report, indent=1) + "\n"
    if args.write:
        path = reference_file(report["cpu"]["vendor_id"], pin)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
