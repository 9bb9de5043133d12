"""extract_answer: the last boxed answer, else a final "answer is" line, else None."""

import pytest

from agentic_jax.reward import extract_answer, grade_answer
from agentic_jax.reward.lexer import tokenize

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
    ("48 + 24 = <<48+24=72>>72 clips.\n#### 72", "72"),
    ("So 1,500 in all.\n#### 1,500\n", "1,500"),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
    ("Final Answer: The final answer is 500 \\mathrm{~nm}. I hope it is correct.",
     "500 \\mathrm{~nm}"),
    ("We add them.\nThe answer is: 42", "42"),
    ("The answer is: $\\$15$", "\\$15"),
    ("So the answer is 42 because we add both amounts.", "42"),
    ("The answer is 42, since 6 times 7 is 42.", "42"),
    ("Therefore the answer is 12. This matches the check.", "12"),
    ("Final answer: 15 (since 3 times 5 is 15)", "15"),
    ("Thus the answer is $x=2$ or $x=3$.", "x=2, x=3"),
    ("Therefore, $x = 7$ is the answer.", "x = 7"),
    ("So 42 is the final answer.", "42"),
    ("The answer is 2.5 so the tank is half full.", "2.5"),
    ("The answer is **5**.", "5"),
    ("Q: Tom has 20 apples and buys 6. How many?\nA: 26", "26"),  # GSM8K few-shot transcripts
    ("Q: How many?\nA: $26$\n", "26"),
    ("The answer is 5.\nThe answer is obtained in the same way for b.", "5"),
    ("The answer is all real numbers.", "all real numbers"),
    ("The answer is (C).", "(C)"),
    ("The answer is yes", "yes"),
    ("Final answer: no real solutions exist", "no real solutions exist"),
    ("The answer is Alice, Bob, Carol, Dave and Eve", "Alice, Bob, Carol, Dave and Eve"),
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
        "#### ",
        "Final answer:   ",
        "Then the answer is obtained in the same way.",
        "So the answer is straightforward.",
        "Q: How many?\nA: Natalia sold 48 clips in April and half as many in May.",
        # a small model's GSM8K output: the line points at an answer, it states none
        "So, 25% is calculated as 0.25.\n\nThis is the final answer.",
        "That is the answer.",
        "**This** is the final answer.",
        "(This is the final answer.)",
        "This number is the final answer.",
    ],
)
def test_none_when_absent(text):
    assert extract_answer(text) is None


def test_unbalanced_last_box_falls_back_to_an_earlier_one():
    assert extract_answer(r"\boxed{3} and then \boxed{4") == "3"


def test_digits_spaced_in_math_mode_are_one_number():
    """LaTeX ignores spaces in math mode: ``\\mathbf{1 8}`` is typeset as 18."""
    assert grade_answer(extract_answer(r"so \boxed{\mathbf{1 8}}"), "18")
    assert grade_answer(r"\mathbf{1 8}", "18") and not grade_answer(r"\mathbf{1 8}", "8")
    assert grade_answer("1 8 + 2", "20")
    assert [t.text for t in tokenize("1e5 2")] == ["1e5", "2", ""]  # the exponent is complete
    assert [t.text for t in tokenize("x^2 3")] == ["x", "^", "2", "3", ""]
