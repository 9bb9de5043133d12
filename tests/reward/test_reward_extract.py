"""extract_answer: the last boxed answer, else a final "answer is" line, else None."""

import pytest

from agentic_jax.reward import extract_answer

CASES = [
    (r"so \boxed{5}.", "5"),
    (r"first \boxed{1} then \boxed{2}", "2"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
    (r"$\boxed{x^{2} + \sqrt{y}}$", r"x^{2} + \sqrt{y}"),
    (r"\boxed 5", "5"),
    (r"The result: \fbox{42}", "42"),
    (r"\boxed{\boxed{7}}", "7"),
    ("The answer is 12.", "12"),
    ("Final answer: $x = 3$", "x = 3"),
    ("**Final Answer:** 3/4", "3/4"),
    ("I think the answer is 3.\nSo the final answer is 4", "4"),
    ("The answer is $\\frac{1}{2}$.\nDone.", r"\frac{1}{2}"),
    ("Final answer: 1. Actually the answer is 2", "2"),
    ("```python\nprint(6*7)\n```\n```output\n42\n```\nThe answer is \\boxed{42}.", "42"),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_extracts(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no conclusion here",
        r"\boxed{",
        r"\boxed{}",
        "The answer is",
        "my answer isn't clear",
        "Final answer:   ",
    ],
)
def test_none_when_absent(text):
    assert extract_answer(text) is None


def test_unbalanced_last_box_falls_back_to_an_earlier_one():
    assert extract_answer(r"\boxed{3} and then \boxed{4") == "3"
