"""Strict YAML for params, profile and ``--set`` values: what a file says is what the config gets.

PyYAML's ``safe_load`` reads YAML 1.1, where ``yes``/``on`` are true, ``1:30`` is 90 (base 60),
``0x10`` is 16 and ``010`` is 8; a key written twice silently keeps the last value; an alias
expands without limit (a 14 kB "billion laughs" file becomes gigabytes once validated); and a
5,000-digit integer fails inside ``int()`` with a bare ``ValueError``. :func:`load` uses PyYAML's
own loader hooks (a resolver, ``construct_mapping``, ``compose_node``) to read instead:

- scalars as the YAML 1.2 core schema writes them: an integer is ``[-+]?(0|[1-9][0-9]*)``; a
  float is decimal with a ``.`` or an exponent (``1e-4``, ``0.5``) or ``.inf``/``.nan``; a boolean
  is ``true``/``false`` (``True``, ``TRUE``...); ``null``/``~``/nothing is null. Anything else
  (``yes``, ``on``, ``0x10``, ``0o17``, ``1:30``, ``010``, ``1_000``) stays a string, which the
  typed config then refuses for a number or boolean field (:mod:`agentr1.config`);
- a key given twice in one mapping, at any depth: an error naming both lines;
- aliases: at most :data:`MAX_ALIAS_NODES` nodes in total reached through aliases, counting what
  each alias expands to; a recursive alias (``&a [*a]``) is refused;
- integers of more than :data:`MAX_INT_DIGITS` digits: an error, not Python's digit limit.

Every refusal is a :class:`yaml.YAMLError` (a ``MarkedYAMLError`` with the line), so callers
that already turn YAML errors into a ``ConfigError`` need nothing more. Merge keys (``<<``) are
not YAML 1.2 and are read as the plain key ``<<`` (the config then names it as unknown).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

MAX_ALIAS_NODES = 1000  # nodes reached through aliases, in total, per document
MAX_INT_DIGITS = 100  # far above any count, size or seed a params file holds


class StrictYAMLError(yaml.MarkedYAMLError):
    """A params document that parses but means something the file does not say plainly."""


class _CoreResolver(BaseResolver):
    """YAML 1.2 core-schema scalars (module docstring); everything else is a string."""


for _tag, _pattern, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^[-+]?(?:0|[1-9][0-9]*)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
):
    _CoreResolver.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_pattern), list(_first))


class _StrictConstructor(SafeConstructor):
    """SafeConstructor that refuses duplicate keys and over-long integers."""

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    line = first_line.get(key)
                    first_line.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:  # an unhashable key: SafeConstructor names it below
                    continue
                if line is not None:
                    raise ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"duplicate key {_clip(repr(key))} at line {key_node.start_mark.line + 1} (first at line "
                        f"{line}): a later key would silently replace the first; keep one",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Node) -> int:
        text = str(node.value).lstrip("+-")
        if len(text) > MAX_INT_DIGITS:
            raise ConstructorError(
                None, None, f"an integer of {len(text)} digits; at most {MAX_INT_DIGITS}", node.start_mark
            )
        return int(str(node.value))


_StrictConstructor.add_constructor("tag:yaml.org,2002:int", _StrictConstructor.construct_yaml_int)


class _BoundedComposer(Composer):
    """Composer that counts the nodes each alias stands for (:data:`MAX_ALIAS_NODES`)."""

    def compose_document(self) -> Node:
        self._alias_nodes, self._sizes, self._open_anchors = 0, {}, set()
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if event.anchor in self._open_anchors:
                raise StrictYAMLError(
                    None,
                    None,
                    f"alias *{_clip(str(event.anchor))} inside its own anchor (a recursive structure)",
                    event.start_mark,
                )
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._alias_nodes += self._expanded(node)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise StrictYAMLError(
                        None,
                        None,
                        f"aliases expand to more than {MAX_ALIAS_NODES} nodes: write "
                        "the values out instead of nesting aliases",
                        event.start_mark,
                    )
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.discard(anchor)

    def _expanded(self, node: Node) -> int:
        """Nodes ``node`` stands for with every alias inside it expanded (memoized: linear time)."""
        size = self._sizes.get(id(node))
        if size is None:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            size = self._sizes[id(node)] = 1 + sum(self._expanded(child) for child in children)
        return size


class StrictLoader(Reader, Scanner, Parser, _BoundedComposer, _StrictConstructor, _CoreResolver):
    """The loader of :func:`load` (module docstring)."""

    def __init__(self, stream: Any) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        _CoreResolver.__init__(self)


def load(text: str) -> Any:
    """One YAML document read strictly (module docstring); :class:`yaml.YAMLError` when refused."""
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
