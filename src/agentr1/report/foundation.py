"""What RL starts from, in the report: the base policy's reading gate, the cold start's copy probe
and its headroom (greedy EM against sampled EM and pass@k at the RL temperature).

Read from the stages' own outputs: ``<pretrain.report_dir>/metrics.json`` (``gate``),
``<sft.report_dir>/metrics.json`` (``copy``) and the cold start's evaluation
(``<evaluate.out_dir>/cold_start/metrics.json``: greedy ``<split>/em`` and ``sampling``).
:func:`foundation` returns the numbers (``report.json`` ``foundation``) and the markdown section
of ``summary.md``; a file that is missing leaves its part out (a profile without pretraining or
sampling still gets a report).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _gate_lines(gate: dict[str, Any]) -> list[str]:
    need = gate["thresholds"]
    splits = list(gate["splits"])
    kinds = [k for k in ("one_hop", "multi") if all(k in gate["splits"][s] for s in splits)]
    rels = sorted({r for s in splits for k in kinds for r in gate["splits"][s][k]["relations"]})
    cols = [f"{s} {k.replace('_', '-')}" for s in splits for k in kinds]
    lines = [
        f"The base policy's reading gate (greedy, held-out entities; one-hop >= {need['one_hop']:.2f}, "
        f"multi-passage >= {need['multi']:.2f}, overall and for every relation): "
        f"**{'passed' if gate['passed'] else 'not passed'}**"
        + ("" if gate["passed"] else f" (below: {', '.join(gate['failing'][:8])})")
        + ".",
        "",
        "| relation | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]

    def cells(r: str) -> list[float | None]:
        return [gate["splits"][s][k]["relations"].get(r, {}).get("accuracy") for s in splits for k in kinds]

    lines += [f"| {r} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells(r)) + " |" for r in rels]
    lines.append(
        "| **all** | " + " | ".join(f"**{gate['splits'][s][k]['accuracy']:.3f}**" for s in splits for k in kinds) + " |"
    )
    return lines


def _demonstrator(sft: dict[str, Any]) -> str:
    """The cold start's demonstrations in one sentence: how many, what the demonstrator (the oracle
    of :mod:`agentr1.rollout.oracle`) did wrong and how often, its own EM, and the epochs of SFT."""
    train, oracle = sft.get("train", {}), sft.get("oracle", {})
    n = train.get("examples")
    kinds = oracle.get("kinds", {})
    flaws = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(kinds.items()) if k != "clean" and v)
    text = f"Demonstrations: {n} oracle episodes"
    if kinds and n:
        text += (
            f" ({sum(v for k, v in kinds.items() if k != 'clean') / n:.0%} imperfect: {flaws or 'none'}; "
            f"the demonstrator's own EM {oracle.get('em', float('nan')):.3f})"
        )
    if train.get("epochs"):
        text += f", {train['epochs']:.1f} epochs of SFT (final loss {train.get('final_loss', float('nan')):.3f})"
    return text + "."


def foundation(
    pretrain_dir: Path, sft_dir: Path, eval_dir: Path, splits: Sequence[str], reference_dir: Path | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``(numbers, markdown lines)`` of the module docstring (``reference_dir``: the reference
    cold start's report folder, params ``sft_reference``, when there is one)."""
    out: dict[str, Any] = {}
    lines: list[str] = ["## What RL starts from", ""]
    pre = _read(pretrain_dir / "metrics.json")
    if pre is not None and "gate" in pre:
        out["gate"] = pre["gate"]
        lines += [*_gate_lines(pre["gate"]), ""]
    sft = _read(sft_dir / "metrics.json")
    copy = (sft or {}).get("copy", {})
    if copy.get("cold_start"):
        cs, gate = copy["cold_start"], copy.get("gate", {})
        out["copy"] = {"start": cs["start"]["top1"], "continue": cs["continue"]["top1"], "gate": gate}
        need = gate.get("thresholds", {})
        lines += [
            f"The cold start's copy probe on dev (teacher-forced top-1 of the names its calls and answers "
            f"copy): first token {cs['start']['top1']:.3f} (>= {need.get('start', 0):.2f}), continuation "
            f"{cs['continue']['top1']:.3f} (>= {need.get('continue', 0):.2f}): "
            f"**{'passed' if gate.get('passed') else 'not passed'}**; the base policy before SFT: "
            f"{copy['base']['start']['top1']:.3f} / {copy['base']['continue']['top1']:.3f}. "
            f"{_demonstrator(sft)}",
            "",
        ]
    ref = _read(reference_dir / "metrics.json") if reference_dir is not None else None
    if ref is not None and ref.get("train"):
        out["reference"] = {"oracle_em": ref.get("oracle", {}).get("em"), "kinds": ref.get("oracle", {}).get("kinds")}
        lines += [
            f"The reference cold start (params `sft_reference`: the same SFT from a better demonstrator, "
            f'Table 3\'s "Cold start SFT, reference demonstrator"): {_demonstrator(ref)}',
            "",
        ]
    for policy, name in (("cold_start", "cold start"), ("cold_start_reference", "reference cold start")):
        cold = _read(eval_dir / policy / "metrics.json")
        if (cold or {}).get("sampling"):
            out["headroom" if policy == "cold_start" else "reference_headroom"] = headroom = _headroom(cold, splits)
            lines += _headroom_lines(name, cold, headroom)
    return out, (lines if len(lines) > 2 else [])


def _headroom(cold: dict[str, Any], splits: Sequence[str]) -> dict[str, Any]:
    """Per split: greedy EM, the sampled numbers and ``pass_ratio`` = pass@k / greedy EM."""
    out = {}
    for s in splits:
        if s in cold["sampling"]["splits"]:
            h = cold["sampling"]["splits"][s]
            greedy = cold[f"{s}/em"]
            out[s] = {"greedy_em": greedy, **h, "pass_ratio": h["pass_at_k"] / greedy if greedy > 0 else None}
    return out


def _headroom_lines(name: str, cold: dict[str, Any], headroom: dict[str, Any]) -> list[str]:
    sampling = cold["sampling"]
    k = sampling["k"]
    ratios = "; ".join(f"{s} {h['pass_ratio']:.2f}x" for s, h in headroom.items() if h["pass_ratio"] is not None)
    lines = [
        f"The {name}'s headroom for RL: greedy EM against {k} samples per question at temperature "
        f"{sampling['temperature']:g} (the RL setting; k = the RL group size), pass@{k} / greedy EM: "
        f"{ratios or '—'}.",
        "",
        f"| split / type | n | greedy EM | sampled EM | pass@{k} |",
        "|---|---|---|---|---|",
    ]
    for s, h in headroom.items():
        lines.append(f"| **{s}** | {h['n']} | {h['greedy_em']:.3f} | {h['sampled_em']:.3f} | {h['pass_at_k']:.3f} |")
        greedy_by_type = cold["splits"][s].get("by_type", {})
        for t, ht in h["types"].items():
            g = greedy_by_type.get(t, {}).get("em")
            lines.append(
                f"| {s} / {t} | {ht['n']} | {'-' if g is None else f'{g:.3f}'} | {ht['sampled_em']:.3f} | "
                f"{ht['pass_at_k']:.3f} |"
            )
    return [*lines, ""]
