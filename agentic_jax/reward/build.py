"""Guarded construction of SymPy expressions from parsed pieces.

The parser never hands text to SymPy; it calls these constructors, which build expressions with
SymPy's classes directly. SymPy evaluates eagerly (``Integer(9) ** 387420489`` computes every
digit while holding the GIL), so each constructor first estimates the cost and, past a limit,
builds the node unevaluated and marks it ``deferred``. Deferred expressions are only ever
compared structurally, never expanded or evaluated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import sympy

from agentic_jax.reward.lexer import ParseError

MAX_POW_BITS = 1 << 17  # largest exact power evaluated (~40k decimal digits)
MAX_PRODUCT_BITS = 1 << 19  # largest exact product / sum of rationals evaluated
MAX_FACTORIAL = 5000  # n!, gamma(n) and binomial(n, k) are expanded only up to this |n|, |k|
MAX_FACTORIAL_ARG_BITS = 64  # ... and for exact arguments of at most this many bits
MAX_ROOT_BASE_BITS = 256  # rational powers like 8^(2/3) are simplified only for small bases
MAX_ROOT_EXPONENT = 64
MAX_SURD_POWER = 1000  # integer powers of irrational constants, e.g. sqrt(2)^k


@dataclasses.dataclass(frozen=True)
class Node:
    """A parsed scalar expression.

    ``inexact``: a decimal literal took part, so comparisons use a relative tolerance.
    ``deferred``: some part was too large to evaluate and was left unevaluated.
    ``mark``: "%" or "°" when the value was written as a percentage or in degrees.
    """

    expr: sympy.Expr
    inexact: bool = False
    deferred: bool = False
    mark: str | None = None


def _merge(children: list[Node], expr: sympy.Expr, deferred: bool = False) -> Node:
    """Builds a parent node whose flags combine those of ``children``."""
    mark = next((c.mark for c in children if c.mark), None)
    return Node(
        expr,
        inexact=any(c.inexact for c in children),
        deferred=deferred or any(c.deferred for c in children),
        mark=mark,
    )


def _bits(number: sympy.Expr) -> int:
    """Size in bits of an exact rational (numerator plus denominator)."""
    return int(number.p).bit_length() + int(number.q).bit_length()


def _numeric_bits(children: list[Node]) -> int:
    return sum(_bits(c.expr) for c in children if c.expr.is_Rational)


def number(literal: str) -> Node:
    """A decimal or scientific literal becomes an exact Rational flagged ``inexact``."""
    if literal.isdigit():
        return Node(sympy.Integer(int(literal)))
    mantissa, _, exponent = literal.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    value = sympy.Rational(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    power = int(exponent or "0")
    if abs(power) > 4 * MAX_POW_BITS // 13:
        return Node(
            sympy.Mul(value, sympy.Pow(10, power, evaluate=False), evaluate=False),
            inexact=True,
            deferred=True,
        )
    return Node(value * sympy.Integer(10) ** power, inexact=True)


def atom(expr: sympy.Expr) -> Node:
    """A symbol or named constant."""
    return Node(expr)


def add(terms: list[Node]) -> Node:
    """Sum of ``terms`` (collected n-ary, so long sums cost one flatten)."""
    defer = any(t.deferred for t in terms) or _numeric_bits(terms) > MAX_PRODUCT_BITS
    return _merge(terms, sympy.Add(*[t.expr for t in terms], evaluate=not defer), defer)


def mul(factors: list[Node]) -> Node:
    """Product of ``factors``."""
    defer = any(f.deferred for f in factors) or _numeric_bits(factors) > MAX_PRODUCT_BITS
    return _merge(factors, sympy.Mul(*[f.expr for f in factors], evaluate=not defer), defer)


def neg(node: Node) -> Node:
    return mul([Node(sympy.Integer(-1)), node])


def div(numerator: Node, denominator: Node) -> Node:
    return mul([numerator, power(denominator, Node(sympy.Integer(-1)))])


def _power_too_costly(base: sympy.Expr, exp: sympy.Expr) -> bool:
    """Whether SymPy's eager evaluation of base**exp could run unboundedly long."""
    if not exp.is_Number or base.free_symbols:
        return False
    if exp.is_Integer:
        if base.is_Rational:
            if base in (0, 1, -1):
                return False
            return (
                abs(int(exp)) * max(int(base.p).bit_length(), int(base.q).bit_length())
                > MAX_POW_BITS
            )
        return abs(int(exp)) > MAX_SURD_POWER
    if exp.is_Rational and base.is_Rational:
        return (
            _bits(base) > MAX_ROOT_BASE_BITS
            or abs(int(exp.p)) > MAX_ROOT_EXPONENT
            or int(exp.q) > MAX_ROOT_EXPONENT
        )
    return False


def power(base: Node, exp: Node) -> Node:
    """base ** exp, left unevaluated (and deferred) when evaluating could blow up."""
    defer = base.deferred or exp.deferred or _power_too_costly(base.expr, exp.expr)
    return _merge([base, exp], sympy.Pow(base.expr, exp.expr, evaluate=not defer), defer)


def _too_large_to_expand(expr: sympy.Expr) -> bool:
    """Whether a factorial-like function of ``expr`` must stay unevaluated. SymPy expands
    gamma(n/2) and binomial(x, k) for any rational n, x into products whose cost grows with the
    square of the argument (gamma(160001/2): 2 s holding the GIL) or with k times its bits
    (binomial(10^300/3, 4000): 16 s), so every exact rational is bounded, not only integers."""
    return bool(expr.is_Rational) and (abs(expr) > MAX_FACTORIAL
                                       or _bits(expr) > MAX_FACTORIAL_ARG_BITS)


def factorial(arg: Node) -> Node:
    """n!; expanded only for |n| <= MAX_FACTORIAL."""
    defer = arg.deferred or _too_large_to_expand(arg.expr)
    return _merge([arg], sympy.factorial(arg.expr, evaluate=not defer), defer)


def binomial(n: Node, k: Node) -> Node:
    """Binomial coefficient; expanded only for small integer arguments."""
    defer = (n.deferred or k.deferred or _too_large_to_expand(n.expr)
             or _too_large_to_expand(k.expr))
    return _merge([n, k], sympy.binomial(n.expr, k.expr, evaluate=not defer), defer)


def root(arg: Node, degree: Node) -> Node:
    """The ``degree``-th root of ``arg``."""
    return power(arg, power(degree, Node(sympy.Integer(-1))))


FUNCTIONS: dict[str, Callable[..., sympy.Expr]] = {
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "cot": sympy.cot,
    "sec": sympy.sec,
    "csc": sympy.csc,
    "arcsin": sympy.asin,
    "arccos": sympy.acos,
    "arctan": sympy.atan,
    "asin": sympy.asin,
    "acos": sympy.acos,
    "atan": sympy.atan,
    "arccot": sympy.acot,
    "acot": sympy.acot,
    "sinh": sympy.sinh,
    "cosh": sympy.cosh,
    "tanh": sympy.tanh,
    "exp": sympy.exp,
    "ln": sympy.log,
    "log": sympy.log,
    "abs": sympy.Abs,
    "Abs": sympy.Abs,
    "floor": sympy.floor,
    "ceiling": sympy.ceiling,
    "ceil": sympy.ceiling,
    "gamma": sympy.gamma,
}
INVERSE = {"sin": "arcsin", "cos": "arccos", "tan": "arctan", "cot": "arccot"}
TRIG = frozenset({"sin", "cos", "tan", "cot", "sec", "csc"})


def function(name: str, args: list[Node]) -> Node:
    """Applies a function from the fixed table; deferred arguments keep it unevaluated."""
    if name == "sqrt" and len(args) == 1:
        return power(args[0], Node(sympy.Rational(1, 2)))
    if name == "factorial" and len(args) == 1:
        return factorial(args[0])
    if name in ("binomial", "binom", "C") and len(args) == 2:
        return binomial(*args)
    if name == "log" and len(args) == 2:
        return div(function("log", args[:1]), function("log", args[1:]))
    func = FUNCTIONS.get(name)
    if func is None or len(args) != 1:
        raise ParseError(f"unsupported function {name}/{len(args)}")
    if name in TRIG and args[0].mark == "°":
        # sin 60° takes its argument in degrees; the result is a plain number.
        arg = args[0]
        args = [Node(arg.expr * sympy.pi / 180, arg.inexact, arg.deferred)]
    # gamma(n) is (n-1)!: the same expansion limit applies.
    defer = args[0].deferred or func is sympy.gamma and _too_large_to_expand(args[0].expr)
    return _merge(args, func(args[0].expr, evaluate=not defer), defer)
