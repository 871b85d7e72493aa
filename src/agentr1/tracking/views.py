"""What the MLflow UI opens on: the RL comparison as a shared view, and one colour per named run.

MLflow keeps a runs page's state (filter, grouping, charts) in the browser, so a fresh browser
opens an experiment on its default view: one collapsed parent run and a chart per metric of the
first 10 runs. The one server-side means it has is a **shared view**: an experiment tag
``mlflow.sharedViewState.<key>`` holding the state as JSON, which the page loads from the URL
``#/experiments/<id>/runs?viewStateShareKey=<key>`` (what the UI's *Share* button writes). The
pipeline writes one such view, :data:`RL_VIEW_KEY`, on every experiment it makes or uses
(:func:`set_views`), and links it from the experiment's description and ``agentr1 track``'s
output:

* the runs whose tag ``agentr1.stage`` is ``train`` (the parent, evaluations and baselines are
  left out), every one of them shown (not the first 10), sorted by name - a sort other than by
  time also lays the runs out flat instead of folded under the collapsed parent run;
* each in its method's colour: a run of a named run carries ``mlflow.runColor``
  (:func:`run_color`, set when the run starts), the seeds of one method alike, methods apart - the
  colours `dvc plots show` gives them - in this view and in every other table and chart;
* the charts of :data:`RL_METRICS` only (dev EM, reward, tool calls per episode), the runs page
  in chart mode: one line per seed.

Not MLflow's *Group by* (one line per method, the mean over its seeds): a group's colour is a
hash of its name into MLflow's palette, which the server cannot set, and for the nano runs two
pairs of methods came out in one colour; grouping stays one click away in the view's toolbar.

The Models page lists a registered model's aliases as "@cold_start: Version 15 +2", the champion
hidden behind "+2"; its Tags column is shown in full, so :func:`show_champion` keeps a model tag
``champion`` saying which version it is, which policy and its gate metric with the interval.
"""

from __future__ import annotations

import json
from typing import Any

from agentr1.tracking.tags import STAGE_TAG

RL_VIEW_KEY = "rl"  # the shared view's key: the tag mlflow.sharedViewState.rl
SHARED_VIEW_TAG = "mlflow.sharedViewState."  # MLflow's prefix of a shared view's experiment tag
RUN_COLOR_TAG = "mlflow.runColor"  # a run's colour in MLflow's runs table and charts (CSS colour)
CHAMPION_TAG = "champion"  # on the registered model: its champion, readable on the Models page
RL_METRICS = ("dev/em", "rollout/reward", "rollout/tool_calls")
# Vega's (d3's) category20, the palette of the dvc plots templates that colour by method
# (.dvc/plots/runs_*.json): the same method has the same colour in `dvc plots show` and in MLflow
PALETTE = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5",
    "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip


def run_color(runs: list[str], group: str) -> str:
    """The colour of named run ``group`` among ``runs``: ``PALETTE`` by its place in the sorted
    names - what Vega's ordinal scale does with the dvc plots' ``method`` field - cycling past 20."""
    return PALETTE[sorted(runs).index(group) % len(PALETTE)]


def rl_view_state() -> dict[str, Any]:
    """The RL comparison's state in the keys MLflow's runs page stores (search facets and UI
    state; the keys a shared view may not set, such as expanded rows, are left out)."""
    return {
        "searchFilter": f"tags.`{STAGE_TAG}` = 'train'",
        "orderByKey": "tags.`mlflow.runName`",  # by name: flat (sorted by time, children fold under the parent)
        "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",
        "hideEmptyCharts": True,
        "chartsSearchFilter": "^(" + "|".join(RL_METRICS) + ")$",  # a case-insensitive regex over metric keys
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
    }


def rl_view_path(exp_id: str) -> str:
    """The UI route (after the server's address) of the RL comparison of experiment ``exp_id``."""
    return f"#/experiments/{exp_id}/runs?viewStateShareKey={RL_VIEW_KEY}&compareRunsMode=CHART"


def trace_path(exp_id: str, trace_id: str) -> str:
    """The UI route that opens trace ``trace_id`` (the Traces tab with the trace's panel open)."""
    return f"#/experiments/{exp_id}/traces?selectedEvaluationId={trace_id}&traceId={trace_id}"


def policy_trace(client: Any, exp_id: str, policy: str) -> str | None:
    """Id of one traced evaluation episode of ``policy`` (tag ``agentr1.policy``; one it answered
    right when there is one) in experiment ``exp_id`` of ``client``'s store, ``None`` when none is
    traced. Through the client, never MLflow's global tracking URI (unset when `agentr1 track` logs
    nothing: the global default would create a store of its own in the working directory)."""
    for extra in (" AND tags.`agentr1.em` = '1.0'", ""):
        found = client.search_traces(
            locations=[exp_id],
            filter_string=f"tags.`agentr1.policy` = '{policy}'{extra}",
            max_results=1,
            include_spans=False,
        )
        if found:
            return found[0].info.trace_id
    return None


def set_views(client: Any, exp_id: str, tags: dict[str, str]) -> None:
    """Write the shared views onto experiment ``exp_id`` (``tags``: its current tags), each only
    when missing or different, so a store of an older version gets today's."""
    value = json.dumps(rl_view_state(), separators=(",", ":"))
    if tags.get(SHARED_VIEW_TAG + RL_VIEW_KEY) != value:
        client.set_experiment_tag(exp_id, SHARED_VIEW_TAG + RL_VIEW_KEY, value)


def champions(client: Any) -> dict[str, str]:
    """``{registered model: its champion tag}`` for every registered model of the store that
    :func:`show_champion` tagged (each profile registers under its own name: ``agentr1-policy``,
    ``agentr1-policy-smol``), by name."""
    models = client.search_registered_models()
    return {m.name: m.tags[CHAMPION_TAG] for m in sorted(models, key=lambda m: m.name) if CHAMPION_TAG in m.tags}


def show_champion(client: Any, name: str, metric: str = "test/em") -> str | None:
    """Tag registered model ``name`` with its champion, e.g. ``v12 grpo-1, test/em 0.342 [0.301,
    0.385]`` (short: the Models page's Tags column cuts a long value; ``none`` without one), when
    the tag differs; returns the text, ``None`` when the model does not exist."""
    from mlflow.exceptions import MlflowException

    from agentr1.tracking.registry import CHAMPION, VARIANT_TAG, version_by_alias, version_metrics

    try:
        model = client.get_registered_model(name)
    except MlflowException:
        return None
    mv = version_by_alias(client, name, CHAMPION)
    text = "none"
    if mv is not None:
        m = version_metrics(client, mv)
        score = (
            f", {metric} {m[metric]:.3f} [{m.get(metric + '_ci_lower', float('nan')):.3f}, "
            f"{m.get(metric + '_ci_upper', float('nan')):.3f}]"
            if metric in m
            else ""
        )
        text = f"v{mv.version} {mv.tags.get(VARIANT_TAG, '?')}{score}"
    if model.tags.get(CHAMPION_TAG) != text:
        client.set_registered_model_tag(name, CHAMPION_TAG, text)
    return text
