"""What `dvc plots show` draws (dvc.yaml's plots and .dvc/plots templates): one chart per file,
a colour per method however many runs there are, seeds of a method together, the per-run charts
on one scale, no template missing."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agentr1.config import load_config
from agentr1.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = {"linear", "simple", "scatter", "smooth", "confusion", "confusion_normalized", "bar_horizontal"}
SCHEME_SIZES = {"category10": 10, "category20": 20, "tableau20": 20}


def _plots() -> tuple[list[dict], list[tuple[str, dict]]]:
    """(top-level plot definitions, [(file, props)] of the stages' plot outputs)."""
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    top = [next(iter(p.values())) | {"id": next(iter(p))} for p in dvc["plots"]]
    outs = []
    for stage in dvc["stages"].values():
        for entry in stage.get("plots", []):
            (path, props), *_ = entry.items() if isinstance(entry, dict) else [(entry, {})]
            outs.append((path, props or {}))
    return top, outs


def _template(name: str) -> dict:
    return json.loads((ROOT / ".dvc" / "plots" / f"{name}.json").read_text())


def test_every_file_is_one_chart_and_every_template_exists():
    top, outs = _plots()
    top_files = [f for p in top for f in p["y"]]
    out_files = [f for f, _ in outs]
    columns = [(f, c) for p in top for f, cols in p["y"].items() for c in ([cols] if isinstance(cols, str) else cols)]
    assert len(set(columns)) == len(columns) and len({p["id"] for p in top}) == len(top)
    # a file plotted by its stage and again by a top-level definition is drawn twice
    assert not set(top_files) & set(out_files)
    for name in ({p.get("template") for p in top} | {props.get("template") for _, props in outs}) - {None}:
        if name not in BUILTIN:
            assert (ROOT / ".dvc" / "plots" / f"{name}.json").is_file(), name


def test_all_run_charts_colour_methods_with_enough_distinct_colours_and_group_seeds():
    top, _ = _plots()
    methods = {
        name.rsplit("-", 1)[0]
        for profile in ("nano", "extended")
        for name in (
            load_config(ROOT / "params.yaml").runs
            if profile == "nano"
            else load_profile("extended", ROOT / "params.yaml").cfg.runs
        )
    }
    for plot in top:
        if "reports/curves.csv" not in plot["y"]:
            continue
        t = _template(plot["template"])
        enc = t["encoding"]
        assert enc["color"]["field"] == "method" and enc["detail"]["field"] == "run"  # seeds: one colour, a line each
        assert SCHEME_SIZES[enc["color"]["scale"]["scheme"]] >= len(methods), (plot["id"], sorted(methods))


def test_per_run_reward_charts_share_one_scale_and_are_smoothed():
    _, outs = _plots()
    runs = [props for path, props in outs if path.endswith("/curve.csv")]
    assert runs and {p["template"] for p in runs} == {"reward_run"}
    t = _template("reward_run")
    domains = [layer["encoding"]["y"]["scale"]["domain"] for layer in t["layer"]]
    assert domains == [[0, 1], [0, 1]]
    assert any(tr.get("window") for tr in t["transform"])  # the line is a rolling mean
    sft = [props for path, props in outs if path.endswith("loss.csv") and "sft" in path]
    assert sft and all(p["template"] == "loss_log" for p in sft)
    assert _template("loss_log")["encoding"]["y"]["scale"]["type"] == "log"


def test_mlflow_colours_each_method_as_dvc_plots_does():
    """``mlflow.runColor`` (agentr1.tracking.views) is Vega's colour of the method in these charts:
    the scheme's palette, indexed by the method's place among the sorted names (an ordinal scale's
    domain)."""
    from agentr1.tracking import views

    category20 = "1f77b4 aec7e8 ff7f0e ffbb78 2ca02c 98df8a d62728 ff9896 9467bd c5b0d5 8c564b c49c94 e377c2 f7b6d2"
    category20 += " 7f7f7f c7c7c7 bcbd22 dbdb8d 17becf 9edae5"  # d3-scale-chromatic's schemeCategory20 (Vega's)
    schemes = {
        _template(p["template"])["encoding"]["color"]["scale"]["scheme"]
        for p in _plots()[0]
        if "reports/curves.csv" in p["y"]
    }
    assert schemes == {"category20"} and views.PALETTE == tuple(f"#{c}" for c in category20.split())
    runs = list(load_config(ROOT / "params.yaml").runs)
    assert [views.run_color(runs, r) for r in sorted(runs)] == list(views.PALETTE[: len(runs)])
