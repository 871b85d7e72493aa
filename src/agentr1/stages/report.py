"""Stage ``report``: the paper's tables, plots and a generated summary from the evaluations.

``agentr1 report`` reads ``<evaluate.out_dir>/<policy>/{metrics,episodes}`` of every replica
``<run>-<seed>`` of params ``runs`` x ``seeds`` and of the baselines (base_tool_call, naive_rag,
cold_start), and each replica's ``<train.out_dir>/<run>-<seed>/curve.csv``; a missing file fails the
stage naming the ``dvc repro`` that writes it. Each run is a row with its seeds, ablations paired
with their full-mask method (:func:`agentr1.report.methods.group_methods`); every interval resamples
the seeds and the questions (:mod:`agentr1.report.stats`), and a verdict needs ``report.min_seeds``
seeds per RL row. Outputs in ``report.out_dir`` (default ``reports/``):

* ``table3.md`` / ``table3.csv`` - baselines and full-mask RL methods per split and averaged;
* ``table4.md`` / ``table4.csv`` - mask ablations vs their full-mask method, paired bootstrap;
* ``breakdown.md`` / ``breakdown.csv`` - per question type and per number of hops;
* ``behaviour.md`` / ``behaviour.csv`` - what the policies do besides scoring, per split, question
  type and hops: tool calls per episode, the early-answer share (multi-hop episodes answered
  before all their supporting passages were retrieved), format-valid and answered rates
  (:mod:`agentr1.report.behaviour`; ``report.json`` ``behaviour``);
* ``summary.md`` - computed statements (best method, GRPO vs baselines, beyond-noise results),
  how GRPO's tool calls and early-answer share differ from the cold start's, and what RL starts
  from (the base's reading gate, the cold start's copy probe and its headroom:
  greedy EM against sampled EM and pass@k; :mod:`agentr1.report.foundation`);
* ``report.json`` - every number above (DVC metric): ``policies.<label>.<split|avg>`` (mean, std,
  CI, n, per-seed values), ``ablations.<ablation>.<split|avg>`` (a = the ablation, b = its
  full-mask method), ``vs_baselines.<policy>.<baseline>.<split|avg>`` (a = the policy),
  ``summary.vs_methods`` (RL method pairs from one cold start), each difference with its CI,
  p-value, seeds, ``judged`` and ``beyond_noise``; ``interval_method``; ``breakdown``; ``behaviour``
  (``splits``: the behaviour table's numbers, ``grpo_vs_cold_start``: the summary's); ``summary``;
* ``tools.md`` (+ ``report.json`` ``tools``) - only when the splits hold calculator questions
  (``data.task: tools``, GSM8K): per question type the metric with CIs, calls and success rate
  per tool, and each RL method vs the cold start (:mod:`agentr1.report.tools`);
* ``curves.csv`` - long-format learning curves (run, method, step, reward, dev_em, tool_calls; DVC
  plots);
* ``plots/learning_curves.png`` (rollout reward, dev EM and tool calls per rollout episode over RL
  steps), ``plots/em_bars.png``, ``plots/ablations.png``, ``plots/step_credit.png`` (the curves of GRPO and
  of the step-level methods, GiGPO, alone).

All numbers are computed before anything is written; each file is written atomically. With
``tracking.enabled`` the Table 3 numbers are logged to the stage's MLflow run ``report`` and the
output folder as its artifacts (Table 3 also as an MLflow table, ``report/table3.json``), and the
headline goes on the pipeline's parent run too: those metrics, ``summary.md``, the tables and the
plots, and as the run's description the summary and Table 4 in Markdown (:func:`run_description`). The params and inputs are checked before the run opens.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agentr1.errors import StageError
from agentr1.io import write_json_atomic, write_text_atomic
from agentr1.report import plots
from agentr1.report.behaviour import behaviour, behaviour_summary, behaviour_tables
from agentr1.report.foundation import foundation
from agentr1.report.inputs import check_inputs, load_curve, load_evaluation
from agentr1.report.methods import BASELINES, group_methods, report_baselines
from agentr1.report.rows import Diff, Row, ablation_pairs, breakdown, build_rows, compare
from agentr1.report.stats import AVG
from agentr1.report.step_credit import step_credit, step_credit_inputs
from agentr1.report.summary import grpo_row, method_pairs, summarize, summary_markdown
from agentr1.report.tables import breakdown_tables, csv_text, interval_method, table3, table4
from agentr1.report.tools import tools_section
from agentr1.stages.context import StageContext
from agentr1.stages.spec import StageSpec

SPEC = StageSpec("report", "Table 3/4 analogues, breakdowns, plots and summary.md from the evaluations", order=80)

log = logging.getLogger(__name__)


def _report_json(
    cfg, rows: list[Row], ablation_diffs: dict[str, list[Diff]], vs_baselines: dict, bd: dict, facts: dict
) -> dict:
    r = cfg.report
    splits = list(r.splits)
    policies = {}
    for row in rows:
        m = row.method
        policies[row.label] = {
            "name": row.display,
            "kind": row.kind,
            "runs": row.runs,
            "n_seeds": row.n_seeds,
            "overrides": m.overrides if m else {},
            "estimator": m.estimator if m else None,
            "masks_off": m.masks_off if m else [],
            "ablation_of": m.ablation_of if m else None,
            **{k: {**row.cells[k].as_dict(), "per_seed": row.per_seed[k]} for k in [*splits, AVG]},
        }
    return {
        "metric": r.metric,
        "splits": splits,
        "bootstrap": {
            "samples": r.bootstrap.samples,
            "ci": r.bootstrap.ci,
            "seed": cfg.seed,
            "interval": "percentile",
            # what each replicate redraws (agentr1.report.stats.seeds_questions)
            "resamples": {
                "training_seeds": "per RL row, S - 1 draws of its S seeds (Rao-Wu)"
                + ("; one draw for both rows of a difference on the same seeds" if r.pair_seeds else ""),
                "questions": "per split, one draw shared by every seed and both rows (paired)",
            },
        },
        "seeds": list(cfg.seeds),
        "min_seeds": r.min_seeds,
        "interval_method": interval_method(r.bootstrap.ci, r.bootstrap.samples, r.pair_seeds),
        "pair_seeds": r.pair_seeds,
        "policies": policies,
        "ablations": {a: {d.split: d.as_dict() for d in ds} for a, ds in ablation_diffs.items()},
        "vs_baselines": {
            p: {b: {d.split: d.as_dict() for d in ds} for b, ds in per.items()} for p, per in vs_baselines.items()
        },
        "breakdown": bd,
        "summary": facts,
    }


def before(cfg, args: Any = None) -> None:
    """Fail before the run opens when the params cannot make a report or an input is missing."""
    rc = cfg.report
    splits = list(rc.splits)
    not_evaluated = [s for s in splits if s not in cfg.evaluate.splits]
    if not_evaluated:
        raise StageError(
            f"report.splits {not_evaluated} are not in evaluate.splits {list(cfg.evaluate.splits)}: "
            "add them there (and re-run the evaluate stages) or remove them from report.splits"
        )
    runs = list(cfg.runs)
    clash = sorted(set(runs) & set(BASELINES))
    if clash:
        raise StageError(f"params runs {clash} reuse a baseline's name ({', '.join(BASELINES)}): rename the run")
    if not runs:
        raise StageError("params `runs` is empty: the report compares named RL runs against the baselines")
    check_inputs(
        Path(cfg.evaluate.out_dir),
        Path(cfg.train.out_dir),
        cfg.replicas(),
        list(report_baselines(cfg.sft_reference is not None)),
    )


def run(ctx: StageContext, args: Any = None) -> dict:
    """Run the stage (module docstring); returns the report.json content."""
    cfg, rc = ctx.cfg, ctx.cfg.report
    splits, metric = list(rc.splits), rc.metric
    samples, ci, seed = rc.bootstrap.samples, rc.bootstrap.ci, cfg.seed
    eval_dir, runs_dir, out = Path(cfg.evaluate.out_dir), Path(cfg.train.out_dir), Path(rc.out_dir)
    named = report_baselines(cfg.sft_reference is not None)
    runs, baselines = cfg.replicas(), list(named)
    methods = group_methods(cfg.runs, cfg.train.model_dump(), cfg.seeds)
    evals = {p: load_evaluation(eval_dir, p, splits, metric, baselines) for p in [*runs, *baselines]}
    rows = build_rows(methods, evals, splits, samples, ci, seed, named)
    by_label = {r.label: r for r in rows}

    def diff(a: Row, b: Row) -> list[Diff]:
        return compare(a, b, splits, samples, ci, seed, rc.min_seeds, rc.pair_seeds)

    ablation_diffs = {abl.label: diff(abl, full) for abl, full in ablation_pairs(rows)}
    vs_baselines = {r.label: {b: diff(r, by_label[b]) for b in baselines} for r in rows if r.kind != "baseline"}
    vs_methods = {(a.label, b.label): diff(a, b) for a, b in method_pairs(rows)}
    bd = breakdown(rows, splits)
    facts = summarize(rows, vs_baselines, ablation_diffs, splits, metric, ci, vs_methods, rc.min_seeds)
    method_of = {run: m.label for m in methods for run in m.runs}
    curves = [load_curve(runs_dir, run) for m in methods for run in m.runs]
    facts["step_credit"], lines = step_credit(rows, *step_credit_inputs(rows, curves, diff), splits, ci)
    facts["lines"] += lines
    bh = behaviour(rows, evals, splits)
    bh_facts, bh_md_section = behaviour_summary(rows, bh, splits)
    report = _report_json(cfg, rows, ablation_diffs, vs_baselines, bd, facts)
    report["behaviour"] = {"splits": bh, "grpo_vs_cold_start": bh_facts}
    tools = tools_section(rows, evals, splits, metric, samples, ci, seed, rc.min_seeds)
    if tools is not None:
        report["tools"] = tools[0]
    reference_dir = Path(cfg.sft_for("reference").report_dir) if cfg.sft_reference is not None else None
    report["foundation"], foundation_md = foundation(
        Path(cfg.pretrain.report_dir), Path(cfg.sft.report_dir), eval_dir, splits, reference_dir
    )

    pair = rc.pair_seeds
    texts = {
        **_pair("table3", table3(rows, splits, metric, ci, samples, pair)),
        **_pair("table4", table4(rows, ablation_diffs, splits, metric, ci, samples, pair)),
        **_pair("breakdown", breakdown_tables(rows, bd, splits, metric)),
        **_pair("behaviour", behaviour_tables(rows, bh, splits, metric)),
        "summary.md": summary_markdown(facts, rows, metric, splits, interval_method(ci, samples, pair))
        + "\n".join(["", *bh_md_section, *foundation_md]),
        "curves.csv": _curves_csv(curves, method_of),
        **({"tools.md": tools[1]} if tools is not None else {}),
    }
    _write_plots(out / "plots", rows, curves, method_of, facts["step_credit"], splits, metric, ci)
    for name, text in texts.items():
        write_text_atomic(out / name, text)
    write_json_atomic(out / "report.json", report)
    log_outputs(ctx)

    summary_path = out / "summary.md"
    kinds = [r.kind for r in rows]
    counts = (len(rows), kinds.count("rl"), kinds.count("ablation"), ", ".join(splits), summary_path)
    log.info("report: %d policies (%d RL methods, %d ablations) over %s; summary in %s", *counts)
    print(summary_path)
    return report


def _pair(name: str, texts: tuple[str, str]) -> dict[str, str]:
    """``{name.md: markdown, name.csv: csv}`` of a table function's (markdown, csv)."""
    return {f"{name}.md": texts[0], f"{name}.csv": texts[1]}


def _curves_csv(curves: list, method_of: dict[str, str]) -> str:
    """curves.csv: one line per run and step (reward, dev EM, tool calls; empty where not measured)."""
    lines = [
        [c.run, method_of[c.run], s, rw, dv, tc]
        for c in curves
        for s, rw, dv, tc in zip(c.steps, c.reward, c.dev_em, c.tool_calls)
    ]
    return csv_text(["run", "method", "step", "reward", "dev_em", "tool_calls"], lines)


def _write_plots(
    plot_dir: Path,
    rows: list[Row],
    curves: list,
    method_of: dict[str, str],
    step_credit: Any,
    splits: list[str],
    metric: str,
    ci: float,
) -> None:
    """The report's PNGs: every run's learning curves, EM bars, the ablations, and GRPO's with the
    step-level methods' curves alone (``step_credit.png``; every run's when neither is there)."""
    plots.learning_curves(curves, method_of, plot_dir / "learning_curves.png")
    plots.em_bars(rows, splits, metric, ci, plot_dir / "em_bars.png")
    plots.ablations(rows, splits, metric, ci, plot_dir / "ablations.png")
    grpo = grpo_row(rows)
    pair = {*([grpo.label] if grpo is not None else []), *step_credit} or set(method_of.values())
    plots.learning_curves([c for c in curves if method_of[c.run] in pair], method_of, plot_dir / "step_credit.png")


HEADLINE_FILES = ("summary.md", "table3.md", "table4.md")  # the parent run's artifacts (under report/, with plots/)
DESCRIPTION_TAG = "mlflow.note.content"  # a run's description in the MLflow UI (Markdown)
DESCRIPTION_LIMIT = 8000  # MLflow's longest tag value (mlflow.utils.validation.MAX_TAG_VAL_LENGTH)


def table3_metrics(report: dict) -> dict[str, float]:
    """``{"table3/<policy>.<split|avg>.<metric>[_ci_lower|_ci_upper]": value}``: every Table 3
    cell (mean and CI bounds) of ``report.json``'s ``policies``, one section ``table3`` deep in
    MLflow's charts."""
    flat = {}
    for label, cells in report["policies"].items():
        for k in [*report["splits"], AVG]:
            c = cells[k]
            name = f"table3/{label}.{k}.{report['metric']}"
            flat.update({name: c["mean"], f"{name}_ci_lower": c["ci_lower"], f"{name}_ci_upper": c["ci_upper"]})
    return flat


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """The stage's MLflow run from ``report.out_dir``, live or reconstructed by ``agentr1 track``:
    the Table 3 cells of ``report.json`` as metrics and the report folder as artifacts of the
    ``report`` run, and the headline (the same metrics, ``summary.md``, the tables and the plots)
    on the pipeline's parent run, which the experiment's runs table shows first."""
    out = Path(ctx.cfg.report.out_dir)
    flat = table3_metrics(json.loads((out / "report.json").read_text()))
    run = ctx.run
    run.log_metrics(flat)
    run.log_artifacts([out], artifact_path="report")
    table = read_csv_rows(out / "table3.csv")
    run.log_rows(table, "report/table3.json")
    parent = run.pipeline_run()
    parent.log_metrics(flat)
    parent.log_artifacts([out / name for name in HEADLINE_FILES], artifact_path="report")
    parent.log_artifacts([out / "plots"], artifact_path="report/plots")  # a folder's files go in artifact_path
    parent.log_rows(table, "report/table3.json")
    parent.set_tags({DESCRIPTION_TAG: run_description(out)})


def read_csv_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a report CSV, a cell that reads as a number as a float (so MLflow's table view
    sorts it as one), an empty cell as ``None``."""
    import csv

    def cell(v: str) -> Any:
        try:
            return float(v)
        except ValueError:
            return v or None

    with path.open(newline="") as fh:
        return [{k: cell(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def run_description(out: Path, limit: int = DESCRIPTION_LIMIT) -> str:
    """The parent run's description (``mlflow.note.content``, which the run page renders as
    Markdown): ``summary.md`` (the verdicts and Table 3) and then ``table4.md``, whole paragraphs
    while they fit in ``limit`` characters (MLflow's limit on a tag value), then a line naming the
    artifacts that hold the rest."""
    more = "\n\n*The rest: artifacts `report/summary.md`, `report/table4.md`, `report/table3.json` (a table).*"
    blocks = [b for name in ("summary.md", "table4.md") for b in (out / name).read_text().strip().split("\n\n")]
    kept: list[str] = []
    for i, block in enumerate(blocks):
        tail = "" if i == len(blocks) - 1 else more
        if len("\n\n".join([*kept, block])) + len(tail) > limit:
            while kept and kept[-1].startswith("#"):  # no heading without its table
                kept.pop()
            return "\n\n".join(kept) + more
        kept.append(block)
    return "\n\n".join(kept)
