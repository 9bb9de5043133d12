"""``grade_answer``: mathematical equivalence of a predicted and a reference answer.

Safe on any text from any thread: answers are normalised, parsed by our own parser into SymPy
objects built through guarded constructors (never eval/exec or sympify), and compared under a
deadline. Anything outside the supported subset is compared as normalised text.
"""

from __future__ import annotations

import re
import time

from agentic_jax.reward import forms
from agentic_jax.reward.compare import equivalent
from agentic_jax.reward.normalize import as_bool, compact, normalize
from agentic_jax.reward.parser import parse_answer
from agentic_jax.reward.values import Bool, Seq, Text, Value

TIME_BUDGET_S = 0.5  # for the comparison itself; parsing is bounded by the input limits
_PLUS_MINUS = re.compile(r"\\pm(?![A-Za-z])|\\mp(?![A-Za-z])")


def _sign_variants(text: str) -> list[str]:
    """ "1 \\pm \\sqrt{2}" -> ["1 + \\sqrt{2}", "1 - \\sqrt{2}"] (upper signs, then lower)."""
    if not _PLUS_MINUS.search(text):
        return [text]
    upper = _PLUS_MINUS.sub(lambda m: "+" if m.group() == "\\pm" else "-", text)
    lower = _PLUS_MINUS.sub(lambda m: "-" if m.group() == "\\pm" else "+", text)
    return [upper, lower]


def interpret(text: str) -> Value:
    """The parsed form of a normalised answer: yes/no, a math value, or Text as a fallback."""
    flag = as_bool(text)
    if flag is not None:
        return Bool(flag)
    try:
        values = [parse_answer(variant) for variant in _sign_variants(text)]
    except Exception:  # noqa: BLE001 - any failure to build a value means "not math": fall back
        return Text(compact(text).lower())
    if len(values) == 1:
        return values[0]
    items: list[Value] = []
    for value in values:
        is_bare_list = isinstance(value, Seq) and value.open == ""
        items.extend(value.items if is_bare_list else [value])
    return Seq(tuple(items), "", "")


def grade_answer(predicted: str | None, reference: str) -> bool:
    """Whether ``predicted`` is mathematically equivalent to ``reference``.

    Integers, decimals (relative tolerance 1e-6), fractions, LaTeX expressions, symbolic
    equality, equations ("x=3" vs "3"), root sets (unordered) and tuples (ordered), intervals
    (open/closed ends respected), matrices, complex numbers, percentages, degrees, units and
    ``\\text{}`` (with exponents and slashes, ``9.8 \\mathrm{~m}/\\mathrm{s}^{2}``),
    factorials and binomials, yes/no, multiple-choice letters with or without their values
    (``\\textbf{(C) }12`` is "C" and "12"), mixed numbers (``2\\frac{1}{2}`` = 5/2), repeating
    decimals, numerals with a base subscript (``1011_2``), degrees inside trig functions,
    set-builder sets, "all real numbers" and ``\\setminus``, words equal but for case. A
    missing prediction (None) is wrong.
    """
    if predicted is None or reference is None:
        return False
    pred_text, ref_text = normalize(predicted), normalize(reference)
    if pred_text is None or ref_text is None:
        return compact(predicted) == compact(reference)
    if compact(pred_text) == compact(ref_text):
        return True
    verdict = forms.compare_forms(pred_text, ref_text, grade_answer)
    if verdict is not None:
        return verdict
    deadline = time.monotonic() + TIME_BUDGET_S
    try:
        return equivalent(interpret(pred_text), interpret(ref_text), deadline)
    except Exception:  # noqa: BLE001 - a grading failure on hostile text is a wrong answer
        return False
