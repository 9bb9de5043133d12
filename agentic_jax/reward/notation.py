"""Textbook notations rewritten into the parser's language before parsing: mixed numbers,
repeating decimals, "all real numbers", and units written in ``\\text{}`` / ``\\mathrm{}``.

All patterns are linear: each repetition is anchored by a literal, and whitespace is collapsed
to single spaces before the unit patterns run.
"""

from __future__ import annotations

import re

# MATH writes 2 1/2 as "2\frac{1}{2}": an integer right before a proper fraction of integers.
# A digit, letter, "^", "_" or closing bracket before it makes it part of something else.
_MIXED = re.compile(r"(?<![\w.^_})\]!])(\d{1,9}) ?\\[dt]?frac ?(?:\{ ?(\d{1,9}) ?\}|(\d))"
                    r" ?(?:\{ ?(\d{1,9}) ?\}|(\d))")
_REPEATING = re.compile(r"(?<![\d.])(\d{0,30})\.(\d{0,30}) ?\\(?:overline|bar) ?\{ ?(\d{1,30}) ?\}")
_ALL_REALS = re.compile(r"(?:[a-z] ?(?:\\in|is|=) ?)?(?:the set of )?(?:all|any|every) real "
                        r"(?:numbers?|values?|x)?(?: of [a-z]| [a-z])?")
UNIT = "\x01"  # stands for a dropped unit word until its exponents and joiners are removed
# One-letter units: "5\mathrm{m}" is five metres, but "\mathrm{e}", "\mathrm{i}", "\mathrm{d}"
# stay math.
UNIT_LETTERS = frozenset("msgKNJWVALTh")
_SPACING = re.compile(r"^(?:~|\\[,;: ]| )+")
_UNIT_POWER = r"(?: ?\^ ?(?:\{ ?-? ?\d{1,3} ?\}|-?\d))?"
_UNIT_BODY = re.compile(rf"[A-Za-zµμΩ]+{_UNIT_POWER}(?: ?(?:/|\\cdot|\*| ) ?[A-Za-zµμΩ]+"
                        rf"{_UNIT_POWER})*")
_UNIT_RUN = re.compile(rf"(?: ?(?:/|\\cdot|\*)? ?{UNIT}{_UNIT_POWER})+")


def mixed_numbers(text: str) -> str:
    """ "2\\frac{1}{2}" -> "(2+1/2)"; an improper fraction ("2\\frac{3}{2}") stays a product."""

    def replace(match: re.Match) -> str:
        whole = match.group(1)
        numerator = match.group(2) or match.group(3)
        denominator = match.group(4) or match.group(5)
        if not 0 < int(numerator) < int(denominator):
            return match.group(0)
        return f"({whole}+{numerator}/{denominator})"

    return _MIXED.sub(replace, " ".join(text.split()))


def repeating_decimals(text: str) -> str:
    """ "0.1\\overline{6}" -> "(1/6)": I.A(R) repeating is (IAR - IA) / (10^|A| (10^|R| - 1))."""

    def replace(match: re.Match) -> str:
        whole, fixed, period = match.group(1), match.group(2), match.group(3)
        head = int(whole + fixed or "0")
        numerator = int(whole + fixed + period) - head
        denominator = 10 ** len(fixed) * (10 ** len(period) - 1)
        return f"({numerator}/{denominator})"

    return _REPEATING.sub(replace, text)


def all_reals(text: str) -> str:
    """ "all real numbers", "x is any real number" -> "\\mathbb{R}"; other text unchanged."""
    phrase = " ".join(text.lower().replace(".", " ").split())
    return "\\mathbb{R}" if _ALL_REALS.fullmatch(phrase) else text


def is_unit(content: str, *, after_math: bool) -> bool:
    """Whether the content of a ``\\text{}`` / ``\\mathrm{}`` is a unit: "cm", "~m", "m/s",
    "J \\cdot s", "\\,kg"; a bare one-letter content counts only if it is a common unit letter
    and written after some math."""
    content = " ".join(content.split())
    spacing = _SPACING.match(content)
    body = content[spacing.end():] if spacing else content
    if not body or not _UNIT_BODY.fullmatch(body):
        return False
    letters = sum(ch.isalpha() for ch in body)
    return bool(spacing) or letters > 1 or (after_math and body in UNIT_LETTERS)


def drop_units(text: str) -> str:
    """Removes the UNIT markers left for dropped unit words, with their exponents and the
    slashes or dots between them ("12 UNIT^2" -> "12", "9.8 UNIT/UNIT^{2}" -> "9.8")."""
    if UNIT not in text:
        return text
    text = _UNIT_RUN.sub(" ", " ".join(text.split()))
    return text.replace(UNIT, " ")

