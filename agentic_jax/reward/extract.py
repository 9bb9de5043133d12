"""Final-answer extraction from a model response: the last ``\\boxed{...}`` (or ``\\fbox``),
else the last answer line: "The answer is ...", "Final answer: ...", "The answer is: ...",
Minerva's "Final Answer: The final answer is $5$. I hope it is correct." or GSM8K's "#### 72",
else a last line "A: 26" (GSM8K few-shot transcripts). Prose after "the answer is" with no
number or math in it ("the answer is obtained in the same way") is not an answer.

Every step is linear in the response length: the patterns below have no nested or adjacent
unbounded quantifiers that could backtrack over a long run of spaces, and lines are scanned
from the end with ``str.rfind``.
"""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# What follows the word "answer" on an answer line; possessive runs never backtrack.
_AFTER_ANSWER = re.compile(r"[\s*]*+(?:is\b[\s*]*+:?|:|=)[\s*]*+(?P<answer>.+)", re.IGNORECASE)
_HASHES = "####"
_MAX_BOXED_TRIES = 4  # later boxes first; bounded so thousands of "\boxed{" stay linear
_MAX_ANSWER_WORDS_PER_LINE = 16  # "answer" occurrences tried per line, from the last
_MAX_ANSWER_LINES = 256  # answer lines tried, from the last: the final answer ends a response
# Prose that ends the answer on an answer line: a new sentence, or a clause after the value.
# Each alternative starts at one character of a run (the punctuation, or the run's first space),
# so a search stays linear on long runs of spaces.
_SENTENCE_END = re.compile(
    r"[.!?](?:\s++|$)(?=[A-Z(\"']|$)|(?<!\s)\s++\(|(?:[,;]\s*+|(?<![\s,;])\s++)"
    r"(?:because|since|as|so|which|where|and (?:we|this|that)|is the|are the|for|to|in total|"
    r"I hope)\b")
# A math span; "\\$" inside it is an escaped dollar sign, not its end.
_MATH_SPAN = re.compile(r"\$\$(?P<a>(?:[^$\\]|\\.)+)\$\$|\$(?P<b>(?:[^$\\]|\\.)+)\$|"
                        r"\\\((?P<c>.+?)\\\)")
_SPAN_JOINER = re.compile(r" ?(?:,|and|or) ?")
_MAX_SPANS = 16
# "$x = 7$ is the answer": the answer written before the phrase.
_ANSWER_PHRASES = ("is the", "is our", "is the final", "is the correct", "is our final")
_BEFORE_CHARS = 300
# Prose after "the answer is" ("... is obtained in the same way"): a phrase with no digit or math
# sign that opens with one of these words, or (not being a list) runs past four words.
_PROSE_OPENERS = re.compile(
    r"(?:obtained|given|found|computed|calculated|determined|derived|shown|written|as|that|this|"
    r"then|below|above|following|similar|same|the same|clear|simple|easy|straightforward|in|to|"
    r"by|from|when|if|because|since|still|now|also|left|unknown)\b", re.IGNORECASE)
_MATH_SIGNS = re.compile(r"[\d$\\=^/+*<>()\[\]{}|_%°-]")
_MAX_WORDS_WITHOUT_MATH = 4
# GSM8K-style few-shot transcripts end with the label and the number alone: "A: 26".
_LABELLED_LAST_LINE = re.compile(r"\s*A\s*:\s*(?P<answer>.{1,80}?)\s*")


def braced_content(text: str, start: int) -> tuple[str, int] | None:
    """The text inside the brace group opening at ``text[start] == "{"`` and the index after the
    closing brace, with nested and escaped (``\\{``) braces handled; None when unbalanced."""
    depth = 0
    pos = start
    while pos < len(text):
        ch = text[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : pos], pos + 1
        pos += 1
    return None


def boxed_argument(text: str, pos: int) -> str | None:
    """The argument of a ``\\boxed`` whose name ends at ``pos``: ``{...}``, or the bare token of
    ``\\boxed 5``."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos < len(text) and text[pos] == "{":
        found = braced_content(text, pos)
        return None if found is None else found[0]
    match = re.match(r"[^\s$]+", text[pos : pos + 200])
    return match.group() if match else None


def clean_answer(answer: str) -> str | None:
    """Strips math delimiters, markdown emphasis and a closing period; None when empty."""
    answer = answer.strip().rstrip(" .")
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**")):
        if answer.startswith(left) and answer.endswith(right) and len(answer) >= len(left + right):
            answer = answer[len(left) : len(answer) - len(right)].strip()
    answer = answer.rstrip(" .")
    return answer or None


def _is_prose(answer: str) -> bool:
    """Whether what follows "the answer is" is a sentence rather than a value: no digit or
    math sign, and it opens like a clause or, unless it is a list, runs past
    _MAX_WORDS_WITHOUT_MATH words ("all real numbers", "yes", "(C)", "x" stay answers)."""
    if _MATH_SIGNS.search(answer):
        return False
    return (_PROSE_OPENERS.match(answer) is not None
            or "," not in answer and len(answer.split()) > _MAX_WORDS_WITHOUT_MATH)


def _labelled_last_line(text: str) -> str | None:
    """The value of a final "A: 26" line: the last non-empty line, a number or math in at most
    three words."""
    last = text.rstrip().rsplit("\n", 1)[-1]
    match = _LABELLED_LAST_LINE.fullmatch(last)
    if match is None:
        return None
    answer = _answer_phrase(match.group("answer"))
    if answer is None or not re.search(r"[\d\\$]", answer) or len(answer.split()) > 3:
        return None  # a worked solution after "A:", not its value
    return answer


def _answer_phrase(tail: str) -> str | None:
    """The answer at the start of an answer line's ``tail``: a leading ``$...$`` (or ``\\(...\\)``)
    span when there is one, else the text up to the prose that follows it."""
    tail = tail.strip().lstrip("*").strip()
    nested = re.match(r"(?:the\s+)?(?:final\s+)?answer\s+is\b:?", tail, re.IGNORECASE)
    if nested:  # Minerva: "Final Answer: The final answer is $5$. I hope it is correct."
        tail = tail[nested.end():].strip()
    spans = _leading_spans(tail)
    if spans:
        return clean_answer(", ".join(spans))
    end = _SENTENCE_END.search(tail)
    # Markdown emphasis around the answer ("**5**.") goes with the cut prose.
    return clean_answer((tail if end is None else tail[: end.start()]).strip().strip("*"))


def _leading_spans(tail: str) -> list[str]:
    """The math spans at the start of ``tail`` joined by commas, "and" or "or" ("$x=2$ or
    $x=3$" -> ["x=2", "x=3"])."""
    spans: list[str] = []
    pos = 0
    while len(spans) < _MAX_SPANS:
        math = _MATH_SPAN.match(tail, pos)
        if math is None:
            break
        spans.append(next(g for g in math.groups() if g is not None))
        joiner = _SPAN_JOINER.match(tail, math.end())
        if joiner is None:
            break
        pos = joiner.end()
    return spans


_POINTING_WORDS = frozenset({"this", "that", "it", "which", "what", "here", "there", "these",
                             "those", "mine", "so"})


def _answer_before(line: str, pos: int) -> str | None:
    """The answer of "... $x = 7$ is the answer" whose "answer" starts at ``pos``."""
    before = line[max(0, pos - _BEFORE_CHARS) : pos].rstrip()
    phrase = next((p for p in _ANSWER_PHRASES[::-1] if before.lower().endswith(" " + p)), None)
    if phrase is None:
        return None
    before = before[: -len(phrase)].rstrip()
    if before.endswith("$"):
        opening = before.rfind("$", 0, len(before) - 1)
        return clean_answer(before[opening:]) if opening >= 0 else None
    words = before.rsplit(None, 1)
    # "This is the final answer." points at an answer elsewhere; it is not one.
    if not words:
        return None
    word = words[-1].strip("*_\"'()[],.:;")
    if word.lower() in _POINTING_WORDS or not word:
        return None
    if word.isalpha() and len(word) > 1 and len(before.split()) > 1 and \
            before.split()[-2].strip("*_\"'(").lower() in _POINTING_WORDS:
        return None  # "This number is the final answer."
    return clean_answer(words[-1].strip("*_\"'()[]"))


def _line_answer(line: str, lowered: str) -> str | None:
    """The answer stated on one line ("... answer is X", "#### X"), or None; ``lowered`` is the
    line in lower case."""
    if line.lstrip().startswith(_HASHES):
        return clean_answer(line.lstrip()[len(_HASHES):].strip().lstrip("$"))
    end = len(lowered)
    for _ in range(_MAX_ANSWER_WORDS_PER_LINE):
        pos = lowered.rfind("answer", 0, end)
        if pos < 0:
            return None
        found = _AFTER_ANSWER.match(line, pos + len("answer"))
        answer = _answer_phrase(found.group("answer")) if found else _answer_before(line, pos)
        # "Final answer: ..." states its answer whatever it says; "the answer is ..." may not.
        stated_by_is = found is not None and "is" in lowered[found.start():found.start("answer")]
        if answer is not None and not (stated_by_is and _is_prose(answer)):
            return answer
        end = pos
    return None


def extract_answer(response_text: str) -> str | None:
    """The final answer of ``response_text``: the last ``\\boxed{...}`` (nested braces,
    ``\\boxed 5``, ``\\fbox``), else the last answer line ("The answer is X", "Final answer:
    X", "The answer is: X", "#### X"), trailing prose removed, else a last line "A: X";
    None when there is none."""
    matches = list(_BOXED.finditer(response_text))
    for match in reversed(matches[-_MAX_BOXED_TRIES:]):
        content = boxed_argument(response_text, match.end())
        if content is not None:
            return clean_answer(content)
    lowered = response_text.lower()
    # Only lines holding "answer" or "####" are visited, from the last one up; each needle keeps
    # its own cursor so the text is scanned once.
    word = lowered.rfind("answer")
    hashes = response_text.rfind(_HASHES)
    for _ in range(_MAX_ANSWER_LINES):
        if max(word, hashes) < 0:
            break
        hit = max(word, hashes)
        start = response_text.rfind("\n", 0, hit) + 1
        stop = response_text.find("\n", hit)
        stop = len(response_text) if stop < 0 else stop
        answer = _line_answer(response_text[start:stop], lowered[start:stop])
        if answer is not None:
            return answer
        if word >= start:
            word = lowered.rfind("answer", 0, start)
        if hashes >= start:
            hashes = response_text.rfind(_HASHES, 0, start)
    return _labelled_last_line(response_text)
