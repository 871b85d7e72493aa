"""Check the files ``agentr1 track`` replays into MLflow before anything is written to the store.

``agentr1 track`` rebuilds a stage's run from its outputs (``log_outputs(ctx, args, replay=True)``).
A hand-edited or damaged output must stop it before the first write, with the file, the key or
line and the fix, not half-way (a version registered, ``challenger`` moved, then a traceback) and
never silently (Python's ``json`` reads ``NaN`` and MLflow stores it as 0.0, which the gate would
compare). Checked, by file type, for every output of a ``dvc.lock`` entry (:func:`replayed_files`):

* ``*.json``: strict JSON (no ``NaN``/``Infinity``/``-Infinity`` literals, no number that
  overflows a float such as ``1e400``, no duplicate key, UTF-8), an object at the top, every
  number finite; the flat metrics ``<split>/<name>`` an evaluation writes (the keys MLflow gets)
  are numbers (``true`` is no number), the shares (:func:`agentr1.tracking.gate.is_proportion`:
  EM, F1, format, pass@k, ...) lie in [0, 1] and ``<k>_ci_lower <= <k> <= <k>_ci_upper``;
* ``*.jsonl``: every line such a JSON object (the evaluated episodes);
* ``*.csv``: every cell that reads as a number is finite; a curve (first column ``step``: the
  train ``curve.csv``, sft and pretrain ``loss.csv``/``gate.csv``, replayed as step metrics)
  has whole steps >= 0 and only numbers or empty cells, as many as its header.

A folder output is checked through its top-level ``*.json`` files (a processed dataset's
``manifest.json``, a checkpoint's configs); a ``timing.json`` beside a file output is checked too
(``train`` and ``index`` replay it though it is no DVC output).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentr1.tracking.gate import is_proportion

SUFFIXES = (".json", ".jsonl", ".csv")
SIDECARS = ("timing.json",)
MAX_PER_ENTRY = 3  # problems listed for one dvc.lock entry


class Bad(Exception):
    """A problem of one file, in words (the caller adds the file and the fix)."""


class _Literal:
    """A number JSON holds but a float cannot: ``NaN``, ``Infinity``, ``1e400``, a 400-digit integer."""

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> float | _Literal:
    value = float(text)
    return value if math.isfinite(value) else _Literal(text)


def _parse_int(text: str) -> int | _Literal:
    value = int(text)
    try:
        float(value)
    except OverflowError:
        return _Literal(text if len(text) <= 20 else text[:17] + "...")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise Bad(f"key {dup!r} appears twice")
    return out


def _first_literal(node: Any, path: str = "") -> tuple[str, str] | None:
    """``(key path, literal)`` of the first :class:`_Literal` in a parsed document, depth first."""
    stack = [(path, node)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, _Literal):
            return where or "the document", item.text
        if isinstance(item, dict):
            stack += [(f"{where}.{k}" if where else str(k), v) for k, v in reversed(list(item.items()))]
        elif isinstance(item, list):
            stack += [(f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item)))]
    return None


def parse_json(text: str, line: int | None = None) -> Any:
    """``text`` parsed as strict JSON (module docstring); :class:`Bad` naming the line (``line``
    for one line of a JSON Lines file), column or key path of the first problem."""
    at = f"line {line}" if line is not None else None
    literals = []

    def keep(value: Any) -> Any:
        if isinstance(value, _Literal):
            literals.append(value)
        return value

    try:
        doc = json.loads(
            text,
            parse_constant=lambda t: keep(_Literal(t)),
            parse_float=lambda t: keep(_parse_float(t)),
            parse_int=lambda t: keep(_parse_int(t)),
            object_pairs_hook=_no_duplicates,
        )
    except json.JSONDecodeError as exc:
        where = f"line {line if line is not None else exc.lineno} column {exc.colno}"
        raise Bad(f"{where}: broken JSON ({exc.msg})") from None
    except RecursionError:
        raise Bad(f"{at + ': ' if at else ''}JSON nested too deep to read") from None
    except ValueError as exc:  # an integer beyond Python's digit limit
        raise Bad(f"{at + ': ' if at else ''}{exc}") from None
    except Bad as exc:
        raise Bad(f"{at + ': ' if at else ''}{exc}") from None
    if literals:
        where, literal = _first_literal(doc) or ("?", literals[0].text)
        raise Bad(f"{at + ': ' if at else ''}{where} is {literal}, not a finite number")
    return doc


def check_flat_metrics(doc: dict[str, Any]) -> None:
    """The top-level ``<split>/<name>`` keys of ``doc`` (what an evaluation logs to MLflow and the
    gate reads): numbers, shares in [0, 1], each point estimate inside its CI."""
    flat = {k: v for k, v in doc.items() if "/" in k}  # what the evaluate stage logs (any key with a '/')
    for key, value in flat.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            shown = json.dumps(value)[:40]
            raise Bad(
                f"{key} is {shown} ({'a boolean' if isinstance(value, bool) else type(value).__name__}), not a number"
            )
        if is_proportion(key) and not 0 <= value <= 1:
            raise Bad(f"{key} is {value}, outside [0, 1] (a share of episodes)")
    for key in flat:
        if key.endswith(("_ci_lower", "_ci_upper")):
            continue
        lo, hi = f"{key}_ci_lower", f"{key}_ci_upper"
        present = [k for k in (lo, hi) if k in flat]
        if not present:
            continue
        if len(present) == 1:
            raise Bad(f"{present[0]} has no {hi if present[0] == lo else lo} beside it")
        if not flat[lo] <= flat[key] <= flat[hi]:
            raise Bad(f"{key} {flat[key]} is not inside its CI [{lo} {flat[lo]}, {hi} {flat[hi]}]")


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Bad(f"byte {exc.start} is not UTF-8") from None


def check_json(path: Path) -> None:
    doc = parse_json(_read_text(path))
    if not isinstance(doc, dict):
        raise Bad(f"the document is a JSON {type(doc).__name__}, not an object")
    check_flat_metrics(doc)


def check_jsonl(path: Path) -> None:
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        row = parse_json(line, line=number)
        if not isinstance(row, dict):
            raise Bad(f"line {number} is a JSON {type(row).__name__}, not an object")


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def check_csv(path: Path) -> None:
    text = _read_text(path)
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise Bad(f"not a CSV ({exc})") from None
    if not rows:
        return
    header, curve = rows[0], rows[0][:1] == ["step"]
    for number, row in enumerate(rows[1:], 2):
        if curve and len(row) != len(header):
            raise Bad(f"line {number} has {len(row)} cells, the header {len(header)}")
        for column, cell in zip(header, row):
            cell = cell.strip()
            value = _number(cell) if cell else None
            if cell and value is None and curve:
                raise Bad(f"line {number}: {column} is {cell[:40]!r}, not a number")
            if value is not None and not math.isfinite(value):
                raise Bad(f"line {number}: {column} is {cell[:40]}, not a finite number")
            if curve and column == "step" and (value is None or value < 0 or value != int(value)):
                raise Bad(f"line {number}: step is {cell[:40]!r}, not a whole number >= 0")


CHECKS = {".json": check_json, ".jsonl": check_jsonl, ".csv": check_csv}


def replayed_files(outs: Iterable[str], root: Path) -> list[Path]:
    """The files of the outputs ``outs`` (paths relative to ``root``) that are checked (module
    docstring), each once, in order."""
    files: list[Path] = []
    for out in outs:
        path = root / out
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        elif path.is_file():
            if path.suffix in SUFFIXES:
                files.append(path)
            files += [path.parent / name for name in SIDECARS if (path.parent / name).is_file()]
    return list(dict.fromkeys(files))


def check_file(path: Path) -> None:
    """:class:`Bad` describing the first problem of ``path`` (its suffix picks the rules)."""
    check = CHECKS.get(path.suffix)
    if check is not None:
        check(path)


def entry_problem(key: str, outs: Iterable[str], root: str | Path) -> str | None:
    """Why the outputs of ``dvc.lock`` entry ``key`` cannot be replayed into MLflow (each file,
    relative to ``root``, with its line or key and what is wrong; the fix: run the stage again),
    or ``None`` when every checked file is sound."""
    root = Path(root)
    problems = []
    for path in replayed_files(outs, root):
        try:
            check_file(path)
        except Bad as exc:
            problems.append(f"{path.relative_to(root) if path.is_relative_to(root) else path}: {exc}")
        except OSError as exc:
            problems.append(f"{path} cannot be read ({exc.strerror or exc})")
        if len(problems) >= MAX_PER_ENTRY:
            break
    if not problems:
        return None
    return f"{'; '.join(problems)}: not what the stage writes; `dvc repro -f {key}` writes its outputs again"
