"""The parser: text to :mod:`tree <matcher.workflow.expr.tree>`, within the length and depth limits, cached.

Recursive descent for the statement structure, precedence climbing for binary arithmetic; the
grammar has only what the package docstring lists, so a tree can only compute a number.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from .errors import ExprError
from .tokens import Token, tokenize
from .tree import BinOp, BoolOp, Call, Compare, Conditional, DepRef, Name, Node, Not, Number, Unary, tree_depth, walk

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_TREE_DEPTH", "dep_refs", "names", "parse"]

MAX_LENGTH = 1000
MAX_DEPTH = 40
MAX_TREE_DEPTH = 120

_FUNCTIONS: dict[str, tuple[int, int | None]] = {  # name -> (min arity, max arity or None)
    "min": (1, None),
    "max": (1, None),
    "ceil": (1, 1),
    "floor": (1, 1),
    "round": (1, 2),
    "abs": (1, 1),
}
_KEYWORDS = frozenset({"if", "else", "and", "or", "not"})

_BINARY_PRECEDENCE: dict[str, int] = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2}
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})


class _Parser:
    """Recursive descent for the statement structure, precedence climbing for binary arithmetic."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.depth = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def error(self, message: str, token: Token | None = None, name: str | None = None) -> ExprError:
        return ExprError(message, expression=self.text, position=(token or self.token).pos, name=name)

    def is_op(self, *ops: str) -> bool:
        return self.token.kind == "op" and self.token.text in ops

    def is_word(self, word: str) -> bool:
        return self.token.kind == "name" and self.token.text == word

    def advance(self) -> Token:
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
            if self.is_op("-", "+"):  # "--1" is a typo more often than a double negation: refuse, not read as 1
                raise self.error(f"malformed sign: {start.text!r} followed by {self.token.text!r}")
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

    def call(self, name: Token) -> Node:
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


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Node:
    tree = _Parser(text).parse()
    # Evaluation recurses along the tree: a long flat chain ("1+1+1+...") is shallow to parse but deep to
    # walk, so the tree itself is bounded too.
    if tree_depth(tree) > MAX_TREE_DEPTH:
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


def names(text: str) -> set[str]:
    """Every name ``text`` reads: parameters as ``size``, dependency outputs as ``deps.<job>.<value>``.

    An expression that reads any ``deps.`` name must wait for its dependencies to finish.
    """
    found: set[str] = set()
    for node in walk(parse(text)):
        if isinstance(node, Name | DepRef):
            found.add(node.name)
    return found


def dep_refs(text: str) -> set[tuple[str, str]]:
    """The ``(job, value)`` pairs of the dependency outputs ``text`` reads."""
    return {(node.job, node.value) for node in walk(parse(text)) if isinstance(node, DepRef)}
