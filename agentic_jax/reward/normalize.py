"""Text clean-up of an answer before parsing: math delimiters, ``\\text{}``, units, spacing
commands, degree and percent signs, thousands separators, unicode math symbols."""

from __future__ import annotations

import re

from agentic_jax.reward import notation
from agentic_jax.reward.extract import boxed_argument, braced_content, clean_answer
from agentic_jax.reward.lexer import word_set

MAX_ANSWER_CHARS = 1000  # longer answers are never parsed (only compared verbatim)

_UNICODE = {
    "−": "-",
    "–": "-",
    "×": "\\times ",
    "·": "\\cdot ",
    "÷": "/",
    "π": "\\pi ",
    "∞": "\\infty ",
    "√": "\\sqrt ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "≠": "\\ne ",
    "∪": "\\cup ",
    "∈": "\\in ",
    "±": "\\pm ",
    "∓": "\\mp ",
    "∅": "\\emptyset ",
    "ℝ": "\\mathbb{R}",
    "⁰": "^0",
    "¹": "^1",
    "²": "^2",
    "³": "^3",
    "\u00a0": " ",
    "\u2009": " ",
    "º": "°",
}
_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|textit|textrm|mbox|mathrm|operatorname\*?)\s*(?=\{)")
CONNECTORS = frozenset({"and", "or"})
BOOL_WORDS = {"yes": True, "no": False, "true": True, "false": False}
UNITS = word_set(
    "cm mm km meter meters metre metres centimeter centimeters millimeter millimeters kilometer "
    "kilometers inch inches ft foot feet yard yards mile miles mph kg kilogram kilograms gram "
    "grams mg lb lbs pound pounds ounce ounces oz second seconds sec secs minute minutes mins "
    "hour hours hr hrs day days week weeks month months year years liter liters litre litres ml "
    "dollar dollars cent cents unit units sq square cubic radian radians rad deg"
)
_MATH_WORDS = word_set(
    "sin cos tan cot sec csc sinh cosh tanh arcsin arccos arctan asin acos atan log ln exp sqrt "
    "abs pi oo inf infty infinity binomial factorial floor ceil ceiling gamma Matrix FiniteSet"
)
_COUNTED_NOUN = re.compile(r"(-?[\d.,]*\d)\s+([A-Za-z]{3,}(?:\s+[A-Za-z]+)*)")
_BOXED_PREFIX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Spacing and "approximately" at either end carry no value: "\\qquad\\textbf{(D) } 17",
# "\\approx 3.14".
_LEADING_NOISE = ("\\qquad", "\\quad", "\\approx", "\\sim", "≈")
_TRAILING_NOISE = ("\\qquad", "\\quad")
_WORD = re.compile(r"(?<![\\A-Za-z])([A-Za-z]{2,})(?:\^\{?[23]\}?)?(?![A-Za-z])")


def _unwrap_text_commands(text: str) -> str:
    """Replaces ``\\text{...}``-like commands by their words: connectors ("and", "or") become
    commas, a lone text answer (``\\text{yes}``) is kept, units ("cm", "~m/s") become
    ``notation.UNIT`` markers (dropped later with their exponents), other words are dropped as
    prose. ``\\mathrm{e}`` and other one-letter roman symbols stay math."""
    pieces: list[tuple[str, bool]] = []  # (fragment, came from a text command)
    pos = 0
    for match in _TEXT_COMMANDS.finditer(text):
        if match.start() < pos:
            continue
        found = braced_content(text, match.end())
        if found is None:
            break
        pieces.append((text[pos : match.start()], False))
        content, pos = found
        pieces.append((content, True))
    pieces.append((text[pos:], False))
    has_math = any(not is_text and frag.strip() for frag, is_text in pieces)
    out: list[str] = []
    for fragment, is_text in pieces:
        word = fragment.strip().lower()
        after_math = any(piece.strip() for piece in out)
        if not is_text or not has_math:
            out.append(f" {fragment} " if is_text else fragment)
        elif word in CONNECTORS:
            out.append(",")
        elif notation.is_unit(fragment, after_math=after_math):
            out.append(f" {notation.UNIT} ")
        elif len(word) > 1 and word.replace(" ", "").isalpha():
            out.append(" ")
        else:
            out.append(f" {fragment} ")
    return notation.drop_units("".join(out))


def _strip_words(text: str) -> str:
    """Drops unit words and turns "and"/"or" between items into commas; other words stay."""

    def replace(match: re.Match) -> str:
        word = match.group(1)
        if word.lower() in CONNECTORS:
            return ","
        if word.lower() in UNITS and word not in _MATH_WORDS:
            return " "
        return match.group(0)

    return _WORD.sub(replace, text)


def _strip_edge_noise(text: str) -> str:
    """Drops _LEADING_NOISE / _TRAILING_NOISE words at the ends (not "\\approximately")."""
    changed = True
    while changed:
        text, changed = text.strip(), False
        for word in _LEADING_NOISE:
            rest = text[len(word):]
            if text.startswith(word) and not rest[:1].isalpha():
                text, changed = rest, True
        for word in _TRAILING_NOISE:
            if text.endswith(word):
                text, changed = text[: -len(word)], True
    return text


def _strip_delimiters(text: str) -> str:
    boxed = _BOXED_PREFIX.match(text)
    if boxed:
        inner = boxed_argument(text, boxed.end())
        text = inner if inner is not None else text
    return clean_answer(text) or ""


def normalize(answer: str) -> str | None:
    """Cleaned answer text ready for the parser; None when it is longer than MAX_ANSWER_CHARS."""
    if len(answer) > MAX_ANSWER_CHARS:
        return None
    text = _strip_edge_noise(_strip_delimiters(answer.strip()))
    for symbol, latex in _UNICODE.items():
        text = text.replace(symbol, latex)
    text = notation.repeating_decimals(notation.mixed_numbers(text))
    text = notation.all_reals(_unwrap_text_commands(text))
    text = re.sub(r"(?<!\\)\\[,;:! ]|~", " ", text)
    text = text.replace("{,}", "").replace("\\%", "%").replace("\\$", "").replace("$", "")
    text = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°", "°", text)
    text = re.sub(r"(?<![A-Za-z\\])degrees?(?![A-Za-z])", "°", text)
    text = re.sub(r"(?<![A-Za-z\\])percent(?![A-Za-z])", "%", text)
    text = _strip_words(text)
    counted = _COUNTED_NOUN.fullmatch(text.strip())
    if counted and not _MATH_WORDS.intersection(counted.group(2).split()):
        text = counted.group(1)  # "12 students" -> 12
    text = text.strip().rstrip(".;:").strip()
    compact = text.replace(" ", "")
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", compact) or re.fullmatch(
        r"-?\d{1,3}(?: \d{3})+(?:\.\d+)?", text
    ):
        text = compact.replace(",", "")
    return text


def compact(text: str) -> str:
    """Whitespace-free form used for the verbatim fast path."""
    return "".join(text.split())


def as_bool(text: str) -> bool | None:
    """True/False for answers such as "yes", "No.", "True", "Yes, because ..."; else None."""
    match = re.fullmatch(r"\s*([A-Za-z]+)\s*(?:[,.;:!](?s:.*))?", text)
    if match is None:
        return None
    return BOOL_WORDS.get(match.group(1).lower())
