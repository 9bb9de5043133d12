"""13-gram decontamination of training sets against evaluation sets."""

from __future__ import annotations

import pytest

from agentic_jax.data.decontaminate import contamination_report, decontaminate, ngrams
from agentic_jax.data.problem import Problem

AIME_Q = ("Let $x,y$ and $z$ be positive real numbers that satisfy the following system of "
          "equations: $\\log_2\\left({x \\over yz}\\right) = {1 \\over 2}$. Find $m+n$.")
MATH_Q = "What is the smallest positive integer $n$ such that $17n \\equiv 1234 \\pmod{7}?$"


def _p(pid, question):
    return Problem(id=pid, stage="external", difficulty=0.0, question=question, answer="1",
                   solution_code="", tests="", direct_solution="", kind="t")


EVALS = {"aime24": [_p("aime24:1", AIME_Q)], "math500": [_p("math500:1", MATH_Q)]}


def test_ngrams_ignore_case_spacing_and_latex_punctuation():
    assert ngrams("A  b, C!", 2) == {("a", "b"), ("b", "c")}
    assert ngrams("Short question?", 13) == {("short", "question")}
    assert ngrams("", 13) == set()
    with pytest.raises(ValueError, match="n-gram size"):
        ngrams("x", 0)


def test_copies_and_rewrapped_copies_are_found_and_dropped():
    train = [
        _p("t:copy", AIME_Q),
        _p("t:reformatted", "Problem 3. " + AIME_Q.upper().replace(" ", "  ") + " (5 points)"),
        _p("t:clean", "Compute the number of ordered pairs of integers (a, b) with a + b = 10 "
                      "and both a and b between one and nine inclusive."),
        _p("t:math", "Warm-up: " + MATH_Q),
        _p("t:short", "What is 2+2?"),
    ]
    report = contamination_report(train, EVALS)
    assert report.contaminated_ids == {"t:copy", "t:reformatted", "t:math"}
    assert report.by_benchmark == {"aime24": 2, "math500": 1}
    assert report.num_train == 5 and report.num_contaminated == 3
    assert {(o.train_id, o.benchmark, o.eval_id) for o in report.examples} == {
        ("t:copy", "aime24", "aime24:1"), ("t:reformatted", "aime24", "aime24:1"),
        ("t:math", "math500", "math500:1")}
    assert len(report.examples[0].shared.split()) == 13
    assert "3 of 5 training problems" in report.summary()
    kept, again = decontaminate(train, EVALS)
    assert [p.id for p in kept] == ["t:clean", "t:short"] and again == report


def test_a_shared_phrase_shorter_than_the_ngram_is_not_contamination():
    train = [_p("t:phrase", "Find $m+n$ where m and n are relatively prime positive integers.")]
    assert contamination_report(train, EVALS).num_contaminated == 0


def test_short_questions_match_only_their_exact_words():
    evals = {"tiny": [_p("e:1", "What is 2+2?")]}
    train = [_p("t:1", "what is 2 + 2"), _p("t:2", "What is 2+3?")]
    assert contamination_report(train, evals).contaminated_ids == {"t:1"}
