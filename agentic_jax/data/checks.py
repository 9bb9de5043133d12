"""Source of the `tests` programs that check a candidate `ANSWER` string inside the sandbox.

Every program is PRELUDE + one `_verify()` function + EPILOGUE. The prelude turns the answer
(plain, Python-style or light LaTeX: \\frac, ^, \\cdot, "x = 3", "[-2, 3]", "+ C") into sympy
objects; any failure to read or check the answer surfaces as an AssertionError, as DESIGN.md
asks. Parsing with sympy's `parse_expr` happens only here, inside the sandbox.
"""

from __future__ import annotations

from fractions import Fraction

from agentic_jax.data.symbolic import num

PRELUDE = r'''import sympy
from sympy.parsing.sympy_parser import (parse_expr, standard_transformations,
                                        implicit_multiplication_application)
x, y = sympy.symbols('x y')
_T = standard_transformations + (implicit_multiplication_application,)
_SUBS = (('$', ''), ('\\left', ''), ('\\right', ''), ('\\cdot', '*'), ('\\times', '*'),
         ('\\dfrac', '\\frac'), ('\\tfrac', '\\frac'), ('\\ln', 'log'), ('^', '**'))

def _group(s, i):
    depth = 0
    for j in range(i, len(s)):
        depth += {'{': 1, '}': -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1:j], j + 1
    raise AssertionError('unbalanced braces in ANSWER')

def _clean(s):
    s = str(s).strip()
    if s.startswith('\\boxed{'):
        s = _group(s, 6)[0]
    for a, b in _SUBS:
        s = s.replace(a, b)
    while '\\frac{' in s:
        i = s.index('\\frac{')
        top, j = _group(s, i + 5)
        bottom, k = _group(s, j)
        s = s[:i] + '((' + top + ')/(' + bottom + '))' + s[k:]
    s = s.replace('\\', '').replace('{', '(').replace('}', ')')
    return s.strip().rstrip('.').strip()

def _rhs(s):
    return s.split('=')[-1].strip()

def _expr(s):
    return parse_expr(_rhs(_clean(s)), local_dict={'x': x, 'y': y, 'e': sympy.E},
                      transformations=_T)

def _value(s):
    s = _rhs(_clean(s))
    try:
        return sympy.Rational(s.replace(' ', ''))
    except (TypeError, ValueError):
        return _expr(s)

def _values(s):
    s = _clean(s)
    if s[:1] + s[-1:] in ('[]', '()', '{}'):
        s = s[1:-1]
    for sep in (' or ', ' and ', ';'):
        s = s.replace(sep, ',')
    return [_value(p) for p in s.split(',') if p.strip()]

def _same(v, ref):
    if v.is_Rational:
        return v == ref
    return abs(complex(sympy.N(v - ref))) <= 1e-6 * max(1, abs(float(ref)))

def _truth(s):
    word = _clean(s).lower()
    assert word in ('true', 'false', 'yes', 'no'), 'ANSWER must be True or False'
    return word in ('true', 'yes')

'''

EPILOGUE = r'''
try:
    _verify()
except AssertionError:
    raise
except Exception as _err:
    raise AssertionError('cannot check ANSWER: ' + type(_err).__name__) from None
'''


def _program(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"{PRELUDE}def _verify():\n{body}{EPILOGUE}"


def value_test(reference: str) -> str:
    """ANSWER equals the number `reference` (exact for rationals, 1e-6 otherwise)."""
    return _program(f"assert _same(_value(ANSWER), sympy.Rational('{reference}'))")


def numeric_tests(answer: str) -> str:
    """A value test when the answer is a plain number, else "" (graded by equivalence only)."""
    try:
        value = Fraction(answer)
    except (ValueError, ZeroDivisionError):
        return ""
    return value_test(num(value))


def roots_test(equation: str, count: int) -> str:
    """ANSWER lists `count` distinct values, each a root of `equation` (an expression = 0)."""
    return _program(
        "roots = _values(ANSWER)",
        f"assert len(set(roots)) == len(roots) == {count}, 'expected {count} distinct roots'",
        f"assert all(sympy.simplify(({equation}).subs(x, r)) == 0 for r in roots)",
    )


def pair_test(equations: list[str]) -> str:
    """ANSWER is a pair (x, y) satisfying every expression in `equations` (each = 0)."""
    return _program(
        "v = _values(ANSWER)",
        "assert len(v) == 2, 'expected a pair (x, y)'",
        f"equations = [{', '.join(equations)}]",
        "assert all(sympy.expand(e.subs({x: v[0], y: v[1]})) == 0 for e in equations)",
    )


def factor_test(polynomial: str) -> str:
    """ANSWER equals `polynomial` and is a product of factors of degree <= 1 in x."""
    return _program(
        "e = _expr(ANSWER)",
        f"assert sympy.expand(e - ({polynomial})) == 0, 'not equal to the polynomial'",
        "parts = [f.base if f.is_Pow else f for f in sympy.Mul.make_args(e)]",
        "assert all(sympy.degree(f, x) <= 1 for f in parts), 'not fully factored'",
    )


def expression_test(reference: str) -> str:
    """ANSWER is an expression in x equal to `reference` (checked at several points)."""
    return _program(
        f"d = _expr(ANSWER) - _expr({reference!r})",
        "assert d.free_symbols <= {x}, 'unexpected symbols'",
        "pts = (sympy.Rational(3, 10), sympy.Rational(7, 5), sympy.Rational(23, 10))",
        "assert all(abs(complex(d.subs(x, p).evalf())) < 1e-9 for p in pts)",
    )


def antiderivative_test(integrand: str) -> str:
    """ANSWER differentiates to `integrand` (any constant of integration is allowed)."""
    return _program(
        "e = _expr(ANSWER)",
        "assert x in e.free_symbols, 'expected an expression in x'",
        f"assert sympy.expand(sympy.diff(e, x) - ({integrand})) == 0",
    )


def truth_test(reference: bool) -> str:
    """ANSWER is the truth value `reference` ("True"/"False", "yes"/"no")."""
    return _program(f"assert _truth(ANSWER) is {reference}")
