"""Mathematical equivalence of two parsed answers.

Exact values compare exactly (``2^{-99}`` and ``2^{-98}`` are different rationals); a decimal on
either side allows a relative error of 1e-6 and nothing more (0.333 is not 1/3, 0.05 is not 5);
other expressions are compared numerically at a 192-bit precision, at several seeded points when
they have variables. Deferred (too large to evaluate) expressions match only structurally.
"""

from __future__ import annotations

import time

import sympy

from agentic_jax.reward import numeric
from agentic_jax.reward.values import Bool, Matrix, Relation, Scalar, Seq, Text, UnionOf, Value

DECIMAL_REL_TOL = 1e-6
EXACT_REL_TOL = 1e-30
EXACT_ABS_TOL = 1e-40
NUM_POINTS = 5
MIN_POINTS = 3
INTEGRATION_CONSTANT = sympy.Symbol("C")


def equivalent(a: Value, b: Value, deadline: float) -> bool:
    """Whether ``a`` and ``b`` denote the same mathematical object."""
    if time.monotonic() > deadline:
        return False
    a, b = canonical(a), canonical(b)
    if isinstance(a, Relation) and isinstance(b, Relation):
        return _relations_equal(a, b, deadline)
    if isinstance(a, Relation) or isinstance(b, Relation):
        a, b = stated_value(a), stated_value(b)
        return a is not None and b is not None and equivalent(a, b, deadline)
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        return scalars_equal(a, b, deadline)
    if isinstance(a, (Seq, UnionOf, Matrix)) and isinstance(b, (Seq, UnionOf, Matrix)):
        return _collections_equal(a, b, deadline)
    return type(a) is type(b) and isinstance(a, (Bool, Text)) and a == b


def canonical(value: Value) -> Value:
    """Reads "x = 2, x = -3" as the list 2, -3; "x = 1, y = 2" as the tuple (1, 2) ordered by
    variable name; a one-element set or list ({5}, [5]) as 5; a union of one part as that part."""
    if isinstance(value, UnionOf) and len(value.parts) == 1:
        return canonical(value.parts[0])
    if not isinstance(value, Seq):
        return value
    if value.open in ("{", "[") and value.close in ("}", "]") and len(value.items) == 1:
        return canonical(value.items[0])
    if value.open != "" or not all(_assignment(i) for i in value.items):
        return value
    names = [_assignment(i) for i in value.items]
    values = tuple(stated_value(i) for i in value.items)
    if len(set(names)) == len(names):
        ordered = sorted(zip(names, values), key=lambda pair: pair[0])
        return Seq(tuple(v for _, v in ordered), "(", ")")
    return Seq(values, "", "")


def _assignment(value: Value) -> str | None:
    """The variable name of "x = <value>", else None."""
    if isinstance(value, Relation) and value.ops == ("=",):
        lhs = value.operands[0]
        if isinstance(lhs, Scalar) and isinstance(lhs.node.expr, sympy.Symbol):
            return lhs.node.expr.name
    return None


def stated_value(value: Value) -> Value | None:
    """The answer an equation states: the side that is not a lone variable ("x = 3" -> 3,
    "f(x) = x^2" -> x^2); the set of "x \\in S"; None for inequalities and chains."""
    if not isinstance(value, Relation):
        return value
    if value.ops == ("in",):
        return value.operands[1]
    if set(value.ops) != {"="}:
        return None
    first, last = value.operands[0], value.operands[-1]
    if _is_lone_symbol(last) and not _is_lone_symbol(first):
        return first
    return last


def _is_lone_symbol(value: Value) -> bool:
    return isinstance(value, Scalar) and isinstance(value.node.expr, sympy.Symbol)


_FLIP = {"<": ">", ">": "<", "le": "ge", "ge": "le", "=": "=", "ne": "ne"}


def _relations_equal(a: Relation, b: Relation, deadline: float) -> bool:
    if len(a.ops) != 1 or len(b.ops) != 1:
        return a.ops == b.ops and _ordered_equal(a.operands, b.operands, deadline)
    if a.ops == b.ops and _ordered_equal(a.operands, b.operands, deadline):
        return True
    if _FLIP[b.ops[0]] == a.ops[0] and _ordered_equal(a.operands, b.operands[::-1], deadline):
        return True
    if a.ops == ("=",) and b.ops == ("=",):
        return _equations_proportional(a, b, deadline)
    return False


def _equations_proportional(a: Relation, b: Relation, deadline: float) -> bool:
    """lhs1 - rhs1 = k (lhs2 - rhs2) for a constant k != 0: "y = 2x + 1" is "2x - y + 1 = 0"."""
    if not all(isinstance(o, Scalar) and not o.node.deferred for o in a.operands + b.operands):
        return False
    diff_a = a.operands[0].node.expr - a.operands[1].node.expr
    diff_b = b.operands[0].node.expr - b.operands[1].node.expr
    symbols = diff_a.free_symbols | diff_b.free_symbols
    ratios = []
    for point in numeric.sample_points(symbols, NUM_POINTS, seed=1):
        try:
            va = numeric.evaluate(diff_a, point, deadline)
            vb = numeric.evaluate(diff_b, point, deadline)
        except (numeric.Undecidable, ZeroDivisionError, ValueError):
            continue
        if vb == 0 or va == 0:
            return False
        ratios.append(va / vb)
    return len(ratios) >= MIN_POINTS and all(numeric.close(r, ratios[0], 1e-20, 0) for r in ratios)


def scalars_equal(a: Scalar, b: Scalar, deadline: float) -> bool:
    """Equality of two scalars under any of their readings (percent, degrees)."""
    inexact = a.node.inexact or b.node.inexact
    deferred = a.node.deferred or b.node.deferred
    return any(
        _exprs_equal(ea, eb, inexact, deferred, deadline)
        for ea in a.candidates()
        for eb in b.candidates()
    )


def _drop_integration_constant(expr: sympy.Expr) -> sympy.Expr:
    if expr.is_Add and INTEGRATION_CONSTANT in expr.args:
        return sympy.Add(*[t for t in expr.args if t != INTEGRATION_CONSTANT])
    return expr


def _exprs_equal(
    ea: sympy.Expr, eb: sympy.Expr, inexact: bool, deferred: bool, deadline: float
) -> bool:
    if ea == eb:
        return True
    if deferred:
        return False
    ea, eb = _drop_integration_constant(ea), _drop_integration_constant(eb)
    if any(e.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo) for e in (ea, eb)):
        return ea == eb
    if ea.is_Rational and eb.is_Rational:
        if not inexact:
            return ea == eb
        return abs(ea - eb) <= sympy.Rational(1, 10**6) * max(abs(ea), abs(eb))
    rel_tol = DECIMAL_REL_TOL if inexact else EXACT_REL_TOL
    return _numerically_equal(ea, eb, rel_tol, deadline)


def _numerically_equal(ea: sympy.Expr, eb: sympy.Expr, rel_tol: float, deadline: float) -> bool:
    """Equal values at every seeded point where both sides are defined (at least MIN_POINTS)."""
    symbols = ea.free_symbols | eb.free_symbols
    points = numeric.sample_points(symbols, NUM_POINTS if symbols else 1)
    agreed = 0
    for point in points:
        try:
            va = numeric.evaluate(ea, point, deadline)
            vb = numeric.evaluate(eb, point, deadline)
        except (numeric.Undecidable, ZeroDivisionError, ValueError):
            continue
        if not numeric.close(va, vb, rel_tol, EXACT_ABS_TOL):
            return False
        agreed += 1
    return agreed >= (MIN_POINTS if symbols else 1)


def _ordered_equal(a: tuple[Value, ...], b: tuple[Value, ...], deadline: float) -> bool:
    return len(a) == len(b) and all(equivalent(x, y, deadline) for x, y in zip(a, b))


def _unordered_equal(a: tuple[Value, ...], b: tuple[Value, ...], deadline: float) -> bool:
    """Set equality: every item of each side matches some item of the other."""
    return all(any(equivalent(x, y, deadline) for y in b) for x in a) and all(
        any(equivalent(x, y, deadline) for x in a) for y in b
    )


def _collections_equal(a: Value, b: Value, deadline: float) -> bool:
    if isinstance(a, Matrix) or isinstance(b, Matrix):
        return _matrices_equal(a, b, deadline)
    if isinstance(a, UnionOf) or isinstance(b, UnionOf):
        parts_a = a.parts if isinstance(a, UnionOf) else a.items if a.open == "" else None
        parts_b = b.parts if isinstance(b, UnionOf) else b.items if b.open == "" else None
        return (
            parts_a is not None
            and parts_b is not None
            and all(isinstance(p, Seq) for p in parts_a + parts_b)
            and _unordered_equal(parts_a, parts_b, deadline)
        )
    # A bare list or a set of roots ignores order, also against "[2, 5]" (a list of roots, as
    # Python prints it, or a closed interval that no set or bare list would be confused with).
    unordered = {"{", ""}
    if (
        a.open in unordered
        and (b.open in unordered or (b.open, b.close) == ("[", "]"))
        or b.open in unordered
        and (a.open, a.close) == ("[", "]")
    ):
        return _unordered_equal(a.items, b.items, deadline)
    if (a.open, a.close) == (b.open, b.close) or "" in (a.open, b.open):
        # Tuples, lists and intervals keep their order; a bare list reads as the other's kind.
        return _ordered_equal(a.items, b.items, deadline)
    return False


def _matrices_equal(a: Value, b: Value, deadline: float) -> bool:
    """Same shape and entries; a tuple or list also matches a one-row or one-column matrix."""
    if isinstance(a, Matrix) and isinstance(b, Matrix):
        return len(a.rows) == len(b.rows) and all(
            _ordered_equal(ra, rb, deadline) for ra, rb in zip(a.rows, b.rows)
        )
    matrix, other = (a, b) if isinstance(a, Matrix) else (b, a)
    if not isinstance(other, Seq) or other.open not in ("(", "[", ""):
        return False
    if len(matrix.rows) == 1:
        entries = matrix.rows[0]
    elif all(len(row) == 1 for row in matrix.rows):
        entries = tuple(row[0] for row in matrix.rows)
    else:
        return False
    return _ordered_equal(entries, other.items, deadline)
