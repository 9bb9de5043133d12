"""Hostile answers: every grade_answer call returns (False) within 1 s, also from many threads."""

import concurrent.futures
import time

import pytest

from agentic_jax.reward import extract_answer, grade_answer
from agentic_jax.reward.parser import parse_answer
from agentic_jax.reward.values import Scalar

HOSTILE = [
    "10**10**10",
    r"9^{9^{9^9}}",
    "9**9**9**9",
    "1" * 100_000,
    "{" * 5000 + "1" + "}" * 5000,
    "(" * 5000 + ")" * 5000,
    r"\boxed{" * 5000,
    "2^{2^{2^{2^{2^{2}}}}}",
    "10^{10^{10}} + 1",
    "(10!)!",
    "100000!",
    r"\frac{1}{0}",
    "0^0",
    "0/0",
    "x^{10^{10}}",
    "(x+1)^{10^{10}}",
    r"\sqrt{2}^{10^{10}}",
    "e^{10^{10}}",
    r"\sin(10^{1000})",
    "1e99999999",
    "2^{-10^{10}}",
    "1/" + "9" * 999,
    r"\binom{10^9}{5*10^8}",
    "-" * 999 + "1",
    "x^" * 300 + "x",
    "((x+1)^{100}+(x+2)^{100})^{100}",
    r"\begin{pmatrix}" + "1&" * 300 + r"1\end{pmatrix}",
    "2^{99999}*3^{99999}*5^{99999}*7^{99999}*11^{99999}*13^{99999}",
    "sqrt(2)^(sqrt(2)^(sqrt(2)^sqrt(2)))",
    "1+" * 300 + "1",
    "a" * 999,
    r"\left(" * 400 + "1",
    "gamma(10^10)",
    r"\sqrt{" + "9" * 999 + "}",
    "(" + "9" * 999 + ")^{1/3}",
    r"\tan(\pi/2)",
    "exp(exp(exp(exp(10))))",
    "[" * 3000,
    r"\frac{" * 2000,
    "x = " * 300,
    "|" * 999,
    "\x00\x01 \\",
    "\\" * 1000,
    "é" * 500,
    r"\begin{pmatrix}1\\",
    "(A)" * 333,
    "(A) " * 250 + "5",
    r"2\frac12" * 100,
    r"0." + r"\overline{3}" * 100,
    r"\{x|" * 200,
    "|x|>" * 200 + "1",
    r"\mathbb{R}\setminus\{" + ",".join(str(i) for i in range(150)) + r"\}",
    r"\mathrm{~m}/" * 100,
    "1_2" * 300,
]
REFERENCES = ["1", "10**10**10", r"9^{9^{9^9}}", "x", "2^{10^6}+1", "[1, 2)"]
# CPU seconds of the calling thread: the bound is on the work a grade does, which wall-clock
# time on a loaded 2-core machine (other test processes, threads sharing the GIL) does not show.
TIME_LIMIT_S = 1.0


def _grade_all(pairs):
    worst = 0.0
    results = []
    for predicted, reference in pairs:
        start = time.thread_time()
        results.append(grade_answer(predicted, reference))
        worst = max(worst, time.thread_time() - start)
    return worst, results


def test_hostile_inputs_from_several_threads_are_bounded():
    pairs = [(h, r) for h in HOSTILE for r in REFERENCES] + [
        (r, h) for h in HOSTILE for r in REFERENCES
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(_grade_all, [pairs[i::4] for i in range(4)]))
    worst = max(w for w, _ in outcomes)
    assert worst < TIME_LIMIT_S, f"slowest grade_answer call took {worst:.2f} s"
    # Only the towers themselves (in either notation) and 0^0 = 1 match a reference.
    matched = {
        p
        for (_, res), chunk in zip(outcomes, [pairs[i::4] for i in range(4)])
        for p, ok in zip(chunk, res)
        if ok
    }
    towers = {"10**10**10", r"9^{9^{9^9}}", "9**9**9**9"}
    assert {frozenset(p) for p in matched} <= {
        frozenset({"0^0", "1"}),
        frozenset({r"9^{9^{9^9}}", "9**9**9**9"}),
    } | {frozenset({t}) for t in towers}


def test_huge_power_is_kept_unevaluated():
    value = parse_answer(r"9^{9^{9^9}}")
    assert isinstance(value, Scalar) and value.node.deferred
    assert grade_answer(r"9^{9^{9^9}}", "9**9**9**9")
    assert not grade_answer(r"9^{9^{9^9}}", r"9^{9^{9^9}} + 1")


@pytest.mark.parametrize("text", ["gamma(240001/2)", "gamma(-240001/2)", "gamma(10^5 + 1/2)",
                                  r"\binom{10^{100}/3}{3000}", r"\binom{2^{-200}}{4000}"])
def test_factorial_like_functions_of_large_rationals_are_deferred(text):
    """gamma of a half-integer and binomial(x, k) of a rational x expand into products whose
    cost grows with the square of the argument (gamma(240001/2) took 4.6 s in one C call, a
    10^6 argument minutes); they stay unevaluated like large integer factorials."""
    start = time.thread_time()
    value = parse_answer(text)
    assert isinstance(value, Scalar) and value.node.deferred
    assert not grade_answer(text, "1") and grade_answer(text, text)
    assert time.thread_time() - start < TIME_LIMIT_S


def test_small_factorial_like_values_still_evaluate():
    assert grade_answer("gamma(7/2)", r"\frac{15\sqrt{\pi}}{8}")
    assert grade_answer(r"\binom{5/2}{2}", "15/8") and grade_answer("gamma(5)", "24")


def test_identical_overlong_answers_match_verbatim():
    long_answer = "1" * 100_000
    assert grade_answer(long_answer, long_answer)
    assert not grade_answer(long_answer, "1")


MEGABYTE = 1 << 20


@pytest.mark.parametrize(
    "text",
    [
        r"\boxed{" * 5000,
        "{" * 5000 + "}" * 5000,
        "a" * 100_000,
        " " * MEGABYTE,
        "The answer is" + " " * MEGABYTE + "x",
        "answer" + " " * MEGABYTE + "is",
        "answer is 5" + " " * MEGABYTE + ". Then",
        ("answer\n" * MEGABYTE)[:MEGABYTE],
        ("#### \n" * MEGABYTE)[:MEGABYTE],
        ("answer is " + ". " * 100 + "\n") * (MEGABYTE // 211),
        ("answer " * 40 + "\n") * (MEGABYTE // 281),
        "\n" * MEGABYTE,
    ],
)
def test_extract_answer_is_linear_on_hostile_text(text):
    """Inputs up to 1 MB: long runs of spaces once took quadratic time in the answer-line
    pattern (8k spaces: 1.3 s), holding the GIL for every grading thread."""
    start = time.thread_time()
    extract_answer(text)
    assert time.thread_time() - start < TIME_LIMIT_S


def test_grading_uses_no_eval(monkeypatch):
    """Model text never reaches eval/exec or sympify."""
    import builtins

    import sympy

    def forbidden(*args, **kwargs):
        raise AssertionError("model text was evaluated")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(sympy, "sympify", forbidden)
    monkeypatch.setattr(sympy, "parse_expr", forbidden)
    assert grade_answer("__import__('os').system('true')", "0") is False
    assert grade_answer(r"\frac{x^2-1}{x-1}", "x+1")
