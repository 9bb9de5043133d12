"""The shapes a parsed answer can take: a scalar, a relation, a bracketed sequence (tuple, list,
set or interval), a union of intervals, a matrix, a yes/no, or plain text."""

from __future__ import annotations

import dataclasses

import sympy

from agentic_jax.reward.build import Node
from agentic_jax.reward.lexer import ParseError


@dataclasses.dataclass(frozen=True)
class Scalar:
    """One mathematical expression (number or symbolic)."""

    node: Node

    def candidates(self) -> tuple[sympy.Expr, ...]:
        """Readings of the value: a percentage also reads as its bare number, and an angle in
        degrees also as radians, so "50%" matches both 0.5 and 50."""
        expr = self.node.expr
        if self.node.mark == "%":
            return (expr, expr * 100)
        if self.node.mark == "°":
            return (expr, expr * sympy.pi / 180)
        return (expr,)


@dataclasses.dataclass(frozen=True)
class Relation:
    """``operands[0] ops[0] operands[1] ...`` with ops in "=", "<", ">", "le", "ge", "ne", "in"."""

    operands: tuple[Value, ...]
    ops: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Seq:
    """Comma-separated items with their brackets: "(" ")" tuple or open interval, "[" "]",
    "[" ")" half-open interval, "{" "}" set, "" "" a bare list such as "2, -3"."""

    items: tuple[Value, ...]
    open: str
    close: str


@dataclasses.dataclass(frozen=True)
class UnionOf:
    """A union of intervals or sets (``\\cup``)."""

    parts: tuple[Value, ...]


@dataclasses.dataclass(frozen=True)
class Matrix:
    """A rectangular matrix of values, row-major."""

    rows: tuple[tuple[Value, ...], ...]


@dataclasses.dataclass(frozen=True)
class Bool:
    """A yes/no (true/false) answer."""

    value: bool


@dataclasses.dataclass(frozen=True)
class Text:
    """An answer outside the math subset, compared as normalised text."""

    text: str


Value = Scalar | Relation | Seq | UnionOf | Matrix | Bool | Text


def scalar(expr: sympy.Expr) -> Scalar:
    """A Scalar for a trusted constant such as ``oo``."""
    return Scalar(Node(expr))


def as_node(value: Node | Value) -> Node:
    """The scalar node of ``value``; structural values (tuples, sets) cannot enter arithmetic."""
    if isinstance(value, Node):
        return value
    if isinstance(value, Scalar):
        return value.node
    raise ParseError(f"{type(value).__name__} used inside an arithmetic expression")


def as_value(value: Node | Value) -> Value:
    """Wraps a bare node as a Scalar; structural values pass through."""
    return Scalar(value) if isinstance(value, Node) else value
