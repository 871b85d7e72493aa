"""Reading params: a YAML file (:func:`read_params`) plus ``--set`` overrides (:func:`parse_sets`,
:func:`apply_overrides`) -> a validated :class:`~agentr1.config.root.Config` (:func:`load_config`,
:func:`config_from_dict`), or a :class:`~agentr1.config.base.ConfigError` naming each bad key path
and what is allowed there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentr1 import yamlparams
from agentr1.config.base import ConfigError, _allowed, _clip_text, _clip_value
from agentr1.config.root import Config

DEFAULT_PARAMS = Path("params.yaml")

MAX_PARAMS_BYTES = 16 * 1024 * 1024  # a params/profile file is kilobytes; more is the wrong file (or /dev/zero)
MAX_ERROR_LINE = 500  # one bad key's line of a ConfigError; quoted values are clipped to 80 characters


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid params in {source}:"]
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "<root>"
        hint = _allowed(err)
        got = err.get("input")
        got_s = "" if isinstance(got, dict) else f" (got {_clip_value(got)})"
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
        lines.append(_clip_text(f"  - {path}: {msg}{got_s}" + (f"; {hint}" if hint else ""), MAX_ERROR_LINE))
    return "\n".join(lines)


def config_from_dict(raw: dict[str, Any] | None, source: str = "<dict>") -> Config:
    """Validate a plain mapping; raises :class:`ConfigError` naming each bad key path."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"invalid params in {source}: the top level must be a mapping")
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None


def read_params_text(path: str | Path, what: str = "params file") -> str:
    """The text of a params/profile file; :class:`ConfigError` naming the path and the fix when it
    is missing, a directory, not a regular file (a device such as ``/dev/zero``, a FIFO: never
    opened, which could block or never end), over :data:`MAX_PARAMS_BYTES` (read no further),
    unreadable or not UTF-8."""
    path = Path(path)
    if not path.exists():
        hint = " (run from the project root or pass --params)" if what == "params file" else ""
        raise ConfigError(f"{what} not found: {path}{hint}")
    if path.is_dir():
        raise ConfigError(
            f"{what} {path} is a directory: pass the YAML file itself (e.g. --params {path / 'params.yaml'})"
        )
    try:
        if not path.is_file():
            raise ConfigError(f"{what} {path} is not a regular file (a device, FIFO or socket): pass a YAML file")
        with path.open("rb") as fh:
            data = fh.read(MAX_PARAMS_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PARAMS_BYTES:
        raise ConfigError(
            f"{what} {path} is over {MAX_PARAMS_BYTES >> 20} MiB: a params file is a few kB of YAML; "
            "pass the right file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}): save it as "
            "UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None


def read_params(path: str | Path, what: str = "params file") -> dict[str, Any]:
    """A params/profile/dvc.yaml file read as a YAML mapping (empty file -> ``{}``); :class:`ConfigError`
    naming the path when it cannot be read (:func:`read_params_text`), is not valid YAML, or its top
    level is not a mapping."""
    try:
        data = yamlparams.load(read_params_text(path, what))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: the top level must be a mapping")
    return data


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``raw`` with each dotted-key override set in order (:func:`set_override`); returns ``raw``."""
    for dotted, value in (overrides or {}).items():
        set_override(raw, dotted, value)
    return raw


def set_override(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """``raw[a][b][c] = value`` for ``dotted = "a.b.c"`` (missing parents become mappings);
    :class:`ConfigError` naming the ``--set`` when a part is empty or a parent is not a mapping."""
    where = _clip_text(f"--set {_clip_text(dotted)}={_clip_text(_yaml_text(value))}", 200)
    parts = dotted.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"{where}: empty key in the dotted path {dotted!r} (write it as section.key=value)")
    node: Any = raw
    for i, key in enumerate(parts[:-1]):
        if node.get(key) is None:  # missing, or an empty YAML section (`train:`)
            node[key] = {}
        if not isinstance(node[key], dict):
            here = node[key]
            kind = "a list" if isinstance(here, list) else repr(here)
            raise ConfigError(
                f"{where}: {'.'.join(parts[: i + 1])} is {kind}, not a mapping, so it has no key "
                f"{parts[i + 1]!r}: set {'.'.join(parts[: i + 1])}=<value> itself, or fix the key path"
            )
        node = node[key]
    node[parts[-1]] = value


def _yaml_text(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def parse_set(text: str) -> tuple[str, Any]:
    """``"a.b=3"`` -> ``("a.b", 3)`` (the value read as YAML); :class:`ConfigError` when there is
    no ``=`` or the value is not valid YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects key.path=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key.strip(), yamlparams.load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(
            f"--set {_clip_text(text)}: the value is not valid YAML ({problem}); quote it "
            f"(--set '{_clip_text(key.strip())}=\"...\"') or fix it"
        ) from None


def parse_sets(texts: Iterable[str] | None) -> dict[str, Any]:
    """``["a.b=3", "c=x"]`` -> ``{"a.b": 3, "c": "x"}`` (each by :func:`parse_set`; a key given
    twice keeps its last value, as repeated ``--set`` options do)."""
    return dict(parse_set(text) for text in texts or ())


def load_config(path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None) -> Config:
    """Load and validate ``params.yaml`` (plus dotted-key ``overrides`` such as
    ``{"env.max_turns": 3}``)."""
    cfg = config_from_dict(apply_overrides(read_params(path), overrides), str(path))
    cfg._params_file = str(path)
    return cfg
