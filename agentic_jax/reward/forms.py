"""Answer forms settled before any parsing: multiple-choice answers, numerals with a base
subscript, and answers that are plain words.

Each reader takes a normalised answer (see ``normalize.normalize``) and returns its form, or
None when the answer is not of that form. ``compare_forms`` decides a pair when at least one
side has one of these forms, and returns None to leave the pair to the math comparison.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agentic_jax.reward.lexer import word_set

# "(C)", "(C) 12", "\textbf{(C) }12", "C) 12", "\mathrm{(B)}\ 10" -- after normalisation the
# text commands are gone and "(C)" leads; letters A-J cover AMC (A-E) and ten-choice sets.
_CHOICE = re.compile(r"\(\s*([A-J])\s*\)\s*(?P<value>.*)|([A-J])\)\s+(?P<value2>.+)",
                     re.DOTALL)
_LONE_LETTER = re.compile(r"[A-J]")
_NUMERAL = re.compile(r"([0-9A-Za-z]+)_\{?\(?\s*(\d{1,2})\s*\)?\}?")
_DIGITS = re.compile(r"[0-9A-Za-z]+")
_WORDS = re.compile(r"[A-Za-z][A-Za-z' -]*")
_MATH_NAMES = word_set(
    "sin cos tan cot sec csc sinh cosh tanh arcsin arccos arctan log ln exp sqrt abs pi oo inf "
    "infty binomial factorial floor ceil ceiling gamma yes no true false"
)
MAX_NUMERAL_DIGITS = 64


class Choice(NamedTuple):
    """A multiple-choice answer: its letter (upper case) and the value written after it."""

    letter: str
    value: str


class Numeral(NamedTuple):
    """Digits written in a base, as in ``1011_2``: ``digits`` upper case without leading zeros."""

    digits: str
    base: int


def choice(text: str) -> Choice | None:
    """The choice ``text`` names: "(C)", "(C) 12", "C) 12"; None otherwise."""
    match = _CHOICE.fullmatch(text.strip())
    if match is None:
        return None
    letter = match.group(1) or match.group(3)
    value = match.group("value") if match.group(1) else match.group("value2")
    return Choice(letter, value.strip())


def numeral(text: str) -> Numeral | None:
    """``1011_2``, ``1011_{2}``, ``A3_{16}``: digits valid in a base from 2 to 36."""
    match = _NUMERAL.fullmatch(text.strip())
    if match is None:
        return None
    digits, base = match.group(1).upper().lstrip("0") or "0", int(match.group(2))
    if not 2 <= base <= 36 or len(digits) > MAX_NUMERAL_DIGITS:
        return None
    try:
        int(digits, base)
    except ValueError:
        return None
    return Numeral(digits, base)


def words(text: str) -> str | None:
    """The lower-cased text of an answer made only of words ("Devon", "Tuesday", "north
    east"), at least one of three letters or more and none a math name; else None."""
    text = " ".join(text.split())
    if not _WORDS.fullmatch(text):
        return None
    tokens = re.findall(r"[A-Za-z']+", text)
    if not any(len(t) >= 3 for t in tokens) or any(t.lower() in _MATH_NAMES for t in tokens):
        return None
    return text.lower()


def _numerals_equal(a: Numeral, b_text: str) -> bool | None:
    b = numeral(b_text)
    if b is not None:
        return int(a.digits, a.base) == int(b.digits, b.base)
    digits = b_text.strip().upper()
    if _DIGITS.fullmatch(digits):
        return (digits.lstrip("0") or "0") == a.digits  # the same numeral, base left implied
    return None


def compare_forms(pred: str, ref: str, values_equal) -> bool | None:
    """The verdict for a pair where a side is a choice or a based numeral, or whose words
    match but for case; None otherwise. ``values_equal(a, b)`` grades the values written after letters."""
    pred_choice, ref_choice = choice(pred), choice(ref)
    if pred_choice or ref_choice:
        return _choices_equal(pred_choice, pred, ref_choice, ref, values_equal)
    for a, b in ((pred, ref), (ref, pred)):
        num = numeral(a)
        if num is not None:
            return _numerals_equal(num, b)
    # Words equal but for case are one answer; other word pairs stay with the math comparison,
    # where "abc" and "cba" are one product.
    pred_words = words(pred)
    if pred_words is not None and pred_words == words(ref):
        return True
    return None


def _choices_equal(pred_choice: Choice | None, pred: str, ref_choice: Choice | None, ref: str,
                   values_equal) -> bool | None:
    """Letters decide when both sides have one (a lone "C" counts as a letter); otherwise the
    value written after the letter is graded against the other side."""
    if pred_choice is None:
        pred_choice, pred, ref_choice, ref = ref_choice, ref, pred_choice, pred
    other_letter = ref_choice.letter if ref_choice else (
        ref.strip().upper() if _LONE_LETTER.fullmatch(ref.strip().upper()) else None)
    if other_letter is not None:
        return pred_choice.letter == other_letter
    if not pred_choice.value or choice(pred_choice.value) is not None:
        return False  # no value, or a second letter where the value should be
    return values_equal(pred_choice.value, ref)
