"""The report's PNGs (matplotlib, Agg backend; imported inside the functions).

* ``learning_curves.png``: reward per RL step of every run (seeds of one method share a colour,
  one line style per seed, one marker per run, so runs whose lines coincide stay visible), below
  it the dev EM where it was evaluated, and at the bottom the tool calls per episode of the
  training rollouts, smoothed by a trailing mean over :data:`SMOOTH` logged steps (:func:`smoothed`);
* ``em_bars.png``: the Table 3 score per policy with its bootstrap CI as error bars, one panel per
  split and one for the average;
* ``ablations.png``: each ablation next to its full-mask method with CIs, one panel per split.

Every bar is labelled with its value, and a panel whose values are all 0 says "all 0" (an empty
panel is a result, not a broken plot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from agentr1.io import atomic_path
from agentr1.report.inputs import Curve
from agentr1.report.rows import Row, ablation_pairs, table3_rows
from agentr1.report.stats import AVG

LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "v", "D", "P", "X", "*", "<", ">"]
SMOOTH = 5  # logged RL steps in the trailing mean of the tool-calls panel


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")


def smoothed(steps: Sequence[int], values: Sequence[float | None], window: int = SMOOTH) -> list[tuple[int, float]]:
    """``(step, mean of the value at this step and the window - 1 logged steps before it)`` for every
    step with a value (steps without one, e.g. the step-0 dev evaluation, are skipped)."""
    pts = [(s, v) for s, v in zip(steps, values) if v is not None]
    return [
        (s, sum(v for _, v in pts[max(0, i - window + 1) : i + 1]) / len(pts[max(0, i - window + 1) : i + 1]))
        for i, (s, _) in enumerate(pts)
    ]


def learning_curves(curves: Sequence[Curve], method_of: Mapping[str, str], path: Path) -> None:
    plt = _plt()
    methods = list(dict.fromkeys(method_of[c.run] for c in curves))
    cmap = plt.get_cmap("tab10")
    colour = {m: cmap(i % 10) for i, m in enumerate(methods)}
    seed_idx: dict[str, int] = {}
    fig, (ax_r, ax_d, ax_t) = plt.subplots(3, 1, figsize=(8, 9.5), sharex=True, height_ratios=[2, 1, 1])
    rewards: list[float] = []
    devs: list[float] = []
    calls: list[float] = []
    for i, c in enumerate(curves):
        m = method_of[c.run]
        k = seed_idx.get(m, 0)
        seed_idx[m] = k + 1
        style = dict(
            color=colour[m],
            linestyle=LINESTYLES[k % len(LINESTYLES)],
            marker=MARKERS[i % len(MARKERS)],
            markersize=4,
            markerfacecolor="none",
            alpha=0.85,
            label=c.run,
        )
        pts = [(s, r) for s, r in zip(c.steps, c.reward) if r is not None]
        if pts:
            ax_r.plot(*zip(*pts), **style)
            rewards += [r for _, r in pts]
        dev = [(s, d) for s, d in zip(c.steps, c.dev_em) if d is not None]
        if dev:
            ax_d.plot(*zip(*dev), **style)
            devs += [d for _, d in dev]
        tc = smoothed(c.steps, c.tool_calls)
        if tc:
            ax_t.plot(*zip(*tc), **style)
            calls += [t for _, t in tc]
    _note_if_flat(ax_r, rewards, "no rollout rewards logged")
    _note_if_flat(ax_d, devs, "no dev evaluations")
    _note_if_flat(ax_t, calls, "no tool calls logged")
    ax_r.set_ylabel("rollout reward")
    ax_r.set_title("Learning curves (colour = method, line style = seed, marker = run)")
    ax_r.grid(alpha=0.3)
    if rewards:
        ax_r.legend(fontsize=7, ncol=2)
    ax_d.set_ylabel("dev EM")
    ax_d.grid(alpha=0.3)
    ax_t.set_xlabel("RL step")
    ax_t.set_ylabel(f"tool calls / episode\n(rollouts, mean of\nlast {SMOOTH} steps)")
    ax_t.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)


def _note_if_flat(ax, values: Sequence[float], empty: str) -> None:
    """Say what an axes shows when it would look broken: ``empty`` without values, "all 0"
    when every value is 0."""
    note = empty if not values else "all 0" if all(v == 0 for v in values) else None
    if note:
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555555")


def _bars(ax, xs, cells, **kw) -> None:
    """Bars of the cells' means with their CIs as error bars, each labelled with its value."""
    bars = ax.bar(list(xs), [c.mean for c in cells], yerr=_yerr(cells), capsize=3, **kw)
    ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)


def _yerr(cells) -> list[list[float]]:
    return [[max(0.0, c.mean - c.ci_lower) for c in cells], [max(0.0, c.ci_upper - c.mean) for c in cells]]


def em_bars(rows: Sequence[Row], splits: Sequence[str], metric: str, ci: float, path: Path) -> None:
    plt = _plt()
    t3 = table3_rows(rows)
    keys = [*splits, AVG]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys) + 1, 4.5), sharey=True, squeeze=False)
    colours = ["#999999" if r.kind == "baseline" else "#1f77b4" for r in t3]
    for ax, key in zip(axes[0], keys):
        cells = [r.cells[key] for r in t3]
        _bars(ax, range(len(t3)), cells, color=colours)
        _note_if_flat(ax, [c.mean for c in cells], "no policies")
        ax.set_xticks(range(len(t3)), [r.display for r in t3], rotation=60, ha="right", fontsize=8)
        ax.set_title("average" if key == AVG else key)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"{metric.upper()} ({ci:.0%} bootstrap CI)")
    _save(fig, path)
    plt.close(fig)


def ablations(rows: Sequence[Row], splits: Sequence[str], metric: str, ci: float, path: Path) -> None:
    plt = _plt()
    pairs = ablation_pairs(rows)
    keys = [*splits, AVG]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys) + 1, 4.5), sharey=True, squeeze=False)
    for ax, key in zip(axes[0], keys):
        if not pairs:
            ax.text(0.5, 0.5, "no ablation pairs", ha="center", va="center", transform=ax.transAxes)
        xs = range(len(pairs))
        full = [f.cells[key] for _, f in pairs]
        abl = [a.cells[key] for a, _ in pairs]
        _bars(ax, [x - 0.2 for x in xs], full, width=0.4, color="#1f77b4", label="full mask")
        _bars(ax, [x + 0.2 for x in xs], abl, width=0.4, color="#ff7f0e", label="ablation")
        if pairs:
            _note_if_flat(ax, [c.mean for c in full + abl], "")
        ax.set_xticks(list(xs), [a.display for a, _ in pairs], rotation=60, ha="right", fontsize=8)
        ax.set_title("average" if key == AVG else key)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"{metric.upper()} ({ci:.0%} bootstrap CI)")
    axes[0][0].legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)
