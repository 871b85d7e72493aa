"""A profile as a pipeline of its own, beside the default's: ``pipelines/<name>/`` (``agentr1 pipeline NAME``).

``make profile PROFILE=smol`` writes a profile over ``params.yaml``, and ``dvc repro`` then writes its
results over the default's (the nano lock, ``data/``, ``reports/``). A profile whose results are
committed next to the default's (issue 49: ``smol``) is a second DVC pipeline instead, generated
from the one source of each part:

* ``pipelines/<name>/params.yaml``: the profile merged onto ``params.yaml`` (:func:`load_profile`),
  every folder a stage writes (each ``*_dir`` key: ``data.processed_dir``, ``sft.out_dir``,
  ``model.cache_dir``, ``report.out_dir``, ...) moved by :func:`relocate`;
* ``pipelines/<name>/dvc.yaml``: the root ``dvc.yaml`` with every stage run from the project root
  (``wdir: ../..``, so sources and ``data/raw`` are the same files), its command given the
  pipeline's params file (``agentr1 --params pipelines/<name>/params.yaml <stage>``), its params
  read from that file and every output path moved by the same :func:`relocate`. For a downloaded
  model (``model.kind`` hf/gguf) ``pretrain`` writes a reference to the converted copy under
  ``model.cache_dir``, which git does not hold: its output is cached by DVC (not committed), so a
  fresh clone re-runs the conversion instead of finding a reference to nothing.

:func:`relocate`: ``data/<rest>`` -> ``data/<name>/<rest>``, ``reports/<rest>`` -> ``reports/<name>/<rest>``;
``data/raw`` (the inputs) and every other path (sources) stay. So the pipeline's results are
``reports/<name>/`` and ``pipelines/<name>/dvc.lock`` beside ``reports/`` and ``dvc.lock``:
``dvc repro`` (the root ``dvc.yaml`` only) never runs it, ``dvc repro pipelines/<name>/dvc.yaml``
runs it alone, and ``agentr1 --params pipelines/<name>/params.yaml track`` logs it (its lock is the
one beside its params file: :attr:`agentr1.config.Config.lock_path`).

Both files are generated, never edited: ``tests/test_pipelines.py`` fails when a committed copy is
not what ``agentr1 pipeline NAME`` writes from the current ``dvc.yaml``, ``params.yaml``
and profile.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from agentr1.config import read_params
from agentr1.profiles import Profile, load_profile

PIPELINE_DIR = "pipelines"
OUTPUT_TOPS = ("data", "reports")  # top folders a pipeline writes under
SHARED_INPUTS = ("data/raw",)  # read by every pipeline as they are (the real-data files)
ROOT_FROM_PIPELINE = "../.."  # pipelines/<name>/ -> the project root (the stages' wdir)
PATH_FIELDS = ("outs", "metrics", "plots")


def relocate(path: str, name: str) -> str:
    """``path`` as pipeline ``name`` writes it (module docstring): ``data/x`` -> ``data/<name>/x``,
    ``reports`` -> ``reports/<name>``; ``data/raw`` and paths outside ``data``/``reports`` unchanged."""
    top, _, rest = path.partition("/")
    if top not in OUTPUT_TOPS or any(path == s or path.startswith(s + "/") for s in SHARED_INPUTS):
        return path
    return f"{top}/{name}" + (f"/{rest}" if rest else "")


def relocated_params(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """The merged params ``raw`` with every ``*_dir`` string value :func:`relocate`-d."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: relocate(v, name) if isinstance(v, str) and str(k).endswith("_dir") else walk(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(raw)


def _moved_entries(entries: list[Any], name: str) -> list[Any]:
    """``outs``/``metrics``/``plots``/``deps`` items (a path, or ``{path: options}``) relocated."""
    moved = []
    for item in entries:
        if isinstance(item, str):
            moved.append(relocate(item, name))
        else:
            moved.append({relocate(path, name): opts for path, opts in item.items()})
    return moved


def _stage(body: dict[str, Any], name: str, params_file: str) -> dict[str, Any]:
    """One stage body (a plain stage, a ``matrix`` stage or a ``foreach``'s ``do``) as pipeline ``name`` runs it."""
    body = copy.deepcopy(body)
    cmd = body["cmd"]
    if not cmd.startswith("agentr1 "):
        raise ValueError(f"stage command {cmd!r} is not `agentr1 ...`: the pipeline cannot give it its params file")
    out = {k: v for k, v in body.items() if k not in ("cmd", "deps", "params", *PATH_FIELDS)}
    out["cmd"] = cmd.replace("agentr1 ", f"agentr1 --params {params_file} ", 1)
    out["wdir"] = ROOT_FROM_PIPELINE
    if "deps" in body:
        out["deps"] = _moved_entries(body["deps"], name)
    if "params" in body:
        out["params"] = [{params_file: list(body["params"])}]
    for field in PATH_FIELDS:
        if field in body:
            out[field] = _moved_entries(body[field], name)
    return out


def _cached(item: Any) -> Any:
    """An ``outs`` item with its ``cache: false`` dropped (DVC caches it)."""
    if not isinstance(item, dict):
        return item
    ((path, opts),) = item.items()
    opts = {k: v for k, v in (opts or {}).items() if k != "cache"}
    return {path: opts} if opts else path


def pipeline_dvc(dvc: dict[str, Any], name: str, downloaded: bool) -> dict[str, Any]:
    """The root ``dvc.yaml`` mapping ``dvc`` as pipeline ``name`` (module docstring); ``downloaded``:
    the profile's model is downloaded, so ``pretrain``'s model reference is cached, not committed."""
    params_file = f"{PIPELINE_DIR}/{name}/params.yaml"
    stages: dict[str, Any] = {}
    for stage, spec in dvc["stages"].items():
        if "foreach" in spec:
            items = spec["foreach"]
            if isinstance(items, dict):
                items = {k: relocate(v, name) if isinstance(v, str) else v for k, v in items.items()}
            stages[stage] = {"foreach": items, "do": _stage(spec["do"], name, params_file)}
        else:
            stages[stage] = _stage(spec, name, params_file)
    if downloaded and "pretrain" in stages:
        stages["pretrain"]["outs"] = [_cached(item) for item in stages["pretrain"]["outs"]]
    out: dict[str, Any] = {"stages": stages}
    if "plots" in dvc:
        out["plots"] = [
            {
                pid: {
                    **spec,
                    "y": {relocate(path, name): col for path, col in spec["y"].items()},
                }
            }
            for plot in dvc["plots"]
            for pid, spec in plot.items()
        ]
    return out


def _header(p: Profile, what: str) -> str:
    return (
        f"# generated by `agentr1 pipeline {p.name}`: {what}. Do not edit: change\n"
        f"# dvc.yaml, params.yaml or {p.label} and regenerate (tests/test_pipelines.py checks the copy).\n"
        f"# Run: make run-{p.name} (dvc repro {PIPELINE_DIR}/{p.name}/dvc.yaml, then agentr1 track).\n"
    )


def pipeline_files(p: Profile, dvc_path: str | Path = "dvc.yaml") -> dict[str, str]:
    """``{relative path: text}`` of ``pipelines/<name>/params.yaml`` and ``dvc.yaml`` for profile ``p``."""
    name = p.cfg.profile
    dvc = read_params(dvc_path, "dvc.yaml")  # strict and bounded, as `agentr1 profile --dry-run` reads it
    params = relocated_params(p.raw, name)
    graph = pipeline_dvc(dvc, name, downloaded=p.cfg.model.kind != "scratch")
    base = f"{PIPELINE_DIR}/{name}"
    dump = lambda obj: yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=120)  # noqa: E731
    return {
        f"{base}/params.yaml": _header(
            p, f"{p.label} merged onto {p.params_path}, outputs under data/{name}/ and reports/{name}/"
        )
        + dump(params),
        f"{base}/dvc.yaml": _header(p, f"{dvc_path} with the stages run from the project root on {base}/params.yaml")
        + dump(graph),
    }


def stale_files(p: Profile, root: str | Path = ".") -> list[str]:
    """The files of :func:`pipeline_files` missing under ``root`` or holding other text."""
    files = pipeline_files(p, Path(root) / "dvc.yaml")
    return [
        rel
        for rel, text in files.items()
        if not (Path(root) / rel).is_file() or (Path(root) / rel).read_text(encoding="utf-8") != text
    ]


def write_pipeline(p: Profile, root: str | Path = ".") -> list[Path]:
    """Write :func:`pipeline_files` under ``root`` (each atomically); returns the paths written."""
    from agentr1.io import write_text_atomic

    written = []
    for rel, text in pipeline_files(p, Path(root) / "dvc.yaml").items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
        written.append(path)
    return written


def run_pipeline(cfg: Any, args: Any) -> None:
    """CLI ``agentr1 pipeline NAME [--check]`` (module docstring): profile ``NAME`` merged onto the
    ``--params`` file (the nano ``params.yaml``), written as ``pipelines/NAME/``; ``--check`` writes
    nothing and fails (:class:`StageError`) naming the stale files."""
    from agentr1.errors import StageError

    p = load_profile(args.name, getattr(args, "params", "params.yaml"))
    if args.check:
        stale = stale_files(p)
        if stale:
            raise StageError(f"{', '.join(stale)} not what `agentr1 pipeline {args.name}` writes: run it and commit")
        print(f"pipeline {p.name}: {PIPELINE_DIR}/{p.name}/ is up to date")
        return
    for out in write_pipeline(p):
        print(f"pipeline {p.name}: wrote {out}")
