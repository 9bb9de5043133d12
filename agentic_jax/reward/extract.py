"""Final-answer extraction from a model response: the last ``\\boxed{...}`` (or ``\\fbox``),
else the last "answer is ..." / "Final answer: ..." line."""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Anchored with a greedy ".*" so the last "answer is" of a line wins in one linear pass.
_ANSWER_LINE = re.compile(r".*answer\s*\**\s*(?:is\b|:|=)\s*\**\s*(?P<answer>.+)", re.IGNORECASE)
_MAX_BOXED_TRIES = 4  # later boxes first; bounded so thousands of "\boxed{" stay linear


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


def extract_answer(response_text: str) -> str | None:
    """The final answer of ``response_text``: the last ``\\boxed{...}`` (nested braces,
    ``\\boxed 5``, ``\\fbox``), else the last "answer is ..." / "Final answer: ..." line; None
    when there is none."""
    matches = list(_BOXED.finditer(response_text))
    for match in reversed(matches[-_MAX_BOXED_TRIES:]):
        content = boxed_argument(response_text, match.end())
        if content is not None:
            return clean_answer(content)
    for line in reversed(response_text.splitlines()):
        found = _ANSWER_LINE.match(line)
        if found is not None:
            answer = clean_answer(found.group("answer"))
            if answer is not None:
                return answer
    return None
