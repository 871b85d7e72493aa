"""Bounded JSON request bodies: refused before Python builds their objects, and quoted only in part.

``json.loads`` of a 16 MiB body of ``[],[],...`` builds millions of lists (+427 MB of memory for
one request). :func:`decode_json` first measures the body's structure on the bytes: string
literals are blanked with one regular-expression pass (C speed, no Python objects), then the
brackets and commas are counted. A body with more than ``max_values`` JSON values or nested
deeper than ``max_depth`` is refused (:class:`BodyError`) before it is decoded; one within the
bounds costs a few times its size at most.

Also here: strict JSON (``NaN``/``Infinity`` are not JSON; an integer longer than Python converts
is kept as :class:`HugeInt`, refused later like any out-of-range value) and short descriptions of
client values for error messages (:func:`describe`, :func:`clip`).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

CLIP_CHARS = 80  # client input quoted in an error message or a log line is cut to this
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string literal (escapes included)
_BRACKET = re.compile(rb"[\[\]{}]")


class BodyError(ValueError):
    """A body that is not usable JSON within the bounds: ``status`` 400 (not JSON) or 413 (too big)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class HugeInt:
    """A JSON integer longer than Python converts (``sys.get_int_max_str_digits()``, 4300 digits):
    kept as its length, so validation refuses it like any out-of-range value."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"a {self.digits}-digit integer"


def describe(value: Any) -> str:
    """A short description of a JSON value for an error message: never the whole value."""
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, str):
        return repr(value[:CLIP_CHARS]) + (f"... ({len(value)} chars)" if len(value) > CLIP_CHARS else "")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {round(value.bit_length() * math.log10(2))} digits"
    return clip(repr(value))


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float, HugeInt)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def json_shape(raw: bytes) -> tuple[int, int]:
    """(an upper bound on the number of JSON values, the deepest nesting) of ``raw``, measured
    without decoding it: string literals are blanked, then every comma and container counts one
    value (plus the first). The depth is only scanned when the count is small enough to matter
    (the caller bounds it first), so the cost is a few C passes over the bytes."""
    bare = _STRING.sub(b'""', raw)
    values = 1 + bare.count(b",") + bare.count(b"[") + bare.count(b"{")
    return values, _depth(bare) if values <= 1 << 16 else 0


def _depth(bare: bytes) -> int:
    depth = deepest = 0
    for m in _BRACKET.finditer(bare):
        depth += 1 if m.group(0) in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _not_json(name: str) -> Any:
    raise BodyError(400, f"the body is not valid JSON: {name} is not a JSON number")


def _json_int(text: str) -> int | HugeInt:
    limit = sys.get_int_max_str_digits()
    return HugeInt(text) if limit and len(text.lstrip("-")) > limit else int(text)


def decode_json(raw: bytes, max_values: int, max_depth: int) -> Any:
    """Strict JSON from a UTF-8 body (RFC 8259) holding at most ``max_values`` values nested at
    most ``max_depth`` deep; :class:`BodyError` (413 over a bound, 400 not JSON) otherwise."""
    values, depth = json_shape(raw)
    if values > max_values:
        raise BodyError(
            413,
            f"the body holds about {values} JSON values; at most {max_values} (one per query, "
            "retrieval.server.max_queries, and a few more): send fewer queries per request",
        )
    if depth > max_depth:
        raise BodyError(
            400, f"the body is not usable JSON: arrays or objects nested {depth} deep (at most {max_depth})"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(400, f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        try:
            return json.loads(text, parse_constant=_not_json)
        except ValueError as exc:  # an integer over Python's digit limit: rare, so only then the slower hook
            if type(exc) is not ValueError or "integer string conversion" not in str(exc):
                raise
            return json.loads(text, parse_constant=_not_json, parse_int=_json_int)
    except RecursionError:
        raise BodyError(400, "the body is not usable JSON: arrays or objects nested too deep") from None
    except json.JSONDecodeError as exc:
        raise BodyError(400, f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
