"""The calculator tool: an arithmetic expression in, its value out.

Call: tag format ``<calculate>2 * (3 + 4)</calculate>``; Hermes
``{"name": "calculator", "arguments": {"expression": "2 * (3 + 4)"}}``. Options: ``env.calculator``
(:class:`~agentr1.data.arithmetic.CalculatorToolConfig`, with the grammar it limits).

Grammar, limits and result text: :mod:`agentr1.data.arithmetic` (the one evaluator, also used by
the dataset checks).

Outcomes (process rewards ``invalid_call`` / ``failed_call`` / ``successful_calculator``):
an expression outside the grammar or over ``max_chars`` fails :meth:`CalculatorTool.validate`
(an *invalid* call, the model's format error); a well-formed expression whose arithmetic fails
(division by zero, a limit, a complex result) is a *failed* call; anything else succeeds.

Result: :func:`~agentr1.data.arithmetic.format_number` of the value;
``ToolResult.metadata = {"value": <int|float>, "expression": e}``.
"""

from __future__ import annotations

import ast
from typing import Any

from agentr1.data.arithmetic import Arithmetic, CalculatorToolConfig, format_number
from agentr1.env.base import ToolResult
from agentr1.env.tools import Tool


class CalculatorTool(Tool):
    """Evaluate an arithmetic expression (module docstring for the grammar, limits and result)."""

    name = "calculator"
    tag = "calculate"
    purpose = "calculating with the calculator"
    example = {"expression": "2 * (3 + 4)"}
    action = "calculate"
    options = CalculatorToolConfig

    def __init__(
        self, max_chars: int = 200, max_exponent: int = 64, max_magnitude: float = 1e15, significant_digits: int = 10
    ) -> None:
        limits = CalculatorToolConfig(
            max_chars=max_chars,
            max_exponent=max_exponent,
            max_magnitude=max_magnitude,
            significant_digits=significant_digits,
        )
        self.max_chars, self.max_exponent = limits.max_chars, limits.max_exponent
        self.max_magnitude, self.significant_digits = limits.max_magnitude, limits.significant_digits
        self.arithmetic = Arithmetic(limits)
        self.description = (
            "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses (no names or units). "
            f"Returns the value: an exact integer when it is whole, else {self.significant_digits} significant digits."
        )
        self.parameters = {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The arithmetic expression, e.g. 12 * (3 + 4) / 2.",
                    "maxLength": self.max_chars,
                    "pattern": r"\S",
                },
            },
            "required": ["expression"],
            "additionalProperties": False,
        }

    # ------------------------------------------------------------------ grammar (validity)
    def _parse(self, args: Any) -> ast.expr | str:
        """The expression's syntax tree, or why it is not a calculator call."""
        if not isinstance(args, dict) or "expression" not in args:
            return "the calculator needs an 'expression' argument (a string such as 2 * (3 + 4))"
        return self.arithmetic.parse(args["expression"])

    def validate(self, args: Any) -> list[str]:
        """The schema checks of :meth:`Tool.validate`, then the grammar (module docstring)."""
        problems = super().validate(args)
        if problems:
            return problems
        parsed = self._parse(args)
        return [parsed] if isinstance(parsed, str) else []

    # ------------------------------------------------------------------ arithmetic (success)
    def evaluate(self, expression: str) -> int | float:
        """:meth:`agentr1.data.arithmetic.Arithmetic.evaluate` under this tool's limits."""
        return self.arithmetic.evaluate(expression)

    def _value(self, args: Any) -> int | float:
        if not isinstance(args, dict) or "expression" not in args:
            raise ValueError(self._parse(args))
        return self.arithmetic.evaluate(args["expression"])

    def execute(self, args: dict[str, Any]) -> ToolResult:
        try:
            value = self._value(args)
        except ValueError as exc:
            return ToolResult(f"calculator failed: {exc}", False, {})
        return ToolResult(
            format_number(value, self.significant_digits),
            True,
            {"value": value, "expression": args["expression"].strip()},
        )
