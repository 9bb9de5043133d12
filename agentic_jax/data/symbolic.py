"""Exact polynomial arithmetic and sympy-style printing without sympy.

The curriculum builds answers by construction (roots first, then the polynomial), so the
generator never needs a computer-algebra call per problem. Strings follow sympy's `str` printer
("3*x**2/4 - x + 1", "1 - x") so that a reference solution usually prints exactly `answer`.
A polynomial is a dict {degree: Fraction}.
"""

from __future__ import annotations

from fractions import Fraction

Poly = dict[int, Fraction]
# First lines of a reference solution that works with sympy in x.
SYMPY_X = "from sympy import *\nx = symbols('x')\n"


def num(value: Fraction | int) -> str:
    """Formats an exact number as sympy prints it: "-3", "7/4"."""
    return str(value) if isinstance(value, int) else str(Fraction(value))


def power(var: str, degree: int) -> str:
    """The monomial var**degree as a string ("" for degree 0)."""
    if degree == 0:
        return ""
    return var if degree == 1 else f"{var}**{degree}"


def term(coef: Fraction | int, monomial: str) -> str:
    """A signed product coef*monomial in sympy style: "x**2", "-x", "3*x**2/4"."""
    if not monomial:
        return num(coef)
    sign = "-" if coef < 0 else ""
    top, bottom = abs(coef.numerator), coef.denominator  # ints have these too
    head = monomial if top == 1 else f"{top}*{monomial}"
    return sign + head + ("" if bottom == 1 else f"/{bottom}")


def join_terms(terms: list[str]) -> str:
    """Joins signed terms into a sum: ["x", "-2"] -> "x - 2".

    sympy prints a two-term sum with a negative first term the other way round ("1 - x"),
    which is mirrored here.
    """
    terms = [t for t in terms if t != "0"]
    if not terms:
        return "0"
    if len(terms) == 2 and terms[0].startswith("-") and not terms[1].startswith("-"):
        terms = [terms[1], terms[0]]
    out = terms[0]
    for t in terms[1:]:
        out += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
    return out


def poly_str(poly: Poly, var: str = "x") -> str:
    """Prints a polynomial in descending degree, e.g. "2*x**3 - x + 5"."""
    degrees = sorted((d for d, c in poly.items() if c != 0), reverse=True)
    return join_terms([term(poly[d], power(var, d)) for d in degrees])


def poly_from_coeffs(coeffs: list[int | Fraction]) -> Poly:
    """[c0, c1, ...] (ascending degree) -> Poly, dropping zero coefficients."""
    return {d: Fraction(c) for d, c in enumerate(coeffs) if c != 0}


def poly_mul(a: Poly, b: Poly) -> Poly:
    """The product of two polynomials."""
    out: Poly = {}
    for da, ca in a.items():
        for db, cb in b.items():
            out[da + db] = out.get(da + db, Fraction(0)) + ca * cb
    return {d: c for d, c in out.items() if c != 0}


def poly_eval(poly: Poly, x: Fraction | int) -> Fraction:
    """The value of the polynomial at x (exact)."""
    return sum((c * Fraction(x) ** d for d, c in poly.items()), Fraction(0))


def poly_diff(poly: Poly) -> Poly:
    """The derivative."""
    return {d - 1: c * d for d, c in poly.items() if d > 0}


def poly_integrate(poly: Poly) -> Poly:
    """The antiderivative with zero constant."""
    return {d + 1: c / (d + 1) for d, c in poly.items()}


def linear_factor(a: int, b: int, var: str = "x") -> str:
    """The factor a*var + b as sympy prints it inside a product: "x - 3", "2*x + 1"."""
    return join_terms([term(a, var), num(b)])
