"""The syntax tree of an expression: immutable nodes, each with the column it starts at, and walks over it."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

__all__ = [
    "BinOp",
    "BoolOp",
    "Call",
    "Compare",
    "Conditional",
    "DepRef",
    "Name",
    "Node",
    "Not",
    "Number",
    "Unary",
    "children",
    "tree_depth",
    "walk",
]


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


def children(node: Node) -> tuple[Node, ...]:
    """The nodes right below ``node``."""
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


def tree_depth(root: Node) -> int:
    """How many levels the tree below ``root`` has (without recursion: the tree may be deep)."""
    deepest = 0
    stack: list[tuple[Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children(node))
    return deepest


def walk(node: Node) -> list[Node]:
    """Every node of the tree below ``node``, ``node`` included."""
    found: list[Node] = []
    stack: list[Node] = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children(current))
    return found
