"""Safe arithmetic: the calculator tool's grammar, limits and result text, for every layer.

:class:`Arithmetic` parses and evaluates an expression; :class:`agentr1.env.calculator.CalculatorTool`
runs it for the agent, and :mod:`agentr1.data.validation` checks with the same evaluator that a
calculator question's ``expression`` gives its answer (so the two can never disagree). It lives
in ``data``, below ``env``, for that reason.

Grammar: numbers written with the digits 0-9 (``12``, ``3.5``, ``1e6``, ``1_000``), the binary
operators ``+ - * / // % **``, unary ``+``/``-`` and parentheses; spaces anywhere. Nothing else:
no names, calls, attributes, comparisons, strings, ``^`` or ``x``. The expression is parsed with
:func:`ast.parse` (``mode="eval"``: one expression, never a statement) and evaluated by
`simpleeval <https://pypi.org/project/simpleeval/>`_ restricted to those node types and
operators; no ``eval``/``exec``, no name or function is ever looked up.

Limits (:class:`CalculatorToolConfig`; each breach is a clear message, never an
exception or a slow call): at most ``max_chars`` characters; an exponent ``b`` of ``a ** b`` with
``|b| <= max_exponent``; every number, literal, intermediate or final, with ``|x| <=
max_magnitude`` (a power whose result would exceed it is refused before it is computed, from
``|b| * log10|a|``); results must be finite and real. An expression outside the grammar or over
``max_chars`` is refused by :meth:`Arithmetic.parse`; a well-formed one whose arithmetic fails
(division by zero, a limit, a complex result) raises :class:`CalculationError`.

Result text (:func:`format_number`), so answers can be copied from it: an integer value is
written exactly (``42``, ``-7``); a float that is a whole number with ``|x| < 2**53`` is written
as that integer (``6 / 3`` -> ``2``); any other float with ``significant_digits`` significant
digits in Python's ``g`` format (``10 / 4`` -> ``2.5``, ``1 / 3`` -> ``0.3333333333``, which may
use exponent notation: ``1e-07``).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import simpleeval
from pydantic import Field

from agentr1.config.base import _Section

_ALLOWED_CHARS = re.compile(r"[0-9.eE_+\-*/%() \t\n]*")
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant)
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_EXACT_FLOAT_INT = 2**53


class CalculatorToolConfig(_Section):
    """``env.calculator``: limits of the calculator tool (``agentr1.env.calculator``, which declares
    this model as its options), and of every evaluation with :class:`Arithmetic`.

    ``max_chars``: longest expression; ``max_exponent``: largest ``|b|`` in ``a ** b``;
    ``max_magnitude``: largest ``|value|`` of any number, intermediate or final (a bigger one is a
    failed call, never a slow one); ``significant_digits``: digits of a non-integral result."""

    max_chars: int = Field(200, ge=1, le=4096)
    max_exponent: int = Field(64, ge=1, le=4096)
    max_magnitude: float = Field(1e15, gt=0, le=1e300)
    significant_digits: int = Field(10, ge=1, le=17)


class CalculationError(ValueError):
    """A well-formed expression whose arithmetic cannot be done (a failed call)."""


def format_number(value: int | float, significant_digits: int = 10) -> str:
    """The result text (module docstring): exact integers, else ``significant_digits`` digits."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < _EXACT_FLOAT_INT:
        return str(int(value))
    return format(value, f".{significant_digits}g")


def _char_problem(expression: str) -> str | None:
    """Why ``expression`` holds a character outside the grammar (None = all allowed)."""
    bad = _ALLOWED_CHARS.fullmatch(expression)
    if bad is not None:
        return None
    c = expression[_ALLOWED_CHARS.match(expression).end()]  # type: ignore[union-attr]  # matches ""
    where = f"{c!r} (U+{ord(c):04X})"
    if c.isdigit() or c.isnumeric():
        return f"{where} is not a digit the calculator reads: write numbers with the digits 0-9"
    hints = {
        "x": "use * to multiply",
        "×": "use * to multiply",
        "÷": "use / to divide",
        "^": "use ** for powers",
        ",": "write numbers without thousands separators (1000, not 1,000)",
        "=": "write only the expression, without '='",
    }
    if c in hints:
        return f"{where} is not allowed: {hints[c]}"
    if c.isalpha() or c == "_":
        return f"{where} is not allowed: names, functions and units are not supported, only numbers"
    return f"{where} is not allowed: only numbers, + - * / // % ** and parentheses"


class Arithmetic:
    """Parse and evaluate arithmetic under ``limits`` (module docstring; default: the
    calculator's default limits)."""

    def __init__(self, limits: CalculatorToolConfig | None = None) -> None:
        limits = limits or CalculatorToolConfig()
        self.max_chars, self.max_exponent, self.max_magnitude = (
            limits.max_chars,
            limits.max_exponent,
            limits.max_magnitude,
        )

    def parse(self, expression: Any) -> ast.expr | str:
        """The expression's syntax tree, or why it is not a calculator expression."""
        if not isinstance(expression, str):
            return f"the expression must be a string, got {type(expression).__name__}"
        if not expression.strip():
            return "empty expression: write the arithmetic to evaluate, e.g. 2 * (3 + 4)"
        if len(expression) > self.max_chars:
            return f"expression too long: {len(expression)} characters (limit {self.max_chars})"
        problem = _char_problem(expression)
        if problem is not None:
            return problem
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxError as exc:
            return f"not a valid arithmetic expression ({exc.msg})"
        except (ValueError, RecursionError, MemoryError) as exc:  # e.g. "too many nested parentheses"
            return f"not a valid arithmetic expression ({type(exc).__name__}: {exc})"
        for node in ast.walk(tree):
            if isinstance(node, (ast.operator, ast.unaryop)):
                if type(node) not in _BINARY and type(node) not in _UNARY:
                    return f"the operator {type(node).__name__} is not supported: use + - * / // % **"
            elif not isinstance(node, _NODES):
                return f"{type(node).__name__} is not supported: only numbers, + - * / // % ** and parentheses"
            elif isinstance(node, ast.Constant) and (type(node.value) not in (int, float)):
                return f"{type(node.value).__name__} values are not supported: only real numbers"
        return tree.body

    # ------------------------------------------------------------------ arithmetic (success)
    def _check(self, value: Any) -> int | float:
        if isinstance(value, complex):
            raise CalculationError("the result is not a real number (e.g. a fractional power of a negative number)")
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculationError("the result is not a finite number")
        if abs(value) > self.max_magnitude:
            raise CalculationError(f"a number exceeds the calculator's limit of {self.max_magnitude:g} in magnitude")
        return value

    def _power(self, a: int | float, b: int | float) -> int | float:
        if abs(b) > self.max_exponent:
            raise CalculationError(f"exponent too large: {format_number(b)} (limit {self.max_exponent})")
        if abs(a) > 1 and b > 0 and b * math.log10(abs(a)) > math.log10(self.max_magnitude) + 1:
            raise CalculationError(f"a number exceeds the calculator's limit of {self.max_magnitude:g} in magnitude")
        return a**b

    def _checked(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *xs: self._check(fn(*xs))

    def _evaluator(self) -> simpleeval.SimpleEval:
        """simpleeval with only our node types and limit-checked operators (built once)."""
        ev = getattr(self, "_ev", None)
        if ev is None:
            ops: dict[type, Callable[..., Any]] = {**_BINARY, **_UNARY, ast.Pow: self._power}
            ev = simpleeval.SimpleEval(operators={k: self._checked(f) for k, f in ops.items()}, functions={}, names={})
            constant = ev.nodes[ast.Constant]
            ev.nodes = {
                ast.BinOp: ev.nodes[ast.BinOp],
                ast.UnaryOp: ev.nodes[ast.UnaryOp],
                ast.Constant: lambda node: self._check(constant(node)),
            }
            self._ev = ev
        return ev

    def evaluate(self, expression: Any) -> int | float:
        """The value of ``expression``; ``ValueError`` with a readable message otherwise (a
        :class:`CalculationError` when well-formed arithmetic fails). Evaluates nothing but
        arithmetic."""
        tree = self.parse(expression)
        if isinstance(tree, str):
            raise ValueError(tree)
        try:
            return self._evaluator().eval(expression, previously_parsed=tree)
        except CalculationError:
            raise
        except ZeroDivisionError:
            raise CalculationError("division by zero") from None
        except (OverflowError, simpleeval.NumberTooHigh):
            raise CalculationError(
                f"a number exceeds the calculator's limit of {self.max_magnitude:g} in magnitude"
            ) from None
        except (
            ArithmeticError,
            ValueError,
            TypeError,
            RecursionError,
            MemoryError,
            simpleeval.InvalidExpression,
        ) as exc:
            raise CalculationError(f"cannot evaluate ({type(exc).__name__}: {exc})") from None
