"""Answer forms graded in general: choices, mixed numbers, units, bases, repeating decimals,
degrees in trig functions, sets written as conditions, words differing only in case."""

import ast
from pathlib import Path

import pytest

from agentic_jax.reward import grade_answer
from agentic_jax.reward.forms import Choice, Numeral, choice, numeral
from agentic_jax.reward.notation import mixed_numbers, repeating_decimals

EQUAL = [
    (r"\textbf{(C) }12", "C"),
    (r"\textbf{(C) }12", "12"),
    ("(B)", r"\mathrm{(B)}\ 10"),
    (r"2\frac{1}{2}", r"\frac52"),
    (r"-1\frac{1}{3}", r"-\frac{4}{3}"),
    (r"12\,\text{cm}^2", "12"),
    (r"9.8 \mathrm{~m}/\mathrm{s}^{2}", "9.8"),
    (r"6.6 \times 10^{-34} \mathrm{~J} \cdot \mathrm{s}", "6.6e-34"),
    (r"1.5\,\mathrm{~m/s}", "1.5"),
    ("1011_2", "1011"),
    ("11_{10}", "1011_2"),
    (r"0.\overline{3}", r"\frac13"),
    (r"0.1\overline{6}", r"\frac16"),
    (r"\sin 60^\circ", r"\frac{\sqrt3}{2}"),
    (r"\tan^2 60^\circ", "3"),
    (r"\{x \mid x > 2\}", r"(2, \infty)"),
    (r"\{x \in \mathbb{R} : x \ne 1\}", r"(-\infty,1)\cup(1,\infty)"),
    (r"\mathbb{R}\setminus\{-1, 1\}", r"(-\infty,-1)\cup(-1,1)\cup(1,\infty)"),
    (r"[0,\infty)\setminus\{0\}", r"(0,\infty)"),
    ("x \\neq 0", r"(-\infty,0)\cup(0,\infty)"),
    ("|x| > 3", r"(-\infty,-3)\cup(3,\infty)"),
    ("|x| \\le 2", "[-2, 2]"),
    (r"\text{all real numbers}", r"\mathbb{R}"),
    ("devon", r"\text{Devon}"),
    (r"\approx 3.14", "3.14"),
    (r"\qquad\textbf{(D) } 17", "17"),
]
NOT_EQUAL = [
    (r"\textbf{(C) }12", "B"),
    (r"\textbf{(C) }12", "13"),
    (r"\textbf{(C)}", "12"),
    ("C", "12"),
    (r"2\frac{1}{2}", "1"),
    (r"2\frac12", "1"),
    (r"12\,\text{cm}^2", "144"),
    (r"9.8 \mathrm{~m}/\mathrm{s}^{2}", "9.6"),
    ("1101_2", "1011"),
    ("110_2", "6"),
    (r"0.\overline{3}", "0.3"),
    (r"\sin 60^\circ", r"\frac12"),
    (r"\{x \mid x > 2\}", r"[2, \infty)"),
    (r"\mathbb{R}\setminus\{0\}", r"(-\infty,0)\cup[0,\infty)"),
    ("|x| > 3", r"(-3, 3)"),
    (r"\text{all real numbers}", r"(0, \infty)"),
    ("Monday", r"\text{Tuesday}"),
]


@pytest.mark.parametrize("a,b", EQUAL)
def test_equal(a, b):
    assert grade_answer(a, b) and grade_answer(b, a)


@pytest.mark.parametrize("a,b", NOT_EQUAL)
def test_not_equal(a, b):
    assert not grade_answer(a, b) and not grade_answer(b, a)


def test_readers():
    assert choice("(C) 12") == Choice("C", "12") and choice("(x)") is None
    assert numeral("00A3_{16}") == Numeral("A3", 16) and numeral("x_2") is None
    assert numeral("12_2") is None  # "2" is not a binary digit
    assert mixed_numbers(r"2\frac{3}{2}") == r"2\frac{3}{2}"  # improper: a product
    assert mixed_numbers(r"x^2\frac{1}{2}") == r"x^2\frac{1}{2}"
    assert repeating_decimals(r"1.\overline{27}") == "(126/99)"


def test_words_differing_only_in_case_are_equal_but_products_keep_their_algebra():
    assert grade_answer("TUESDAY", "Tuesday")
    assert grade_answer("abc", "cba")  # a product of three symbols
    assert not grade_answer("x", "X")


def test_command_handlers_do_not_import_the_parser():
    path = Path(__file__).parents[2] / "agentic_jax" / "reward" / "commands.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.endswith("parser") for m in imported)
