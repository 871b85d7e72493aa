"""``agentr1 track``: make the MLflow store show what DVC has, whatever DVC decided to run.

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
from agentr1.tracking import lockruns, provenance
from agentr1.tracking.mlflow_adapter import connect, current_pipeline_id, experiment_name
from agentr1.tracking.redact import redact_uri
from agentr1.tracking.tags import LOGGED_FROM_TAG
from agentr1.tracking.uri import resolve_tracking_uri

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
        raise StageError(f"dvc.lock stage {key!r} has no entry in agentr1.stages.track.LOCK_KINDS, so `agentr1 track` "
                         f"cannot log it: add {prefix!r}: <argument its @name fills or None> to the lock of the SPEC of "
                         "its stage module and a log_outputs(ctx, args, replay) there (docs/EXTENDING.md, \"A stage\")")
    stage, arg = LOCK_KINDS[prefix]
    if bool(arg) != bool(at):
        raise StageError(f"dvc.lock stage {key!r}: LOCK_KINDS[{prefix!r}] expects "
                         f"{f'a foreach key {prefix}@<name>' if arg else f'the plain stage name {prefix!r}'}")
    module = importlib.import_module(STAGES[stage][0])
    if not hasattr(module, "log_outputs"):
        raise StageError(f"stage module {module.__name__} has no log_outputs(ctx, args, replay): `agentr1 track` needs one")
    return stage, argparse.Namespace(**({arg: name} if arg else {}))


def _overlap(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` are the same or one lies inside the other (a stage that
    depends on ``data/eval`` reads the outputs ``data/eval/<policy>/...``)."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def lock_entries(lock_path: str | Path = "dvc.lock") -> list[Entry]:
    """Every stage entry of ``dvc.lock``, resolved (:func:`resolve`) and in dependency order (a
    stage after every stage whose outputs it depends on, else in the lock's order); a stage whose
    command is not ``agentr1 ...`` (a user's own) is ``skipped``: it has no agentr1 run to log.
    :class:`StageError` listing every unknown agentr1 entry, or when there is no ``dvc.lock``."""
    lock_path = Path(lock_path)
    if not lock_path.is_file():
        raise StageError(f"no {lock_path} here: run `agentr1 track` in the project root, after `dvc repro` (or `dvc pull`)")
    entries, problems = [], []
    for key, raw in provenance.lock_stages(lock_path).items():
        raw = raw or {}
        outs = {o["path"]: provenance.entry_hash(o) or "" for o in raw.get("outs") or [] if isinstance(o, dict) and "path" in o}
        deps = [d["path"] for d in raw.get("deps") or [] if isinstance(d, dict) and "path" in d]
        cmd = str(raw.get("cmd") or "")
        if cmd.split()[:1] != ["agentr1"]:
            entries.append(Entry(key, "", argparse.Namespace(), outs, deps, {}, state="skipped",
                                 note=f"not an agentr1 stage (cmd `{cmd[:80]}`): no run to log"))
            continue
        try:
            stage, args = resolve(key)
        except StageError as exc:
            problems.append(str(exc))
            continue
        entries.append(Entry(key, stage, args, outs, deps, dict(raw.get("params") or {})))
    if problems:
        raise StageError("; ".join(problems))
    after = {e.key: {o.key for o in entries if o is not e and any(_overlap(d, out) for d in e.deps for out in o.outs)}
             for e in entries}
    ordered: list[Entry] = []
    while len(ordered) < len(entries):
        done = {e.key for e in ordered}
        ready = [e for e in entries if e.key not in done and after[e.key] <= done]
        if not ready:
            raise StageError(f"{lock_path}: the stages {sorted(set(after) - done)} depend on each other's outputs in a cycle")
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
        return (isinstance(locked, dict) and isinstance(now, dict) and locked.keys() == now.keys()
                and all(same_value(locked[k], now[k]) for k in locked))
    if isinstance(locked, list) or isinstance(now, list):
        return isinstance(locked, list) and isinstance(now, list) and len(locked) == len(now) and all(map(same_value, locked, now))
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
        return (f"{', '.join(changed)} differ from what dvc.lock records: `dvc repro` (or `dvc checkout {entry.key}` "
                "to restore the locked outputs) first")
    for file, values in entry.params.items():
        current = read_params(root / file)
        for key, locked in (values or {}).items():
            now = _lookup(current, key)
            if now is _MISSING or not same_value(locked, now):
                shown = "missing" if now is _MISSING else repr(now)
                return (f"param {key} in {file} ({shown}) differs from the value dvc.lock records for this stage "
                        f"({locked!r}): `dvc repro` first, or restore {file}")
    return None


def plan(cfg: Config, lock_path: str | Path = "dvc.lock") -> tuple[list[Entry], Any]:
    """Every entry of ``dvc.lock`` with its ``state`` (class :class:`Entry`) and the MLflow client
    (``None`` while the store does not exist). Reads only: writes nothing to the store."""
    lock_path = Path(lock_path)
    root = lock_path.parent
    entries = lock_entries(lock_path)
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
        reason = stale_reason(e, root)
        e.state, e.note = ("stale", reason) if reason else ("log", "")
    return entries, client


def log_entry(cfg: Config, entry: Entry) -> str:
    """Log the run of ``entry`` from its outputs (module docstring); returns the run id."""
    module = importlib.import_module(STAGES[entry.stage][0])
    run_name, variant = module.names(cfg, entry.args) if hasattr(module, "names") else (entry.stage, None)
    if run_name != entry.key:
        raise StageError(f"dvc.lock stage {entry.key!r} resolves to the run name {run_name!r}: fix the lock of the "
                         f"SPEC of {module.__name__}")
    with open_stage(cfg, entry.stage, run_name=run_name, variant=variant, extra_tags={LOGGED_FROM_TAG: LOGGED_FROM}) as ctx:
        module.log_outputs(ctx, entry.args, replay=True)
    return str(ctx.run.run_id)


def track(cfg: Config, lock_path: str | Path = "dvc.lock", dry_run: bool = False) -> list[Entry]:
    """Make the store show every stage of ``lock_path`` (module docstring); with ``dry_run`` only
    the plan. :class:`StageError` before anything is written when an entry is unknown or stale."""
    entries, client = plan(cfg, lock_path)
    stale = [e for e in entries if e.state == "stale"]
    if stale:
        raise StageError("nothing logged: " + "; ".join(f"{e.key}: {e.note}" for e in stale))
    if dry_run or not any(e.state in ("log", "adopt") for e in entries):
        return entries
    connect(cfg)  # the profile's experiment, made when missing
    for e in entries:
        if e.state == "adopt":
            lockruns.adopt(client, str(e.run_id), e.outs)
            e.state = "adopted"
        elif e.state == "log":
            e.run_id = log_entry(cfg, e)
            e.state, e.note = "logged", f"run {e.run_id}"
        log.info("track: %-34s %s %s", e.key, e.state, e.note)
    return entries


def run_track(cfg: Config, args: argparse.Namespace) -> None:
    """CLI ``agentr1 track [--dry-run]``: one line per ``dvc.lock`` stage, then the counts and the
    registry's versions and aliases."""
    if not cfg.tracking.enabled:
        print("agentr1 track: tracking.enabled is false: nothing to log")
        return
    if getattr(args, "set", None):
        raise StageError("agentr1 track logs the params dvc.lock recorded: run it without --set")
    lock = Path("dvc.lock")
    files = {f for e in provenance.lock_stages(lock).values() for f in ((e or {}).get("params") or {})} if lock.is_file() else set()
    if files and Path(args.params).resolve() not in {Path(f).resolve() for f in files}:
        raise StageError(f"dvc.lock records params from {', '.join(sorted(files))}, not {args.params}: pass --params "
                         f"{sorted(files)[0]}")
    entries = track(cfg, lock, dry_run=args.dry_run)
    words = {"log": "would log", "adopt": "would adopt"} if args.dry_run else {}
    counts: dict[str, int] = {}
    for e in entries:
        state = words.get(e.state, e.state)
        counts[state] = counts.get(state, 0) + 1
        print(f"{e.key:<34} {state}{': ' + e.note if e.note else ''}")
    print(f"agentr1 track: {len(entries)} stages in dvc.lock: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    client, _ = lockruns.open_store(cfg, create=False)
    n, aliases = lockruns.registry_state(client, cfg.tracking.registered_model) if client is not None else (0, {})
    print(f"MLflow {redact_uri(resolve_tracking_uri(cfg))} experiment {experiment_name(cfg)}; registry "
          f"{cfg.tracking.registered_model}: {n} versions, aliases "
          + (", ".join(f"{a}=v{v}" for a, v in aliases.items()) or "none"))
