"""The evaluator: one walk of a tree to a number, with units read by the kind of value computed.

Every intermediate value is checked against :data:`MAX_MAGNITUDE` and every exponent against
:data:`MAX_EXPONENT`, so no evaluation builds a huge number; the unit tables are those of
:mod:`taskqueues.units`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Literal, TypeAlias

from taskqueues.errors import shown
from taskqueues.units import DURATION_UNITS, SIZE_UNITS, to_mb

from .errors import ExprError
from .parser import parse
from .tokens import QUANTITY_RE, literal
from .tree import BinOp, BoolOp, Call, Compare, Conditional, DepRef, Name, Node, Not, Number, Unary

__all__ = ["MAX_EXPONENT", "MAX_MAGNITUDE", "Kind", "evaluate", "parse_quantity"]

Kind: TypeAlias = Literal["size", "duration"]
Scalar: TypeAlias = int | float | bool

MAX_MAGNITUDE = 10**18
MAX_EXPONENT = 64


def _to_number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _apply_unit(amount: Fraction, unit: str, kind: Kind, text: str, pos: int | None) -> int | float:
    if not unit:
        return _to_number(amount)
    if kind == "duration":
        factor: Fraction | int | None = DURATION_UNITS.get(unit)
        if factor is None:
            raise ExprError(f"size unit {unit!r} in a duration (use s, m, h, d or w)", expression=text, position=pos)
    else:
        size = SIZE_UNITS.get(unit)
        factor = None if size is None else to_mb(size)
        if factor is None:
            raise ExprError(
                f"duration unit {unit!r} in a size (use B, K, M, G, T, P or Ki..Pi)",
                expression=text,
                position=pos,
            )
    return _to_number(amount * factor)


def parse_quantity(text: str, kind: Kind = "size") -> int | float:
    """One number with an optional unit (``"300M"``, ``"-2"``, ``"1.5h"``), read by the rule of ``kind``.

    This is how a string parameter or a dependency output becomes a number inside an expression.
    """
    match = QUANTITY_RE.fullmatch(text) if len(text) <= 64 else None
    if match is None:
        raise ExprError("not a number with an optional unit", expression=text)
    sign, digits, suffix = match.groups()
    unit = suffix.lower()
    if unit and unit not in SIZE_UNITS and unit not in DURATION_UNITS:
        raise ExprError(f"unknown unit {suffix!r}", expression=text)
    value = _apply_unit(literal(digits, text, None), unit, kind, text, None)
    return -value if sign == "-" else value


class _Evaluator:
    def __init__(
        self,
        text: str,
        params: Mapping[str, object],
        deps: Mapping[str, Mapping[str, object]] | None,
        kind: Kind,
    ) -> None:
        self.text = text
        self.params = params
        self.deps = deps
        self.kind = kind

    def error(self, message: str, node: Node, name: str | None = None) -> ExprError:
        return ExprError(message, expression=self.text, position=node.pos, name=name)

    def check(self, value: Scalar, node: Node) -> Scalar:
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error("result is not a finite number", node)
        if abs(value) > MAX_MAGNITUDE:
            raise self.error(f"value out of range (limit ±{MAX_MAGNITUDE:.0e})", node)
        return value

    def external(self, value: object, node: Node, name: str, what: str) -> Scalar:
        if isinstance(value, bool | int | float):
            return self.check(value, node)
        if isinstance(value, str):
            try:
                return self.check(parse_quantity(value, self.kind), node)
            except ExprError as exc:
                raise self.error(
                    f"{what} {name!r} is not a number ({shown(value)}: {exc.reason})", node, name
                ) from None
        raise self.error(f"{what} {name!r} is not a number (it is a {type(value).__name__})", node, name)

    def run(self, node: Node) -> Scalar:
        if isinstance(node, Number):
            return self.check(_apply_unit(node.value, node.unit, self.kind, self.text, node.pos), node)
        if isinstance(node, Name):
            if node.name not in self.params:
                raise self.error(f"unknown name {node.name!r}", node, node.name)
            return self.external(self.params[node.name], node, node.name, "parameter")
        if isinstance(node, DepRef):
            return self.dep(node)
        if isinstance(node, Unary):
            operand = self.run(node.operand)
            return self.check(-operand if node.op == "-" else +operand, node)
        if isinstance(node, BinOp):
            return self.binary(node)
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, BoolOp):
            if node.op == "and":
                return all(self.run(operand) for operand in node.operands)
            return any(self.run(operand) for operand in node.operands)
        if isinstance(node, Not):
            return not self.run(node.operand)
        if isinstance(node, Conditional):
            return self.run(node.then) if self.run(node.condition) else self.run(node.otherwise)
        return self.call(node)

    def dep(self, node: DepRef) -> Scalar:
        if self.deps is None:
            raise self.error(f"{node.name} is only known once job {node.job!r} has finished", node, node.name)
        outputs = self.deps.get(node.job)
        if outputs is None:
            raise self.error(f"no outputs from dependency {node.job!r}", node, node.name)
        if node.value not in outputs:
            reported = ", ".join(sorted(outputs)) or "nothing"
            raise self.error(
                f"dependency {node.job!r} did not report {node.value!r} (it reported: {reported})",
                node,
                node.name,
            )
        return self.external(outputs[node.value], node, node.name, "dependency output")

    def binary(self, node: BinOp) -> Scalar:
        left = self.run(node.left)
        right = self.run(node.right)
        op = node.op
        if op == "+":
            return self.check(left + right, node)
        if op == "-":
            return self.check(left - right, node)
        if op == "*":
            return self.check(left * right, node)
        if op in ("/", "//", "%") and right == 0:
            raise self.error("division by zero", node)
        if op == "/":
            if isinstance(left, int) and isinstance(right, int):
                return self.check(_to_number(Fraction(left, right)), node)
            return self.check(left / right, node)
        if op == "//":
            return self.check(left // right, node)
        if op == "%":
            return self.check(left % right, node)
        return self.power(left, right, node)

    def power(self, base: Scalar, exponent: Scalar, node: BinOp) -> Scalar:
        if abs(exponent) > MAX_EXPONENT:
            raise self.error(f"exponent {exponent} too large (limit ±{MAX_EXPONENT})", node)
        if base == 0 and exponent < 0:
            raise self.error("division by zero (0 to a negative power)", node)
        if base < 0 and not float(exponent).is_integer():
            raise self.error("a negative number to a fractional power is not a real number", node)
        # Refuse before computing: 10**64 on an integer is cheap, but it must not be the first step of a
        # chain, and a float overflows with an exception ((1e-18)**-64), not an infinity; the magnitude
        # test is the same one every other operation passes.
        if base not in (0, 1, -1) and exponent * math.log10(abs(base)) > 18.5:
            raise self.error(f"value out of range (limit ±{MAX_MAGNITUDE:.0e})", node)
        result = base**exponent
        if isinstance(result, complex):  # pragma: no cover - excluded above, kept as a guard
            raise self.error("result is not a real number", node)
        return self.check(result, node)

    def compare(self, node: Compare) -> bool:
        left = self.run(node.first)
        for op, operand in node.rest:
            right = self.run(operand)
            ok = {
                "<": left < right,
                "<=": left <= right,
                ">": left > right,
                ">=": left >= right,
                "==": left == right,
                "!=": left != right,
            }[op]
            if not ok:
                return False
            left = right
        return True

    def call(self, node: Call) -> Scalar:
        args = [self.run(arg) for arg in node.args]
        name = node.function
        if name == "min":
            return min(args)
        if name == "max":
            return max(args)
        if name == "abs":
            return abs(args[0])
        if name == "ceil":
            return math.ceil(args[0])
        if name == "floor":
            return math.floor(args[0])
        if len(args) == 1:
            return round(args[0])
        digits = args[1]
        if isinstance(digits, float) and not digits.is_integer():
            raise self.error("round() digits must be a whole number", node, name)
        if abs(digits) > 30:
            raise self.error("round() digits out of range (limit ±30)", node, name)
        return self.check(round(args[0], int(digits)), node)


def evaluate(
    text: str,
    params: Mapping[str, object] | None = None,
    deps: Mapping[str, Mapping[str, object]] | None = None,
    *,
    kind: Kind = "size",
) -> int | float:
    """The value of ``text``: a number in MB (``kind="size"``) or seconds (``kind="duration"``).

    ``params`` binds bare names; ``deps`` maps a dependency's job name to the values it reported
    (None means "not known yet": any ``deps.`` name is then an error). A whole float is returned as
    an ``int`` so that ``"2 * 300M"`` gives ``600``. A truth value is refused as the final result.
    """
    tree = parse(text)
    result = _Evaluator(text, params or {}, deps, kind).run(tree)
    if isinstance(result, bool):
        raise ExprError("the expression gives a truth value, not a number", expression=text)
    if isinstance(result, float) and result.is_integer():
        return int(result)
    return result
