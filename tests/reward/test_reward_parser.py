"""The answer parser: structure of parsed values, cost guards and clear errors."""

import pytest
import sympy

from agentic_jax.reward.lexer import ParseError
from agentic_jax.reward.parser import parse_answer
from agentic_jax.reward.values import Matrix, Relation, Scalar, Seq, UnionOf

x = sympy.Symbol("x")


def scalar_expr(text):
    value = parse_answer(text)
    assert isinstance(value, Scalar)
    return value.node


@pytest.mark.parametrize(
    "text,expr",
    [
        (r"\frac{1}{2} + \dfrac{1}{3}", sympy.Rational(5, 6)),
        ("2x^2 - 3x", 2 * x**2 - 3 * x),
        (r"\sin^{-1} x", sympy.asin(x)),
        (r"\sqrt[3]{x}", x ** sympy.Rational(1, 3)),
        ("x(x+1)", x * (x + 1)),
        (r"\log_{2}(x)", sympy.log(x) / sympy.log(2)),
        (r"2\pi r", 2 * sympy.pi * sympy.Symbol("r")),
        ("sinx", sympy.sin(x)),
        ("2^3^2", sympy.Integer(512)),
        ("-x^2", -(x**2)),
        (r"\lfloor 2.5 \rfloor", sympy.Integer(2)),
    ],
)
def test_expressions(text, expr):
    assert scalar_expr(text).expr == expr


def test_decimals_are_exact_but_flagged():
    node = scalar_expr("0.1")
    assert node.expr == sympy.Rational(1, 10) and node.inexact
    assert not scalar_expr("1/10").inexact


@pytest.mark.parametrize(
    "text",
    [
        "10**10**10",
        r"9^{9^{9^9}}",
        "6000!",
        r"\binom{10^9}{3}",
        "gamma(10^9)",
        r"\sqrt{2}^{5000}",
        "1e999999",
    ],
)
def test_costly_values_are_deferred(text):
    assert scalar_expr(text).deferred


@pytest.mark.parametrize("text", ["2^{1000}", "2004!", r"\binom{100}{50}", "1e30"])
def test_moderate_values_are_evaluated(text):
    node = scalar_expr(text)
    assert not node.deferred and node.expr.is_Integer


def test_structures():
    assert parse_answer("[1, 2)") == Seq(tuple(parse_answer(t) for t in ("1", "2")), "[", ")")
    assert parse_answer(r"x \ge 2").close == ")" and parse_answer(r"x \ge 2").open == "["
    assert isinstance(parse_answer("x + y = 1"), Relation)
    assert isinstance(parse_answer(r"(0, 1) \cup (2, 3)"), UnionOf)
    assert isinstance(parse_answer(r"\begin{array}{cc}1 & 2\\3 & 4\end{array}"), Matrix)
    assert parse_answer("1, 2, 3").open == ""


@pytest.mark.parametrize(
    "text,message",
    [
        ("(" * 200 + "1" + ")" * 200, "nesting"),
        ("1" * 2000, "longer than"),
        (r"\foo{1}", "unsupported command"),
        ("2 # 3", "unsupported character"),
        ("(1, 2, 3]", "half-open"),
        (r"\begin{pmatrix}1 & 2\\3\end{pmatrix}", "different lengths"),
        ("(1, 2) + 3", "arithmetic"),
        ("unknownfn(", "expected"),
    ],
)
def test_errors_are_one_line_parse_errors(text, message):
    with pytest.raises(ParseError, match=message) as info:
        parse_answer(text)
    assert "\n" not in str(info.value)
