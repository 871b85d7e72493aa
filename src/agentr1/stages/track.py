"""``agentr1 track``: make the MLflow store show what DVC has, whatever DVC decided to run.

One module of more than 400 lines on purpose: the command's contract is that every entry is checked before
anything is written, and the lock checks (:func:`lock_entries`, :func:`stale_reason`), :func:`plan` and
:func:`_write` all fill in one :class:`Entry` and its ``state`` (``log`` -> ``logged``, ``adopt``, ``stale``, ...);
split into checks and writes, that guarantee would rest on two modules agreeing on those states.

A stage logs its MLflow run while it runs; a stage DVC skips (its outputs in git or restored
from the run cache, after ``dvc pull``, ``dvc exp apply``, on a new tracking server) logs
nothing. ``agentr1 track``, run in the project root after ``dvc repro`` (``make run`` does),
walks ``dvc.lock`` and, for every stage entry

1. that :data:`LOCK_KINDS` maps to an agentr1 stage (the ``lock`` keys of the stages' specs,
   :class:`agentr1.stages.spec.StageSpec`; an unknown one stops everything, naming the entry to add);
2. whose outputs and dependencies exist (else it is *skipped*: ``dvc pull`` restores them);
3. that the store has no run for (:mod:`agentr1.tracking.lockruns`: a FINISHED run named after
   the entry whose ``dvc.out.*`` tags are the entry's output hashes; a live run of the current
   pipeline that could not tag them is *adopted*: its tags are added),

logs the run the stage would have logged, from its outputs: the stage module's
``log_outputs(ctx, args, replay=True)``, the code the live run calls too, inside the same
:func:`agentr1.stages.context.open_stage` (same name, effective config as params, provenance
and variant tags, ``dvc.out.*`` hashes, nested under the pipeline's parent run), tagged
``agentr1.logged_from = dvc.lock``. Entries go in dependency order, so a ``train@`` run exists
before its evaluation registers the checkpoint (provenance ``agentr1.train_run_id``) and the
gate moves the aliases as it did live; the report puts Table 3 on the parent run.

Before anything is written, every entry to log is checked against ``dvc.lock``: its outputs
must hash as locked and its locked params must equal the params file's; a stale entry stops the
command with the entry, the path or key and the fix (``dvc repro`` / ``dvc checkout``), so the
store never gets a run whose params or outputs differ from what DVC recorded. Running it twice
adds nothing; after a live ``dvc repro`` it adds only the stages DVC skipped.

Not in a reconstructed run, because no output keeps them: the wall times of stages that write
no ``timing.json`` (prepare, validate) or whose ``timing.json`` is absent, the trainer's live
metrics beyond ``curve.csv`` and its sampled rollout traces, and the turns of an evaluated
episode (its trace is the episode's root span; :func:`agentr1.tracking.traces.log_episode_traces`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.config import Config, read_params
from agentr1.errors import StageError
from agentr1.stages import STAGES
from agentr1.stages.context import open_stage
from agentr1.tracking import lockruns, provenance, views
from agentr1.tracking.mlflow_adapter import connect, current_pipeline_id, experiment_name
from agentr1.tracking.redact import redact_uri
from agentr1.tracking.registry import CHAMPION, VARIANT_TAG
from agentr1.tracking.tags import LOGGED_FROM_TAG
from agentr1.tracking.uri import resolve_tracking_uri
from agentr1.tracking.writelock import writer_lock

log = logging.getLogger(__name__)

# dvc.lock key (before '@') -> (the agentr1 stage of STAGES, the argument its '@<name>' fills), from
# the stages' specs (StageSpec.lock). A new DVC stage declares its keys there and has a
# `log_outputs(ctx, args, replay)` in its module.
LOCK_KINDS: dict[str, tuple[str, str | None]] = {
    prefix: (stage, arg) for stage, (_, spec) in STAGES.items() for prefix, arg in spec.lock.items()
}
LOGGED_FROM = "dvc.lock"


@dataclass
class Entry:
    """One ``dvc.lock`` stage entry and what ``track`` does with it. ``state``: ``in MLflow`` (a
    run has it), ``adopt`` -> ``adopted``, ``log`` -> ``logged`` (before -> after :func:`track`),
    ``skipped`` (outputs missing) or ``stale``; ``note`` says why, or which run."""

    key: str
    stage: str
    args: argparse.Namespace
    outs: dict[str, str]
    deps: list[str]
    params: dict[str, dict[str, Any]]
    state: str = ""
    note: str = ""
    run_id: str | None = field(default=None, repr=False)


def resolve(key: str) -> tuple[str, argparse.Namespace]:
    """The agentr1 stage and CLI arguments of ``dvc.lock`` key ``key`` (:data:`LOCK_KINDS`);
    :class:`StageError` naming the entry to add for an unknown one."""
    prefix, at, name = key.partition("@")
    if prefix not in LOCK_KINDS:
        raise StageError(
            f"dvc.lock stage {key!r} has no entry in agentr1.stages.track.LOCK_KINDS, so `agentr1 track` "
            f"cannot log it: add {prefix!r}: <argument its @name fills or None> to the lock of the SPEC of "
            'its stage module and a log_outputs(ctx, args, replay) there (docs/EXTENDING.md, "A stage")'
        )
    stage, arg = LOCK_KINDS[prefix]
    if bool(arg) != bool(at):
        raise StageError(
            f"dvc.lock stage {key!r}: LOCK_KINDS[{prefix!r}] expects "
            f"{f'a foreach key {prefix}@<name>' if arg else f'the plain stage name {prefix!r}'}"
        )
    module = importlib.import_module(STAGES[stage][0])
    if not hasattr(module, "log_outputs"):
        raise StageError(
            f"stage module {module.__name__} has no log_outputs(ctx, args, replay): `agentr1 track` needs one"
        )
    return stage, argparse.Namespace(**({arg: name} if arg else {}))


def _overlap(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` are the same or one lies inside the other (a stage that
    depends on ``data/eval`` reads the outputs ``data/eval/<policy>/...``)."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


MAX_PROBLEMS = 20  # listed in one error; the rest are counted


def _path_problem(path: str, root: Path, inside: tuple[Path, ...]) -> str | None:
    """Why a locked out/dep ``path`` is no path of the project: absolute, or outside ``root`` once
    ``..`` and symbolic links are resolved (a link into the DVC cache ``inside[1:]`` is fine).
    Decided from the path's name and links alone, before anything is hashed (``/`` would scan the disk)."""
    if Path(path).is_absolute():
        return "is absolute: dvc.lock paths are relative to the project root"
    try:
        real = (root / path).resolve()
    except (OSError, RuntimeError) as exc:  # a loop of symbolic links
        return f"cannot be resolved ({exc})"
    if not any(real == base or real.is_relative_to(base) for base in inside):
        return f"resolves to {real}, outside the project {inside[0]}"
    return None


def _structure_problems(key: str, raw: Any) -> list[str]:
    """What in the entry ``raw`` of ``dvc.lock`` key ``key`` is not what DVC writes: a mapping whose
    ``cmd`` is text, ``deps``/``outs`` lists of mappings with a string ``path``, ``params`` a
    mapping of params file -> mapping."""
    if not isinstance(raw, dict):
        return [f"{key}: the entry is a {type(raw).__name__}, not a mapping (cmd, deps, outs, params)"]
    problems = []
    cmd = raw.get("cmd")
    if not (isinstance(cmd, str) or (isinstance(cmd, list) and all(isinstance(c, str) for c in cmd))):
        problems.append(f"{key}: cmd is {type(cmd).__name__}, not the stage's command")
    for field_ in ("deps", "outs"):
        items = raw.get(field_)
        if items is None:
            continue
        if not isinstance(items, list):
            problems.append(f"{key}: {field_} is a {type(items).__name__}, not a list")
            continue
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not item["path"].strip():
                problems.append(f"{key}: {field_}[{i}] is not a mapping with a string `path`")
    params = raw.get("params")
    if params is not None and not (
        isinstance(params, dict) and all(isinstance(v, dict) or v is None for v in params.values())
    ):
        problems.append(f"{key}: params is not a mapping of params file -> mapping of keys")
    return problems


def _foreach_problem(cfg: Config, stage: str, args: argparse.Namespace, key: str) -> str | None:
    """Why the ``@<name>`` of ``key`` (a run or baseline of the params ``cfg``,
    :func:`_left_the_pipeline`) cannot be what the stage runs, as the stage would decide it
    (``evaluate``: under the stage name of a run or of a baseline, :func:`agentr1.eval.policies.resolve_policy`;
    ``train``: the run's merged config, :meth:`Config.for_run`), without its checkpoint or outputs."""
    from agentr1.config import ConfigError

    if stage == "evaluate":
        from agentr1.eval.policies import BASELINES

        name = args.policy
        if name in cfg.runs and name in BASELINES:
            return f"{key}: run {name!r} in params `runs` shadows the baseline of the same name: rename the run"
        expected = f"evaluate@{name}" if cfg.is_run(name) else f"evaluate_baseline@{name}"
        if expected != key:
            return f"{key}: policy {name!r} is evaluated as {expected!r}, not {key!r}"
    elif stage == "train":
        try:
            cfg.for_run(args.run)
        except ConfigError as exc:
            return f"{key}: {exc}"
    return None


def lock_entries(lock_path: str | Path = "dvc.lock", cfg: Config | None = None) -> list[Entry]:
    """Every stage entry of ``dvc.lock``, resolved (:func:`resolve`) and in dependency order (a
    stage after every stage whose outputs it depends on, else in the lock's order); a stage whose
    command is not ``agentr1 ...`` (a user's own) is ``skipped``: it has no agentr1 run to log.

    The whole lock is checked first, so that nothing is hashed nor written (and ``--dry-run``
    predicts the failure) when any entry is not what DVC writes (:func:`_structure_problems`), is
    unknown, cannot be the stage its name says under the params ``cfg`` (:func:`_foreach_problem`),
    or an agentr1 entry's out/dep path leaves the project (:func:`_path_problem`). An entry of a run
    the params ``cfg`` no longer define is ``skipped`` (:func:`_left_the_pipeline`).
    :class:`StageError` listing every problem with the fix, or when there is no ``dvc.lock``."""
    lock_path = Path(lock_path)
    if not lock_path.is_file():
        raise StageError(
            f"no {lock_path} here: run `agentr1 track` in the project root, after `dvc repro` (or `dvc pull`)"
        )
    root = provenance.project_root(lock_path)
    inside = (root.resolve(), (root / ".dvc" / "cache").resolve())
    entries, problems, unknown = [], [], []
    for key, raw in provenance.lock_stages(lock_path).items():
        key = str(key)
        found = _structure_problems(key, raw)
        if found:
            problems += found
            continue
        try:
            entry, found = _lock_entry(key, raw, cfg, root, inside)
        except StageError as exc:
            unknown.append(str(exc))
            continue
        entries.append(entry)
        problems += found
    if unknown:  # a stage agentr1 does not know: the fix is in the code, not in the lock
        raise StageError("; ".join(unknown + problems))
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
        raise StageError(
            f"{lock_path} is not what `dvc repro` writes, nothing logged ({len(problems)} problem(s)): "
            + "; ".join(shown)
            + f": {provenance.LOCK_FIX}"
        )
    return _dependency_order(entries, lock_path)


def _lock_entry(
    key: str, raw: dict, cfg: Config | None, root: Path, inside: tuple[Path, Path]
) -> tuple[Entry, list[str]]:
    """One well-formed lock entry as an :class:`Entry` (``skipped`` when its command is not
    ``agentr1 ...``) and its problems: an out or dep path outside the project, a policy or run the
    params ``cfg`` lack. :class:`StageError` when agentr1 knows no such stage (:func:`resolve`)."""
    outs = {o["path"]: provenance.entry_hash(o) or "" for o in raw.get("outs") or []}
    deps = [d["path"] for d in raw.get("deps") or []]
    cmd = raw.get("cmd") or ""
    cmd = cmd if isinstance(cmd, str) else " && ".join(cmd)
    if cmd.split()[:1] != ["agentr1"]:
        note = f"not an agentr1 stage (cmd `{cmd[:80]}`): no run to log"
        return Entry(key, "", argparse.Namespace(), outs, deps, {}, state="skipped", note=note), []
    stage, args = resolve(key)
    problems = [
        f"{key}: {kind} {path!r} {why}"
        for kind, paths in (("out", outs), ("dep", deps))
        for path in paths
        if (why := _path_problem(path, root, inside))
    ]
    if cfg is not None and (gone := _left_the_pipeline(cfg, stage, args)):
        note = f"{gone}: a stage of earlier params (DVC keeps its lock entry when `runs` changes); not logged"
        return Entry(key, stage, args, outs, deps, {}, state="skipped", note=note), problems
    name_problem = _foreach_problem(cfg, stage, args, key) if cfg is not None else None
    if name_problem:
        problems.append(name_problem)
    return Entry(key, stage, args, outs, deps, dict(raw.get("params") or {})), problems


def _left_the_pipeline(cfg: Config, stage: str, args: argparse.Namespace) -> str | None:
    """Why a well-formed ``train@``/``evaluate@`` entry is no stage of the pipeline the params ``cfg``
    define (its run or policy is neither a run of ``runs``, a replica ``<run>-<seed>`` of one, nor a
    baseline), or None. ``dvc repro`` writes the entries of the stages it runs and leaves the others
    in the lock: after a profile or a shorter ``runs`` (issue 49), the old foreach items stay there."""
    from agentr1.eval.policies import BASELINES

    name = args.run if stage == "train" else args.policy if stage == "evaluate" else None
    if name is None or cfg.is_run(name) or (stage == "evaluate" and name in BASELINES):
        return None
    return f"{name!r} is no run of these params (runs: {', '.join(sorted(cfg.runs))})"


def _dependency_order(entries: list[Entry], lock_path: Path) -> list[Entry]:
    """``entries`` with each after every entry whose outputs it depends on (else in the lock's
    order); :class:`StageError` on a cycle."""
    after = {
        e.key: {o.key for o in entries if o is not e and any(_overlap(d, out) for d in e.deps for out in o.outs)}
        for e in entries
    }
    ordered: list[Entry] = []
    while len(ordered) < len(entries):
        done = {e.key for e in ordered}
        ready = [e for e in entries if e.key not in done and after[e.key] <= done]
        if not ready:
            raise StageError(
                f"{lock_path}: the stages {sorted(set(after) - done)} depend on each other's outputs in a cycle"
            )
        ordered.append(ready[0])
    return ordered


_MISSING = object()


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def same_value(locked: Any, now: Any) -> bool:
    """Whether a param as ``dvc.lock`` recorded it (YAML 1.2) equals its value in the params
    file (read as YAML 1.1, where ``1e-4`` is a string: numbers compare as numbers)."""
    if isinstance(locked, dict) or isinstance(now, dict):
        return (
            isinstance(locked, dict)
            and isinstance(now, dict)
            and locked.keys() == now.keys()
            and all(same_value(locked[k], now[k]) for k in locked)
        )
    if isinstance(locked, list) or isinstance(now, list):
        return (
            isinstance(locked, list)
            and isinstance(now, list)
            and len(locked) == len(now)
            and all(map(same_value, locked, now))
        )
    if isinstance(locked, bool) or isinstance(now, bool) or locked is None or now is None:
        return locked is now
    if locked == now:
        return True
    try:
        return float(locked) == float(now)
    except (TypeError, ValueError):
        return False


def stale_reason(entry: Entry, root: Path) -> str | None:
    """Why ``entry`` cannot be logged from the workspace as it is (outputs that do not hash as
    locked, a locked param that differs from the params file), with the fix; ``None`` when it can."""
    changed = [path for path, digest in entry.outs.items() if provenance.dvc_hash(root / path) != digest]
    if changed:
        return (
            f"{', '.join(changed)} differ from what dvc.lock records: `dvc repro` (or `dvc checkout {entry.key}` "
            "to restore the locked outputs) first"
        )
    for file, values in entry.params.items():
        current = read_params(root / file)
        for key, locked in (values or {}).items():
            now = _lookup(current, key)
            if now is _MISSING or not same_value(locked, now):
                shown = "missing" if now is _MISSING else repr(now)
                return (
                    f"param {key} in {file} ({shown}) differs from the value dvc.lock records for this stage "
                    f"({locked!r}): `dvc repro` first, or restore {file}"
                )
    return None


def plan(cfg: Config, lock_path: str | Path = "dvc.lock") -> tuple[list[Entry], Any]:
    """Every entry of ``dvc.lock`` with its ``state`` (class :class:`Entry`) and the MLflow client
    (``None`` while the store does not exist). Reads only: writes nothing to the store."""
    lock_path = Path(lock_path)
    root = provenance.project_root(lock_path)
    entries = lock_entries(lock_path, cfg)  # the whole lock checked before anything is hashed or written
    client, exp_id = lockruns.open_store(cfg, create=False)
    pipeline = current_pipeline_id(cfg, lock_path)
    for e in entries:
        if e.state:  # decided by lock_entries (a user's own stage)
            continue
        missing = [p for p in [*e.outs, *e.deps] if not (root / p).exists()]
        if missing:
            e.state = "skipped"
            e.note = f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} missing: `dvc pull` (or `dvc repro`) first"
            continue
        found = lockruns.find(client, exp_id, e.key, e.outs, pipeline) if exp_id is not None else None
        if found is not None:
            e.state, e.run_id = ("in MLflow" if found.state == "logged" else "adopt"), found.run_id
            e.note = f"run {found.run_id}"
            continue
        from agentr1.tracking.replaycheck import entry_problem  # the files log_outputs would replay, checked first

        reason = stale_reason(e, root) or entry_problem(e.key, e.outs, root)
        e.state, e.note = ("stale", reason) if reason else ("log", "")
    return entries, client


def log_entry(cfg: Config, entry: Entry) -> str:
    """Log the run of ``entry`` from its outputs (module docstring); returns the run id."""
    module = importlib.import_module(STAGES[entry.stage][0])
    run_name, variant = module.names(cfg, entry.args) if hasattr(module, "names") else (entry.stage, None)
    if run_name != entry.key:
        raise StageError(
            f"dvc.lock stage {entry.key!r} resolves to the run name {run_name!r}: fix the lock of the "
            f"SPEC of {module.__name__}"
        )
    with open_stage(
        cfg, entry.stage, run_name=run_name, variant=variant, extra_tags={LOGGED_FROM_TAG: LOGGED_FROM}
    ) as ctx:
        module.log_outputs(ctx, entry.args, replay=True)
    return str(ctx.run.run_id)


def _checked_plan(cfg: Config, lock_path: str | Path) -> tuple[list[Entry], Any]:
    """:func:`plan`, with :class:`StageError` listing the stale entries (nothing written)."""
    entries, client = plan(cfg, lock_path)
    stale = [e for e in entries if e.state == "stale"]
    if stale:
        raise StageError("nothing logged: " + "; ".join(f"{e.key}: {e.note}" for e in stale))
    return entries, client


def track(cfg: Config, lock_path: str | Path = "dvc.lock", dry_run: bool = False) -> list[Entry]:
    """Make the store show every stage of ``lock_path`` (module docstring); with ``dry_run`` only
    the plan. :class:`StageError` before anything is written when an entry is unknown or stale.

    One writer at a time (:func:`agentr1.tracking.writelock.writer_lock`): a real run plans and
    writes holding the store's writer lock, so a second ``agentr1 track`` started meanwhile waits,
    then plans from a store that has the first one's runs and adds nothing (as when run after
    it). A dry run writes nothing and takes no lock."""
    if dry_run:
        return _checked_plan(cfg, lock_path)[0]
    with writer_lock(cfg, "agentr1 track"):
        entries, client = _checked_plan(
            cfg, lock_path
        )  # inside the lock: what another writer logged is not logged again
        if any(e.state in ("log", "adopt") for e in entries):
            _write(cfg, entries, client)
    return entries


def _write(cfg: Config, entries: list[Entry], client: Any) -> None:
    """Adopt and log the planned entries, in order (the writer lock held)."""
    connect(cfg)  # the profile's experiment, made when missing
    for e in entries:
        if e.state == "adopt":
            lockruns.adopt(client, str(e.run_id), e.outs)
            e.state = "adopted"
        elif e.state == "log":
            e.run_id = log_entry(cfg, e)
            e.state, e.note = "logged", f"run {e.run_id}"
        log.info("track: %-34s %s %s", e.key, e.state, e.note)


def run_track(cfg: Config, args: argparse.Namespace) -> None:
    """CLI ``agentr1 track [--dry-run]``: one line per ``dvc.lock`` stage, then the counts and the
    registry's versions and aliases."""
    if not cfg.tracking.enabled:
        print("agentr1 track: tracking.enabled is false: nothing to log")
        return
    if getattr(args, "set", None):
        raise StageError("agentr1 track logs the params dvc.lock recorded: run it without --set")
    lock = cfg.lock_path  # the lock beside the params file: dvc.lock, or pipelines/<name>/dvc.lock
    files = (
        {
            str(f)
            for e in provenance.lock_stages(lock).values()
            if isinstance(e, dict) and isinstance(e.get("params"), dict)
            for f in e["params"]
        }
        if lock.is_file()
        else set()
    )
    if files and Path(args.params).resolve() not in {Path(f).resolve() for f in files}:
        raise StageError(
            f"{lock} records params from {', '.join(sorted(files))}, not {args.params}: pass --params "
            f"{sorted(files)[0]}"
        )
    entries = track(cfg, lock, dry_run=args.dry_run)
    words = {"log": "would log", "adopt": "would adopt"} if args.dry_run else {}
    counts: dict[str, int] = {}
    for e in entries:
        state = words.get(e.state, e.state)
        counts[state] = counts.get(state, 0) + 1
        print(f"{e.key:<34} {state}{': ' + e.note if e.note else ''}")
    print(
        f"agentr1 track: {len(entries)} stages in dvc.lock: " + ", ".join(f"{n} {state}" for state, n in counts.items())
    )
    client, _ = lockruns.open_store(cfg, create=False)
    n, aliases = lockruns.registry_state(client, cfg.tracking.registered_model) if client is not None else (0, {})
    print(
        f"MLflow {redact_uri(resolve_tracking_uri(cfg))} experiment {experiment_name(cfg)}; registry "
        f"{cfg.tracking.registered_model}: {n} versions, aliases "
        + (", ".join(f"{a}=v{v}" for a, v in aliases.items()) or "none")
    )
    if client is not None and n and not args.dry_run:  # a dry run writes nothing
        champion = views.show_champion(client, cfg.tracking.registered_model, cfg.tracking.gate_metric)
        print(f"champion (tag `{views.CHAMPION_TAG}` on the Models page): {champion}")
        champions = views.champions(client)
        if len(champions) > 1:  # another profile's pipeline registered its own model in this store
            print("champions of the store's registered models (one per profile), side by side:")
            for name, text in champions.items():
                print(f"  {name:<28} {text}")
            print(f"  compare them: agentr1 compare --model {' '.join(champions)} --aliases champion")
    exp = client.get_experiment_by_name(experiment_name(cfg)) if client is not None else None
    if exp is not None:
        ui, exp_id = _ui_address(cfg), exp.experiment_id
        print(f"the RL runs side by side: {ui}/{views.rl_view_path(exp_id)}")
        policy = None
        if CHAMPION in aliases:
            policy = client.get_model_version(cfg.tracking.registered_model, aliases[CHAMPION]).tags.get(VARIANT_TAG)
        trace = views.policy_trace(client, exp_id, policy) if policy else None
        if trace:
            print(f"an episode of the champion ({policy}): {ui}/{views.trace_path(exp_id, trace)}")


def _ui_address(cfg: Config) -> str:
    """Where the UI of the store is: the tracking server itself, else ``mlflow ui``'s default
    address (docs/RESULTS_GUIDE.md starts it)."""
    uri = resolve_tracking_uri(cfg)
    return redact_uri(uri).rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
