"""Sets of real numbers written as conditions: inequalities on one variable as intervals,
``x \\ne c`` as two rays, and an interval (or union) minus finitely many points
(``\\mathbb{R} \\setminus \\{0\\}``)."""

from __future__ import annotations

import dataclasses

import sympy

from agentic_jax.reward.lexer import ParseError
from agentic_jax.reward.values import Scalar, Seq, UnionOf, Value, scalar

FLIPPED = {"<": ">", ">": "<", "le": "ge", "ge": "le"}
_MAX_POINTS = 100


def lone_symbol(value: Value) -> bool:
    return isinstance(value, Scalar) and isinstance(value.node.expr, sympy.Symbol)


def constant(value: Value) -> bool:
    return isinstance(value, Scalar) and not value.node.expr.free_symbols


def _ray(bound: Value, op: str) -> Seq:
    """The solutions of "x op bound" for op in <, >, le, ge."""
    if op in ("<", "le"):
        return Seq((scalar(-sympy.oo), bound), "(", "]" if op == "le" else ")")
    return Seq((bound, scalar(sympy.oo)), "[" if op == "ge" else "(", ")")


def _absolute_bound(var: Value, bound: Value, op: str) -> Value | None:
    """ "|x| < c" -> (-c, c); "|x| >= c" -> (-oo, -c] U [c, oo), for a rational c > 0."""
    bound_expr = bound.node.expr
    if not (bound_expr.is_Rational and bound_expr > 0 and op in FLIPPED):
        return None
    negative = scalar(-bound_expr)
    if op in ("<", "le"):
        edge = "[" if op == "le" else "("
        return Seq((negative, bound), edge, "]" if op == "le" else ")")
    return UnionOf((_ray(negative, FLIPPED[op]), _ray(bound, op)))


def _absolute_of_symbol(value: Value) -> Scalar | None:
    if isinstance(value, Scalar) and isinstance(value.node.expr, sympy.Abs):
        inner = value.node.expr.args[0]
        if isinstance(inner, sympy.Symbol):
            return Scalar(dataclasses.replace(value.node, expr=inner))
    return None


def as_interval(operands: list[Value], ops: list[str]) -> Value | None:
    """ "x > 2" -> (2, oo); "1 < x <= 3" -> (1, 3]; "x != 0" -> (-oo, 0) U (0, oo);
    "|x| > 3" -> (-oo, -3) U (3, oo); None when the relation does not bound one variable (or
    its absolute value) by constants."""
    if len(ops) == 1:
        left, right = operands
        op = ops[0]
        if constant(left) and (lone_symbol(right) or _absolute_of_symbol(right)):
            left, right, op = right, left, FLIPPED.get(op, op)
        if _absolute_of_symbol(left) is not None and constant(right):
            return _absolute_bound(left, right, op)
        if not (lone_symbol(left) and constant(right)):
            return None
        if op == "ne":
            return UnionOf((_ray(right, "<"), _ray(right, ">")))
        return _ray(right, op) if op in FLIPPED else None
    if any(op not in FLIPPED for op in ops) or len(ops) != 2:
        return None
    low, var, high = operands
    if not (lone_symbol(var) and constant(low) and constant(high)):
        return None
    if ops[0] in (">", "ge") and ops[1] in (">", "ge"):
        low, high, ops = high, low, [FLIPPED[ops[1]], FLIPPED[ops[0]]]
    if ops[0] in ("<", "le") and ops[1] in ("<", "le"):
        return Seq((low, high), "[" if ops[0] == "le" else "(", "]" if ops[1] == "le" else ")")
    return None


def _endpoint(value: Value) -> sympy.Expr:
    """An interval end that can be ordered exactly: a rational or an infinity."""
    if not isinstance(value, Scalar) or value.node.deferred:
        raise ParseError("set difference needs plain numeric endpoints")
    expr = value.node.expr
    if not (expr.is_Rational or expr in (sympy.oo, -sympy.oo)):
        raise ParseError("set difference needs rational endpoints")
    return expr


def _intervals(value: Value) -> list[Seq]:
    parts = value.parts if isinstance(value, UnionOf) else (value,)
    intervals = []
    for part in parts:
        if not (isinstance(part, Seq) and part.open in "([" and part.close in ")]"
                and len(part.items) == 2):
            raise ParseError("set difference of something that is not an interval")
        intervals.append(part)
    return intervals


def _split(interval: Seq, points: list[sympy.Expr]) -> list[Seq]:
    """``interval`` with ``points`` removed, as open-ended pieces."""
    low, high = (_endpoint(item) for item in interval.items)
    pieces, start, start_open = [], interval.items[0], interval.open
    for point in points:
        outside = not low <= point <= high
        if outside or (point, interval.open) == (low, "(") or (point, interval.close) == (high, ")"):
            continue
        if point == high:
            return pieces + [Seq((start, interval.items[1]), start_open, ")")]
        if point != low:
            pieces.append(Seq((start, scalar(point)), start_open, ")"))
        start, start_open = scalar(point), "("
    return pieces + [Seq((start, interval.items[1]), start_open, interval.close)]


def minus_points(base: Value, removed: Value) -> Value:
    """``base`` (an interval or a union of intervals) without the points of the finite set
    ``removed`` (``\\{0\\}``, ``\\{-1, 1\\}``)."""
    if not (isinstance(removed, Seq) and removed.open == "{") or len(removed.items) > _MAX_POINTS:
        raise ParseError("\\setminus takes a finite set such as \\{0\\}")
    points = sorted({_endpoint(item) for item in removed.items})
    pieces = [piece for interval in _intervals(base) for piece in _split(interval, points)]
    return pieces[0] if len(pieces) == 1 else UnionOf(tuple(pieces))
