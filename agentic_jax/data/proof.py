"""Proof stage: statements checkable symbolically or exhaustively.

Divisibility for all integers (gcd of a polynomial's values), polynomial identities (expand both
sides) and inequalities on ranges (complete the square). Half of the true/false statements are
false, so guessing earns nothing; numeric variants ask for the divisor or the minimum itself.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from agentic_jax.data import checks, symbolic
from agentic_jax.data.problem import KindTable, Problem, draft



def _integer_polynomial(rng: random.Random, level: float) -> tuple[str, symbolic.Poly, str]:
    """A polynomial in n with a known divisibility pattern: (text, poly, why it is divisible)."""
    scale = 1 if level < 0.5 else rng.randint(1, 4)
    if rng.random() < 0.5:
        length, shift = rng.randint(2, 3 + round(level)), rng.randint(-3, 3)
        factors = [(1, shift + i) for i in range(length)]
        why = f"it is {scale} times " if scale > 1 else "it is "
        why += f"a product of {length} consecutive integers"
    else:
        p = rng.choice((3, 5) if level < 0.5 else (3, 5, 7))
        factors = []
        why = f"n**{p} - n is divisible by every prime q with q - 1 dividing {p - 1}"
    poly = symbolic.poly_from_coeffs([scale])
    for a, b in factors:
        poly = symbolic.poly_mul(poly, symbolic.poly_from_coeffs([b, a]))
    if factors:
        text = "*".join(f"({symbolic.linear_factor(a, b, 'n')})" if b else "n" for a, b in factors)
    else:
        poly = symbolic.poly_mul(poly, {p: Fraction(1), 1: Fraction(-1)})
        text = f"(n**{p} - n)"
    return (text if scale == 1 else f"{scale}*{text}"), poly, why


def _value_gcd(poly: symbolic.Poly) -> tuple[int, list[int]]:
    """gcd of all integer values: the values at 0..degree already generate it."""
    values = [int(symbolic.poly_eval(poly, n)) for n in range(max(poly) + 1)]
    return math.gcd(*values), values


def _gcd_reason(text: str, poly: symbolic.Poly, why: str) -> tuple[int, str]:
    gcd, values = _value_gcd(poly)
    shown = ", ".join(map(str, values))
    return gcd, (f"{text} takes the values {shown} at n = 0..{len(values) - 1}; their gcd is "
                 f"{gcd}, and since {why}, {gcd} divides every value")


def _divisibility(rng: random.Random, level: float) -> Problem:
    text, poly, why = _integer_polynomial(rng, level)
    gcd, reason = _gcd_reason(text, poly, why)
    truth = rng.random() < 0.5
    if truth:
        divisor = rng.choice([d for d in range(2, gcd + 1) if gcd % d == 0])
    else:
        divisor = gcd * rng.choice((2, 3, 5, 7))
    question = rng.choice(
        (f"True or False: {text} is divisible by {divisor} for every integer n.",
         f"Is {text} divisible by {divisor} for all integers n? Answer True or False."))
    verdict = "divides" if truth else "does not divide"
    direct = f"{reason}. {divisor} {verdict} {gcd}, so the statement is {truth}."
    code = f"print(all(({text}) % {divisor} == 0 for n in range(-1000, 1001)))"
    return draft("divisibility", level, question, str(truth), code, checks.truth_test(truth),
                 direct, f"div:{text}:{divisor}")


def _largest_divisor(rng: random.Random, level: float) -> Problem:
    text, poly, why = _integer_polynomial(rng, level)
    gcd, reason = _gcd_reason(text, poly, why)
    question = f"What is the largest integer that divides {text} for every integer n?"
    code = f"import math\nprint(math.gcd(*[{text} for n in range(0, 50)]))"
    return draft("largest_divisor", level, question, str(gcd), code,
                 checks.value_test(str(gcd)), f"{reason}. The answer is {gcd}.",
                 f"gcd:{text}")


def _identity(rng: random.Random, level: float) -> Problem:
    bound = 2 + round(level * 6)
    p, q = rng.randint(1, bound), rng.choice([v for v in range(-bound, bound + 1) if v])
    inner = symbolic.join_terms([symbolic.term(p, "a"), symbolic.term(q, "b")])
    if rng.random() < 0.5:
        lhs = f"({inner})**2"
        coeffs = [(p * p, "a**2"), (2 * p * q, "a*b"), (q * q, "b**2")]
    else:
        other = symbolic.join_terms([symbolic.term(p, "a"), symbolic.term(-q, "b")])
        lhs = f"({inner})*({other})"
        coeffs = [(p * p, "a**2"), (-q * q, "b**2")]
    expanded = symbolic.join_terms([symbolic.term(c, m) for c, m in coeffs])
    truth = rng.random() < 0.5
    if not truth:
        i = rng.randrange(len(coeffs))
        coeffs[i] = (coeffs[i][0] + rng.choice((-2, -1, 1, 2)), coeffs[i][1])
    rhs = symbolic.join_terms([symbolic.term(c, m) for c, m in coeffs])
    question = rng.choice((f"True or False: {lhs} = {rhs} for all real a and b.",
                           f"Is {lhs} equal to {rhs} for all real numbers a, b? "
                           "Answer True or False."))
    verdict = "matches" if truth else "differs from"
    direct = f"Expanding, {lhs} = {expanded}, which {verdict} {rhs}. So the statement is {truth}."
    code = ("from sympy import *\na, b = symbols('a b')\n"
            f"print(expand(({lhs}) - ({rhs})) == 0)")
    return draft("identity", level, question, str(truth), code, checks.truth_test(truth),
                 direct, f"id:{lhs}={rhs}")


def _range_minimum(rng: random.Random, level: float) -> tuple[str, int, int, Fraction, str]:
    """m*(x - h)**2 + k on [lo, hi]: (f, lo, hi, minimum, completing-the-square reasoning)."""
    m, h = rng.randint(1, 1 + round(level * 3)), rng.randint(-6, 6)
    k = rng.randint(-8, 8)
    lo = rng.randint(-8, 6)
    hi = lo + rng.randint(1, 4 + round(level * 6))
    poly = {2: Fraction(m), 1: Fraction(-2 * m * h), 0: Fraction(m * h * h + k)}
    at = min(max(h, lo), hi)
    least = symbolic.poly_eval(poly, at)
    square = f"({symbolic.linear_factor(1, -h)})**2"
    shape = symbolic.join_terms([square if m == 1 else f"{m}*{square}", symbolic.num(k)])
    f = symbolic.poly_str(poly)
    reason = (f"Completing the square, {f} = {shape}. On [{lo}, {hi}] the least value is at "
              f"x = {at}, where it equals {symbolic.num(least)}")
    return f, lo, hi, least, reason


def _inequality(rng: random.Random, level: float) -> Problem:
    f, lo, hi, least, reason = _range_minimum(rng, level)
    truth = least > 0
    question = rng.choice((f"True or False: {f} > 0 for every x in [{lo}, {hi}].",
                           f"Is {f} positive for all x with {lo} <= x <= {hi}? "
                           "Answer True or False."))
    direct = f"{reason}, so the statement is {truth}."
    code = f"{symbolic.SYMPY_X}print(minimum({f}, x, Interval({lo}, {hi})) > 0)"
    return draft("inequality", level, question, str(truth), code, checks.truth_test(truth),
                 direct, f"ineq:{f}:{lo}:{hi}")


def _minimum(rng: random.Random, level: float) -> Problem:
    f, lo, hi, least, reason = _range_minimum(rng, level)
    answer = symbolic.num(least)
    question = f"What is the minimum value of {f} for x in [{lo}, {hi}]?"
    code = f"{symbolic.SYMPY_X}print(minimum({f}, x, Interval({lo}, {hi})))"
    return draft("minimum", level, question, answer, code, checks.value_test(answer),
                 f"{reason}. The minimum is {answer}.", f"min:{f}:{lo}:{hi}")


GENERATORS: KindTable = {
    "divisibility": (0.3, _divisibility),
    "largest_divisor": (0.2, _largest_divisor),
    "identity": (0.25, _identity),
    "inequality": (0.15, _inequality),
    "minimum": (0.1, _minimum),
}
