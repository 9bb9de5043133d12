"""Algebra stage: linear and quadratic equations, 2x2 linear systems, factoring.

Answers are built first (roots, solutions), then the equation around them, so no solver runs at
generation time. Questions use Python syntax (3*x + 5, x**2) that the reference code copies.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from agentic_jax.data import checks, symbolic
from agentic_jax.data.problem import KindTable, Problem, draft

_SYMPY_XY = "from sympy import *\nx, y = symbols('x y')\n"


def _nonzero(rng: random.Random, bound: int) -> int:
    return rng.choice([v for v in range(-bound, bound + 1) if v != 0])


def _paren(value: Fraction | int) -> str:
    """A number ready to sit inside a product: negatives get parentheses."""
    text = symbolic.num(value)
    return f"({text})" if text.startswith("-") else text


def _linear(rng: random.Random, level: float) -> Problem:
    bound = 3 + round(level * 17)
    a = _nonzero(rng, bound) if level > 0.4 else rng.randint(2, bound)
    root = Fraction(rng.randint(-bound, bound), 1 if level < 0.5 else rng.randint(1, 4) * abs(a))
    root = Fraction(round(root * a), a)  # a*root stays an integer so c is one too
    b = _nonzero(rng, 5 * bound)
    c = a * root + b
    lhs = symbolic.join_terms([symbolic.term(a, "x"), symbolic.num(b)])
    eq = f"{lhs} = {symbolic.num(c)}"
    question = rng.choice(
        (f"Solve for x: {eq}.", f"Find x if {eq}.", f"What value of x satisfies {eq}?")
    )
    direct = (f"{eq}, so {symbolic.term(a, 'x')} = {symbolic.num(c - b)}, "
              f"so x = {symbolic.num(c - b)}/{_paren(a)} = {symbolic.num(root)}.")
    code = f"{symbolic.SYMPY_X}print(solve(Eq({lhs}, {symbolic.num(c)}), x)[0])"
    return draft("linear", (bound - 3) / 17, question, symbolic.num(root), code,
                 checks.roots_test(f"({lhs}) - ({symbolic.num(c)})", 1), direct,
                 f"linear:{eq.replace(' ', '')}")


def _factors(rng: random.Random, level: float, allow_zero: bool) -> list[tuple[int, int]]:
    """Two primitive linear factors (a, b) meaning a*x + b, sorted as sympy orders them."""
    bound = 4 + round(level * 11)
    out = []
    for _ in range(2):
        a = 1 if level < 0.4 or rng.random() < 0.5 else rng.randint(2, 2 + round(level * 4))
        while True:
            b = rng.randint(-bound, bound)
            if (b != 0 or allow_zero) and math.gcd(a, b) == 1:
                break
        out.append((a, b))
    return sorted(out)


def _product_poly(factors: list[tuple[int, int]], content: int = 1) -> symbolic.Poly:
    poly = symbolic.poly_from_coeffs([content])
    for a, b in factors:
        poly = symbolic.poly_mul(poly, symbolic.poly_from_coeffs([b, a]))
    return poly


def _factored(factors: list[tuple[int, int]], content: int = 1) -> str:
    """Prints a product of linear factors as sympy's factor() does: "2*(x - 1)*(x + 3)"."""
    parts = [f"({symbolic.linear_factor(a, b)})" for a, b in factors]
    body = f"{parts[0]}**2" if factors[0] == factors[1] else "*".join(parts)
    return body if content == 1 else f"{content}*{body}"


def _quadratic(rng: random.Random, level: float) -> Problem:
    factors = _factors(rng, level, allow_zero=True)
    while factors[0][0] * factors[1][1] == factors[1][0] * factors[0][1]:
        factors = _factors(rng, level, allow_zero=True)  # two distinct roots
    poly = _product_poly(factors)
    roots = sorted(Fraction(-b, a) for a, b in factors)
    answer = "[" + ", ".join(symbolic.num(r) for r in roots) + "]"
    constant = poly.get(0, Fraction(0))
    if constant != 0 and rng.random() < 0.4:  # move the constant across: x**2 + 2*x = 8
        lhs = symbolic.poly_str({d: c for d, c in poly.items() if d > 0})
        rhs = symbolic.num(-constant)
    else:
        lhs, rhs = symbolic.poly_str(poly), "0"
    eq = f"{lhs} = {rhs}"
    question = rng.choice((f"Solve {eq}.", f"Find all real solutions of {eq}.",
                           f"Solve the equation {eq} for x."))
    full = symbolic.poly_str(poly)
    direct = "" if rhs == "0" else f"{eq} means {full} = 0. "
    direct += f"{full} = {_factored(factors)}, so the roots are {answer}."
    code = f"{symbolic.SYMPY_X}print(solve(Eq({lhs}, {rhs}), x))"
    difficulty = (level + (factors[0][0] * factors[1][0] > 1)) / 2
    return draft("quadratic", difficulty, question, answer, code,
                 checks.roots_test(f"({lhs}) - ({rhs})", 2), direct, f"quad:{full}")


def _factor(rng: random.Random, level: float) -> Problem:
    factors = _factors(rng, level, allow_zero=False)
    content = 1 if level < 0.6 else rng.choice((1, 2, 3))
    poly = _product_poly(factors, content)
    expr, answer = symbolic.poly_str(poly), _factored(factors, content)
    question = rng.choice((f"Factor {expr}.", f"Factor the polynomial {expr} completely.",
                           f"Write {expr} as a product of linear factors."))
    roots = ", ".join(symbolic.num(Fraction(-b, a)) for a, b in factors)
    direct = f"The roots of {expr} are {roots}, so {expr} = {answer}."
    difficulty = (level + (content > 1 or factors[1][0] > 1)) / 2
    return draft("factor", difficulty, question, answer, f"{symbolic.SYMPY_X}print(factor({expr}))",
                 checks.factor_test(expr), direct, f"factor:{expr}")


def _system(rng: random.Random, level: float) -> Problem:
    bound = 3 + round(level * 9)
    x0, y0 = rng.randint(-bound, bound), rng.randint(-bound, bound)
    while True:
        a1, b1, a2, b2 = (_nonzero(rng, bound) for _ in range(4))
        det = a1 * b2 - b1 * a2
        if det != 0:
            break
    c1, c2 = a1 * x0 + b1 * y0, a2 * x0 + b2 * y0
    lhs = [symbolic.join_terms([symbolic.term(a, "x"), symbolic.term(b, "y")])
           for a, b in ((a1, b1), (a2, b2))]
    eqs = [f"{lhs[0]} = {c1}", f"{lhs[1]} = {c2}"]
    question = rng.choice((f"Solve the system {eqs[0]}, {eqs[1]}. Answer as (x, y).",
                           f"Find (x, y) such that {eqs[0]} and {eqs[1]}."))
    answer = f"({x0}, {y0})"
    direct = (f"The determinant is {a1}*{_paren(b2)} - {_paren(b1)}*{_paren(a2)} = {det}. "
              f"x = ({c1}*{_paren(b2)} - {_paren(b1)}*{_paren(c2)})/{_paren(det)} = {x0}, "
              f"y = ({a1}*{_paren(c2)} - {_paren(c1)}*{_paren(a2)})/{_paren(det)} = {y0}, "
              f"so (x, y) = {answer}.")
    code = (f"{_SYMPY_XY}s = solve([Eq({lhs[0]}, {c1}), Eq({lhs[1]}, {c2})], [x, y])\n"
            "print((s[x], s[y]))")
    tests = checks.pair_test([f"({lhs[0]}) - ({c1})", f"({lhs[1]}) - ({c2})"])
    return draft("system", (bound - 3) / 9, question, answer, code, tests, direct,
                 f"system:{sorted(eqs)}".replace(" ", ""))


GENERATORS: KindTable = {
    "linear": (0.3, _linear),
    "quadratic": (0.3, _quadratic),
    "factor": (0.2, _factor),
    "system": (0.2, _system),
}
