"""A small, safe arithmetic language for requirement values and ``{name}`` templates for commands.

Workflows compute requirements from their parameters ("memory = 2x the input size", as Seven Bridges
puts it) and from what their dependencies reported (``2 * deps.p1.out_mb``). That text comes from users,
so it is never given to Python's ``eval``, ``exec`` or ``compile``, nor to ``ast``: we tokenize and parse
it ourselves, with a grammar that has no strings, no attribute or index access, no assignment, no
lambdas and no comprehensions, and that calls only the six functions below. There is nothing in the
language that can reach an object, so there is nothing to escape from; the remaining risks are cost
and size, which are bounded (input length, nesting depth, magnitude of every intermediate value,
exponent size).

Language
    ============================  ===========================================================
    numbers                       ``3``, ``2.5``, ``1e3``, ``.5``
    units (no blank before)       see *Units* below: ``512M``, ``4G``, ``1.5G``, ``30s``, ``2h``
    arithmetic                    ``+ - * / // % **``, unary ``-``/``+``, parentheses
    comparisons                   ``< <= > >= == !=`` (chained as in Python: ``0 < x < 8``)
    logic                         ``and``, ``or``, ``not`` (give truth values)
    conditional                   ``a if c else b``
    functions                     ``min(a, b, ...)``, ``max(a, b, ...)``, ``ceil(x)``, ``floor(x)``,
                                  ``round(x[, digits])``, ``abs(x)``
    parameters                    a bare name: ``size``, ``n`` (the job's parameters)
    dependency outputs            ``deps.<job>.<value>``: the value the job named ``<job>`` reported
    ============================  ===========================================================

We chose the explicit ``deps.`` prefix (not ``<job>.<value>``) so that a parameter can never be
mistaken for a dependency, and so that :func:`names` tells at a glance whether an expression must wait
for its dependencies (then it is evaluated when the job is released, not at submission). A job name in
``deps.<job>.<value>`` is letters, digits, ``_`` and ``-``; a value name is an identifier.

A parameter or a dependency output may be a number, or a string holding one quantity (``"300M"``), which
is read with the same unit rule as a literal. Anything else (``"a.fits"``) is an error when used.
A truth value is accepted where a number is expected (``True`` is 1) except as the final result.

Units
    The suffix is read by the *kind* of value being computed, one clear rule in two lines:

    * ``kind="duration"`` (``wall``, ``ete``, names ending in ``time``): ``s m h d w`` are seconds,
      minutes, hours, days, weeks, and the result is in seconds. A size suffix there is an error.
    * ``kind="size"`` (everything else): ``B K M G T P`` (optional trailing ``B``: ``4GB``) are bytes and
      decimal kilo- to peta-bytes, ``Ki Mi Gi Ti Pi`` binary, and the result is in MB (1G = 1000 MB,
      as Machine/Job Features counts). A duration suffix there is an error.

    Suffixes are case-insensitive, so ``m`` is minutes in a duration and megabytes elsewhere, the same
    reading as :mod:`taskqueues.units`. A bare number has no unit: MB in a size, seconds in a duration.

Limits
    At most :data:`MAX_LENGTH` characters, :data:`MAX_DEPTH` levels of nesting (parentheses, calls,
    unary operators, exponents, ``else`` branches), a tree at most :data:`MAX_TREE_DEPTH` deep, every
    intermediate value within ``±`` :data:`MAX_MAGNITUDE`, exponents within ``±`` :data:`MAX_EXPONENT`.
    Evaluation is a single walk of a tree no larger than the text, so its cost is bounded by the length
    limit, and its recursion by the depth limits.

Templates
    :func:`render` fills ``{name}`` placeholders with parameters (``{{`` and ``}}`` are literal braces).
    A placeholder is a bare name or the dependency form ``{deps.<job>.<value>}``; ``{a.b}``, ``{a[0]}``,
    ``{}`` and ``{0}`` are refused. A format spec is allowed (``{i:03d}``) with width and precision up to
    :data:`MAX_FORMAT_WIDTH`; the conversions are ``!s``, ``!r`` and ``!q`` (``shlex.quote``, for values
    placed in a shell command). A template renders to at most :data:`MAX_RENDERED` characters (1 MiB, more
    than any value a job may hold), so a short template over a long parameter cannot fill the memory.

Every error is an :class:`ExprError`, a :class:`~taskqueues.errors.ValidationError` that carries the
expression, the column (0-based) and the offending name when there is one.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from string import Formatter
from typing import Literal, TypeAlias

from taskqueues.errors import ValidationError, shown

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_FORMAT_WIDTH",
    "MAX_LENGTH",
    "MAX_MAGNITUDE",
    "MAX_RENDERED",
    "MAX_TREE_DEPTH",
    "BinOp",
    "BoolOp",
    "Call",
    "Compare",
    "Conditional",
    "DepRef",
    "ExprError",
    "Kind",
    "Name",
    "Node",
    "Not",
    "Number",
    "Unary",
    "dep_refs",
    "evaluate",
    "names",
    "parse",
    "parse_quantity",
    "render",
    "template_dep_refs",
    "template_names",
]

Kind: TypeAlias = Literal["size", "duration"]
Scalar: TypeAlias = int | float | bool
Number_: TypeAlias = int | float

MAX_LENGTH = 1000
MAX_DEPTH = 40
MAX_TREE_DEPTH = 120
MAX_MAGNITUDE = 10**18
MAX_EXPONENT = 64
MAX_FORMAT_WIDTH = 100
MAX_RENDERED = 1024 * 1024

_SIZE_UNITS: dict[str, Fraction] = {}
for _prefix, _bytes in (("", 1), ("k", 10**3), ("m", 10**6), ("g", 10**9), ("t", 10**12), ("p", 10**15)):
    for _suffix in {"b"} if not _prefix else {_prefix, _prefix + "b"}:
        _SIZE_UNITS[_suffix] = Fraction(_bytes, 10**6)
for _prefix, _power in (("k", 10), ("m", 20), ("g", 30), ("t", 40), ("p", 50)):
    _SIZE_UNITS[_prefix + "i"] = _SIZE_UNITS[_prefix + "ib"] = Fraction(2**_power, 10**6)
_DURATION_UNITS: dict[str, int] = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

_FUNCTIONS: dict[str, tuple[int, int | None]] = {  # name -> (min arity, max arity or None)
    "min": (1, None),
    "max": (1, None),
    "ceil": (1, 1),
    "floor": (1, 1),
    "round": (1, 2),
    "abs": (1, 1),
}
_KEYWORDS = frozenset({"if", "else", "and", "or", "not"})
# Words that are tempting but not part of the language: named in the error so the user sees why.
_FORBIDDEN_WORDS = frozenset({"lambda", "for", "in", "is", "import", "yield", "await", "def", "class"})


class ExprError(ValidationError):
    """An expression or a template is wrong or cannot be evaluated.

    ``expression`` is the text, ``position`` the 0-based column of the culprit (None when it is the
    whole text), ``name`` the parameter, dependency output or function concerned (None when none is).
    """

    def __init__(
        self,
        message: str,
        *,
        expression: str,
        position: int | None = None,
        name: str | None = None,
        job: str | None = None,
        field: str | None = None,
    ) -> None:
        shown = expression if len(expression) <= 80 else expression[:77] + "..."
        where = f" at column {position}" if position is not None else ""
        super().__init__(f"{message} in {shown!r}{where}", job=job, field=field)
        self.reason = message
        self.expression = expression
        self.position = position
        self.name = name

    def located(self, *, job: str | None, field: str | None) -> ExprError:
        """The same error, told where it happened (which job, which requirement)."""
        return ExprError(
            self.reason,
            expression=self.expression,
            position=self.position,
            name=self.name,
            job=job,
            field=field,
        )


# --------------------------------------------------------------------------------------------- tree


@dataclass(frozen=True)
class Number:
    value: Fraction
    unit: str  # "" or the lower-cased suffix
    pos: int


@dataclass(frozen=True)
class Name:
    name: str
    pos: int


@dataclass(frozen=True)
class DepRef:
    job: str
    value: str
    pos: int

    @property
    def name(self) -> str:
        return f"deps.{self.job}.{self.value}"


@dataclass(frozen=True)
class Unary:
    op: str
    operand: Node
    pos: int


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True)
class Compare:
    first: Node
    rest: tuple[tuple[str, Node], ...]
    pos: int


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    operands: tuple[Node, ...]
    pos: int


@dataclass(frozen=True)
class Not:
    operand: Node
    pos: int


@dataclass(frozen=True)
class Conditional:
    then: Node
    condition: Node
    otherwise: Node
    pos: int


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Node, ...]
    pos: int


Node: TypeAlias = Number | Name | DepRef | Unary | BinOp | Compare | BoolOp | Not | Conditional | Call


# ---------------------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class _Token:
    kind: str  # "num" | "name" | "dep" | "op" | "end"
    text: str
    pos: int
    number: Fraction | None = None
    unit: str = ""
    job: str = ""
    value: str = ""


_NUMBER_RE = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SUFFIX_RE = re.compile(r"[A-Za-z]+")
_QUANTITY_RE = re.compile(rf"\s*([-+]?)\s*({_NUMBER_RE.pattern})\s*([A-Za-z]*)\s*")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEP_RE = re.compile(r"deps\.([A-Za-z0-9_][A-Za-z0-9_-]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_OPERATORS = ("**", "//", "<=", ">=", "==", "!=", "+", "-", "*", "/", "%", "<", ">", "(", ")", ",")


def _literal(digits: str, text: str, pos: int | None) -> Fraction:
    """The exact value of a numeric literal, refusing sizes that would be costly to build (``1e999999``)."""
    mantissa, _, exponent = digits.lower().partition("e")
    if len(mantissa) > 40 or (exponent and abs(int(exponent)) > 30):
        raise ExprError("number too long or exponent too large", expression=text, position=pos)
    return Fraction(digits)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, end = 0, len(text)
    while pos < end:
        char = text[pos]
        if char in " \t\r\n":
            pos += 1
            continue
        number = _NUMBER_RE.match(text, pos)
        if number is not None:
            suffix = _SUFFIX_RE.match(text, number.end())
            unit = suffix.group().lower() if suffix else ""
            if unit and unit not in _SIZE_UNITS and unit not in _DURATION_UNITS:
                raise ExprError(
                    f"unknown unit {unit!r} (sizes: K M G T P, Ki..Pi; durations: s m h d w)",
                    expression=text,
                    position=number.end(),
                )
            value = _literal(number.group(), text, pos)
            stop = suffix.end() if suffix else number.end()
            tokens.append(_Token("num", text[pos:stop], pos, number=value, unit=unit))
            pos = stop
            continue
        if text.startswith("deps.", pos):
            dep = _DEP_RE.match(text, pos)
            if dep is None or (dep.end() < end and (text[dep.end()] == "." or text[dep.end()] == "[")):
                raise ExprError(
                    "a dependency output is written deps.<job>.<value>", expression=text, position=pos
                )
            tokens.append(_Token("dep", dep.group(), pos, job=dep.group(1), value=dep.group(2)))
            pos = dep.end()
            continue
        ident = _IDENT_RE.match(text, pos)
        if ident is not None:
            word = ident.group()
            if word in _FORBIDDEN_WORDS:
                raise ExprError(
                    f"{word!r} is not part of the language", expression=text, position=pos, name=word
                )
            after = ident.end()
            if after < end and text[after] in ".[":
                raise ExprError(
                    f"attribute and index access are not allowed (after {word!r})",
                    expression=text,
                    position=after,
                    name=word,
                )
            tokens.append(_Token("name", word, pos))
            pos = after
            continue
        for op in _OPERATORS:
            if text.startswith(op, pos):
                tokens.append(_Token("op", op, pos))
                pos += len(op)
                break
        else:
            what = "string literals are not allowed" if char in "'\"" else f"unexpected character {char!r}"
            raise ExprError(what, expression=text, position=pos)
    tokens.append(_Token("end", "", end))
    return tokens


# ------------------------------------------------------------------------------------------- parser

_BINARY_PRECEDENCE: dict[str, int] = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2}
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})


class _Parser:
    """Recursive descent for the statement structure, precedence climbing for binary arithmetic."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.depth = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def error(self, message: str, token: _Token | None = None, name: str | None = None) -> ExprError:
        return ExprError(message, expression=self.text, position=(token or self.token).pos, name=name)

    def is_op(self, *ops: str) -> bool:
        return self.token.kind == "op" and self.token.text in ops

    def is_word(self, word: str) -> bool:
        return self.token.kind == "name" and self.token.text == word

    def advance(self) -> _Token:
        token = self.token
        self.index += 1
        return token

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.error(f"expected {op!r}, found {self._describe()}")
        self.advance()

    def _describe(self) -> str:
        return "the end" if self.token.kind == "end" else repr(self.token.text)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"expression nested deeper than {MAX_DEPTH} levels")

    def parse(self) -> Node:
        if self.token.kind == "end":
            raise self.error("empty expression")
        node = self.conditional()
        if self.token.kind != "end":
            raise self.error(f"unexpected {self._describe()}")
        return node

    def conditional(self) -> Node:
        then = self.disjunction()
        if self.is_word("if"):
            start = self.advance()
            condition = self.disjunction()
            if not self.is_word("else"):
                raise self.error("'if' without 'else'", start)
            self.advance()
            self.enter()
            otherwise = self.conditional()
            self.depth -= 1
            then = Conditional(then, condition, otherwise, start.pos)
        return then

    def disjunction(self) -> Node:
        return self._bool_chain("or", self.conjunction)

    def conjunction(self) -> Node:
        return self._bool_chain("and", self.negation)

    def _bool_chain(self, word: str, operand: Callable[[], Node]) -> Node:
        first = operand()
        operands = [first]
        pos = self.token.pos
        while self.is_word(word):
            self.advance()
            operands.append(operand())
        return first if len(operands) == 1 else BoolOp(word, tuple(operands), pos)

    def negation(self) -> Node:
        if self.is_word("not"):
            start = self.advance()
            self.enter()
            node = Not(self.negation(), start.pos)
            self.depth -= 1
            return node
        return self.comparison()

    def comparison(self) -> Node:
        first = self.arithmetic(1)
        rest: list[tuple[str, Node]] = []
        pos = self.token.pos
        while self.token.kind == "op" and self.token.text in _COMPARISONS:
            op = self.advance().text
            rest.append((op, self.arithmetic(1)))
        return first if not rest else Compare(first, tuple(rest), pos)

    def arithmetic(self, min_precedence: int) -> Node:
        left = self.unary()
        while self.token.kind == "op" and _BINARY_PRECEDENCE.get(self.token.text, 0) >= min_precedence:
            op_token = self.advance()
            right = self.arithmetic(_BINARY_PRECEDENCE[op_token.text] + 1)
            left = BinOp(op_token.text, left, right, op_token.pos)
        return left

    def unary(self) -> Node:
        if self.is_op("-", "+"):
            start = self.advance()
            self.enter()
            node = Unary(start.text, self.unary(), start.pos)
            self.depth -= 1
            return node
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.is_op("**"):
            op = self.advance()
            # Right-associative and binds tighter than a unary minus on its left, as in Python.
            self.enter()
            exponent = self.unary()
            self.depth -= 1
            return BinOp("**", base, exponent, op.pos)
        return base

    def atom(self) -> Node:
        token = self.token
        if token.kind == "num":
            self.advance()
            assert token.number is not None
            return Number(token.number, token.unit, token.pos)
        if token.kind == "dep":
            self.advance()
            return DepRef(token.job, token.value, token.pos)
        if token.kind == "name":
            if token.text in _KEYWORDS:
                raise self.error(f"unexpected {token.text!r}")
            self.advance()
            if self.is_op("("):
                return self.call(token)
            return Name(token.text, token.pos)
        if self.is_op("("):
            self.advance()
            self.enter()
            node = self.conditional()
            self.depth -= 1
            self.expect_op(")")
            return node
        raise self.error(f"expected a number, a name or '(', found {self._describe()}")

    def call(self, name: _Token) -> Node:
        arity = _FUNCTIONS.get(name.text)
        if arity is None:
            known = ", ".join(sorted(_FUNCTIONS))
            raise self.error(f"unknown function {name.text!r} (known: {known})", name, name.text)
        self.advance()  # "("
        self.enter()
        args: list[Node] = []
        if not self.is_op(")"):
            args.append(self.conditional())
            while self.is_op(","):
                self.advance()
                args.append(self.conditional())
        self.expect_op(")")
        self.depth -= 1
        low, high = arity
        if len(args) < low or (high is not None and len(args) > high):
            wanted = f"{low}" if low == high else f"{low} or more" if high is None else f"{low} to {high}"
            raise self.error(f"{name.text}() takes {wanted} argument(s), got {len(args)}", name, name.text)
        return Call(name.text, tuple(args), name.pos)


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Unary | Not):
        return (node.operand,)
    if isinstance(node, BinOp):
        return (node.left, node.right)
    if isinstance(node, Compare):
        return (node.first, *(operand for _, operand in node.rest))
    if isinstance(node, BoolOp):
        return node.operands
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Conditional):
        return (node.then, node.condition, node.otherwise)
    return ()


def _tree_depth(root: Node) -> int:
    deepest = 0
    stack: list[tuple[Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in _children(node))
    return deepest


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Node:
    tree = _Parser(text).parse()
    # Evaluation recurses along the tree: a long flat chain ("1+1+1+...") is shallow to parse but deep to
    # walk, so the tree itself is bounded too.
    if _tree_depth(tree) > MAX_TREE_DEPTH:
        raise ExprError(f"expression too complex (more than {MAX_TREE_DEPTH} levels)", expression=text)
    return tree


def parse(text: str) -> Node:
    """The syntax tree of ``text``; raises :class:`ExprError` on a syntax error or a limit.

    Trees are immutable and cached: a workflow that repeats one expression over many jobs parses it once.
    """
    if not isinstance(text, str):
        raise ExprError(f"an expression must be a string, not {type(text).__name__}", expression=repr(text))
    if len(text) > MAX_LENGTH:
        raise ExprError(
            f"expression too long ({len(text)} characters, limit {MAX_LENGTH})",
            expression=text,
            position=None,
        )
    return _parse_cached(text)


def _walk(node: Node) -> list[Node]:
    found: list[Node] = []
    stack: list[Node] = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(_children(current))
    return found


def names(text: str) -> set[str]:
    """Every name ``text`` reads: parameters as ``size``, dependency outputs as ``deps.<job>.<value>``.

    An expression that reads any ``deps.`` name must wait for its dependencies to finish.
    """
    found: set[str] = set()
    for node in _walk(parse(text)):
        if isinstance(node, Name | DepRef):
            found.add(node.name)
    return found


def dep_refs(text: str) -> set[tuple[str, str]]:
    """The ``(job, value)`` pairs of the dependency outputs ``text`` reads."""
    return {(node.job, node.value) for node in _walk(parse(text)) if isinstance(node, DepRef)}


# --------------------------------------------------------------------------------------- evaluation


def _to_number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _apply_unit(amount: Fraction, unit: str, kind: Kind, text: str, pos: int | None) -> int | float:
    if not unit:
        return _to_number(amount)
    if kind == "duration":
        factor: Fraction | int | None = _DURATION_UNITS.get(unit)
        if factor is None:
            raise ExprError(
                f"size unit {unit!r} in a duration (use s, m, h, d or w)", expression=text, position=pos
            )
    else:
        factor = _SIZE_UNITS.get(unit)
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
    match = _QUANTITY_RE.fullmatch(text) if len(text) <= 64 else None
    if match is None:
        raise ExprError("not a number with an optional unit", expression=text)
    sign, digits, suffix = match.groups()
    unit = suffix.lower()
    if unit and unit not in _SIZE_UNITS and unit not in _DURATION_UNITS:
        raise ExprError(f"unknown unit {suffix!r}", expression=text)
    value = _apply_unit(_literal(digits, text, None), unit, kind, text, None)
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


# ---------------------------------------------------------------------------------------- templates

_PLACEHOLDER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FORMAT_SPEC_RE = re.compile(
    r"(?:.?[<>=^])?[+\- ]?z?#?0?(?P<width>\d*)[_,]?(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?", re.DOTALL
)
_CONVERSIONS: dict[str, Callable[[object], str]] = {
    "s": str,
    "r": repr,
    "q": lambda value: shlex.quote(str(value)),
}


@dataclass(frozen=True)
class _Field:
    literal: str
    name: str | None
    spec: str
    conversion: str | None
    dep: tuple[str, str] | None


@lru_cache(maxsize=4096)
def _template_fields(template: str) -> tuple[_Field, ...]:
    if len(template) > 10 * MAX_LENGTH:
        raise ExprError(f"template too long ({len(template)} characters)", expression=template)
    try:
        pieces = list(Formatter().parse(template))
    except ValueError as exc:
        raise ExprError(
            f"bad braces ({exc}); write {{{{ and }}}} for literal braces", expression=template
        ) from None
    fields: list[_Field] = []
    for literal, name, spec, conversion in pieces:
        if name is None:
            fields.append(_Field(literal, None, "", None, None))
            continue
        dep_match = _DEP_RE.fullmatch(name)
        if name == "" or name.isdigit():
            raise ExprError(
                "positional placeholders ({} or {0}) are not allowed; name them", expression=template
            )
        if dep_match is None and not _PLACEHOLDER_RE.fullmatch(name):
            raise ExprError(
                f"placeholder {{{name}}}: attribute and index access are not allowed",
                expression=template,
                name=name,
            )
        spec = spec or ""
        if "{" in spec or "}" in spec:
            raise ExprError(
                f"placeholder {{{name}}}: nested placeholders are not allowed", expression=template
            )
        spec_match = _FORMAT_SPEC_RE.fullmatch(spec)
        if spec_match is None:
            raise ExprError(
                f"placeholder {{{name}}}: bad format spec {shown(spec)}", expression=template, name=name
            )
        for part in ("width", "precision"):
            digits = spec_match.group(part)
            if digits and int(digits) > MAX_FORMAT_WIDTH:
                raise ExprError(
                    f"placeholder {{{name}}}: {part} {digits} over the limit of {MAX_FORMAT_WIDTH}",
                    expression=template,
                    name=name,
                )
        if conversion is not None and conversion not in _CONVERSIONS:
            raise ExprError(
                f"placeholder {{{name}}}: unknown conversion !{conversion} (use !s, !r or !q)",
                expression=template,
                name=name,
            )
        dep = (dep_match.group(1), dep_match.group(2)) if dep_match else None
        fields.append(_Field(literal, name, spec, conversion, dep))
    return tuple(fields)


def template_names(template: str) -> set[str]:
    """Every placeholder ``template`` uses (``deps.<job>.<value>`` for dependency outputs)."""
    return {field.name for field in _template_fields(template) if field.name is not None}


def template_dep_refs(template: str) -> set[tuple[str, str]]:
    """The ``(job, value)`` pairs of the dependency outputs ``template`` uses."""
    return {field.dep for field in _template_fields(template) if field.dep is not None}


def render(
    template: str,
    params: Mapping[str, object],
    deps: Mapping[str, Mapping[str, object]] | None = None,
) -> str:
    """``template`` with its placeholders filled from ``params`` (and ``deps`` for ``{deps.<job>.<value>}``).

    Values must be strings, numbers or booleans. Nothing is looked up but the exact names, so a
    template cannot reach an attribute, an item or any object behind a value.
    """
    out: list[str] = []
    size = 0
    for field in _template_fields(template):
        out.append(field.literal)
        size += len(field.literal)
        if size > MAX_RENDERED:
            raise ExprError(f"renders to more than {MAX_RENDERED} characters", expression=template)
        if field.name is None:
            continue
        value: object
        if field.dep is not None:
            job, key = field.dep
            if deps is None:
                raise ExprError(
                    f"{{{field.name}}} is only known once job {job!r} has finished",
                    expression=template,
                    name=field.name,
                )
            outputs = deps.get(job, {})
            if key not in outputs:
                raise ExprError(
                    f"dependency {job!r} did not report {key!r}", expression=template, name=field.name
                )
            value = outputs[key]
        else:
            if field.name not in params:
                raise ExprError(f"unknown placeholder {{{field.name}}}", expression=template, name=field.name)
            value = params[field.name]
        if not isinstance(value, str | int | float | bool):
            raise ExprError(
                f"placeholder {{{field.name}}} holds a {type(value).__name__}; only strings and numbers fit",
                expression=template,
                name=field.name,
            )
        if field.conversion is not None:
            value = _CONVERSIONS[field.conversion](value)
        try:
            out.append(format(value, field.spec))
        except (ValueError, OverflowError) as exc:  # OverflowError: "{n:c}" of a number past U+10FFFF
            raise ExprError(
                f"placeholder {{{field.name}}}: {exc}", expression=template, name=field.name
            ) from None
        size += len(out[-1])
    if size > MAX_RENDERED:
        raise ExprError(f"renders to more than {MAX_RENDERED} characters", expression=template)
    return "".join(out)
