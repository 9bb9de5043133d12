"""Calculus stage: derivatives, indefinite and definite integrals, limits.

Functions are polynomials plus a few sin/cos/exp terms whose derivatives are written down by
rule, so answers are exact and built without a computer-algebra call.
"""

from __future__ import annotations

import random
from fractions import Fraction

from agentic_jax.data import checks, symbolic
from agentic_jax.data.problem import KindTable, Problem, draft

# name -> (derivative name, sign of the derivative)
_FUNCS = {"sin": ("cos", 1), "cos": ("sin", -1), "exp": ("exp", 1)}


def _poly(rng: random.Random, level: float, min_degree: int = 1) -> symbolic.Poly:
    degree = rng.randint(min_degree, min_degree + round(level * 4))
    bound = 3 + round(level * 9)
    coeffs = [rng.randint(-bound, bound) for _ in range(degree)] + [rng.randint(1, bound)]
    return symbolic.poly_from_coeffs(coeffs)


def _differentiate_text(poly: symbolic.Poly) -> str:
    """Term-by-term power-rule working: "d/dx(3*x**2) = 6*x; d/dx(5) = 0"."""
    steps = []
    for d in sorted(poly, reverse=True):
        steps.append(f"d/dx({symbolic.term(poly[d], symbolic.power('x', d))}) = "
                     f"{symbolic.poly_str(symbolic.poly_diff({d: poly[d]}))}")
    return "; ".join(steps)


def _derivative(rng: random.Random, level: float) -> Problem:
    poly = _poly(rng, level, min_degree=2)
    f, answer = symbolic.poly_str(poly), symbolic.poly_str(symbolic.poly_diff(poly))
    question = rng.choice((f"Find the derivative of {f} with respect to x.",
                           f"Differentiate {f}.", f"What is d/dx of {f}?"))
    direct = f"By the power rule, {_differentiate_text(poly)}. So the derivative is {answer}."
    return draft("derivative", level, question, answer, f"{symbolic.SYMPY_X}print(diff({f}, x))",
                 checks.expression_test(answer), direct, f"diff:{f}")


def _derivative_functions(rng: random.Random, level: float) -> Problem:
    poly = _poly(rng, level / 2)
    terms, dterms = [], []
    for name in rng.sample(sorted(_FUNCS), 1 + round(level)):
        c, k = rng.choice([v for v in range(-5, 6) if v]), rng.randint(1, 2 + round(level * 3))
        arg = "x" if k == 1 else f"{k}*x"
        dname, sign = _FUNCS[name]
        terms.append(symbolic.term(c, f"{name}({arg})"))
        dterms.append(symbolic.term(sign * c * k, f"{dname}({arg})"))
    poly_terms = [symbolic.poly_str(poly)]
    f = symbolic.join_terms(poly_terms + terms)
    dpoly = symbolic.poly_diff(poly)
    answer = symbolic.join_terms(([symbolic.poly_str(dpoly)] if dpoly else []) + dterms)
    question = rng.choice((f"Differentiate {f} with respect to x.",
                           f"Find the derivative of f(x) = {f}."))
    rules = "; ".join(f"d/dx({t}) = {d}" for t, d in zip(terms, dterms))
    direct = f"Term by term: {_differentiate_text(poly)}; {rules}. So f'(x) = {answer}."
    return draft("derivative_functions", level, question, answer,
                 f"{symbolic.SYMPY_X}print(diff({f}, x))", checks.expression_test(answer), direct,
                 f"dfun:{f}")


def _derivative_at(rng: random.Random, level: float) -> Problem:
    poly = _poly(rng, level, min_degree=2)
    point = rng.randint(-3 - round(level * 5), 3 + round(level * 5))
    f, df = symbolic.poly_str(poly), symbolic.poly_diff(poly)
    answer = symbolic.num(symbolic.poly_eval(df, point))
    question = f"Let f(x) = {f}. Compute f'({point})."
    direct = f"f'(x) = {symbolic.poly_str(df)}, so f'({point}) = {answer}."
    code = f"{symbolic.SYMPY_X}print(diff({f}, x).subs(x, {point}))"
    return draft("derivative_at", level, question, answer, code, checks.value_test(answer),
                 direct, f"dat:{f}@{point}")


def _antiderivative(rng: random.Random, level: float) -> Problem:
    poly = _poly(rng, level)
    f, answer = symbolic.poly_str(poly), symbolic.poly_str(symbolic.poly_integrate(poly))
    question = rng.choice((f"Find an antiderivative of {f}.",
                           f"Compute the indefinite integral of {f} with respect to x."))
    direct = f"Integrating term by term with the power rule, the integral of {f} is {answer} + C."
    code = f"{symbolic.SYMPY_X}print(integrate({f}, x))"
    return draft("antiderivative", level, question, answer, code, checks.antiderivative_test(f),
                 direct, f"int:{f}")


def _definite_integral(rng: random.Random, level: float) -> Problem:
    poly = _poly(rng, level)
    lo = rng.randint(-3 - round(level * 3), 2)
    hi = lo + rng.randint(1, 2 + round(level * 4))
    f, antider = symbolic.poly_str(poly), symbolic.poly_integrate(poly)
    upper, lower = symbolic.poly_eval(antider, hi), symbolic.poly_eval(antider, lo)
    answer = symbolic.num(upper - lower)
    question = rng.choice((f"Compute the integral of {f} from x = {lo} to x = {hi}.",
                           f"Evaluate the definite integral of {f} over [{lo}, {hi}]."))
    direct = (f"An antiderivative is F(x) = {symbolic.poly_str(antider)}. F({hi}) - F({lo}) = "
              f"{symbolic.num(upper)} - ({symbolic.num(lower)}) = {answer}.")
    code = f"{symbolic.SYMPY_X}print(integrate({f}, (x, {lo}, {hi})))"
    return draft("definite_integral", level, question, answer, code, checks.value_test(answer),
                 direct, f"defint:{f}:{lo}:{hi}")


def _limit_case(rng: random.Random, level: float) -> tuple[str, str, Fraction, str]:
    """One limit problem: (expression, point, value, reasoning)."""
    form = rng.randrange(4)
    if form == 0:  # removable singularity: (x - a)(x + k)/(x - a) -> a + k
        a, k = rng.randint(-6, 6), rng.randint(-6 - round(level * 10), 6 + round(level * 10))
        top = symbolic.poly_str(symbolic.poly_mul({1: Fraction(1), 0: Fraction(-a)},
                                                   {1: Fraction(1), 0: Fraction(k)}))
        factor = symbolic.linear_factor(1, -a)
        reason = (f"The numerator factors as ({factor})*({symbolic.linear_factor(1, k)}), "
                  f"so the quotient is {symbolic.linear_factor(1, k)} near x = {a}")
        return f"({top})/({factor})", str(a), Fraction(a + k), reason
    k, m = rng.randint(1, 4 + round(level * 8)), rng.randint(1, 2 + round(level * 6))
    kx, below = symbolic.term(k, "x"), ("x" if m == 1 else f"({m}*x)")
    if form == 1:  # sin(k*x)/(m*x) -> k/m
        return (f"sin({kx})/{below}", "0", Fraction(k, m),
                f"sin({kx}) is about {kx} near 0, so the quotient tends to {k}/{m}")
    if form == 2:  # (exp(k*x) - 1)/(m*x) -> k/m
        return (f"(exp({kx}) - 1)/{below}", "0", Fraction(k, m),
                f"exp({kx}) - 1 is about {kx} near 0, so the quotient tends to {k}/{m}")
    top = symbolic.poly_str({2: Fraction(k), 1: Fraction(rng.randint(-9, 9)),
                             0: Fraction(rng.randint(-9, 9))})
    bottom = symbolic.poly_str({2: Fraction(m), 0: Fraction(rng.randint(1, 9))})
    return (f"({top})/({bottom})", "oo", Fraction(k, m),
            f"The x**2 terms dominate, so the quotient tends to {k}/{m}")


def _limit(rng: random.Random, level: float) -> Problem:
    expr, point, value, reason = _limit_case(rng, level)
    where = "infinity" if point == "oo" else point
    question = rng.choice((f"Compute the limit of {expr} as x approaches {where}.",
                           f"Find the limit of {expr} as x -> {where}."))
    answer = symbolic.num(value)
    return draft("limit", level, question, answer,
                 f"{symbolic.SYMPY_X}print(limit({expr}, x, {point}))", checks.value_test(answer),
                 f"{reason}. The limit is {answer}.", f"lim:{expr}@{point}")


GENERATORS: KindTable = {
    "derivative": (0.2, _derivative),
    "derivative_functions": (0.15, _derivative_functions),
    "derivative_at": (0.15, _derivative_at),
    "antiderivative": (0.2, _antiderivative),
    "definite_integral": (0.15, _definite_integral),
    "limit": (0.15, _limit),
}
