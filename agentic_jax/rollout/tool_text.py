"""Text side of the tool loop: finding code blocks in a turn, rendering results as tokens.

The format (defined once in `agentic_jax.data.prompts`): the policy writes a ```python block; the
environment answers with a ```output block holding stdout, or the error as one line with the
taxonomy hint; the final answer is written in \\boxed{}.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from agentic_jax.data.prompts import CODE_CLOSE, CODE_OPEN, format_tool_output

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
TRUNCATION_MARKER = "\n... (output truncated) ...\n"
ERROR_TOKENS_FACTOR = 4
BUDGET_MESSAGE = "Tool budget exhausted: no more code is run. Give the final answer."


# A closing fence is ``` that does not open another block.
_CLOSE = re.compile(re.escape(CODE_CLOSE) + r"(?!python|output)")


def find_closed_code(text: str) -> tuple[str, int] | None:
    """The first closed ```python block in ``text``: (code, index just past the fence) or None.

    The code is taken from the last opening fence before that close, so a block re-opened
    before being closed yields its last part. An opened but unclosed block (still being
    written) is None; an empty block is returned as an empty string. Once a block has closed,
    any longer text reports the same block, which makes prefix searches well defined.
    """
    start = text.find(CODE_OPEN)
    if start < 0:
        return None
    close = _CLOSE.search(text, start + len(CODE_OPEN))
    if close is None:
        return None
    opener = text.rfind(CODE_OPEN, 0, close.start())
    return text[opener + len(CODE_OPEN):close.start()], close.end()


def has_final_answer(text: str) -> bool:
    """True when ``text`` contains a \\boxed{...} whose braces are closed."""
    for m in _BOXED.finditer(text):
        depth = 1
        for ch in text[m.end():]:
            depth += (ch == "{") - (ch == "}")
            if depth == 0:
                return True
    return False


def render_tool_result(result: Any, tokenizer: Any, *, max_tokens: int) -> list[int]:
    """Tokens of the ```output block for one sandbox result.

    Stdout longer than ``max_tokens`` keeps its head and tail around a marker. A failure is its
    one-line taxonomy message (error name, what happened, the hint), kept whole up to
    ``ERROR_TOKENS_FACTOR * max_tokens`` so that the hint survives.
    """
    if result.ok:
        body, budget = result.stdout, max_tokens
    else:
        message = (result.message or "").strip() or str(result.error)
        body = message if message.startswith(str(result.error)) else f"{result.error}: {message}"
        body, budget = body.splitlines()[0], ERROR_TOKENS_FACTOR * max_tokens
    body_tokens = _encode(tokenizer, body.strip("\n"))
    if len(body_tokens) > budget:
        max_tokens = budget
        marker = _encode(tokenizer, TRUNCATION_MARKER)
        keep = max(2, max_tokens - len(marker))
        head = keep // 2
        body = (tokenizer.decode(body_tokens[:head]) + TRUNCATION_MARKER
                + tokenizer.decode(body_tokens[len(body_tokens) - (keep - head):]))
    return _encode(tokenizer, format_tool_output(body, max_chars=len(body)))


def render_message(message: str, tokenizer: Any) -> list[int]:
    """An environment message in an output block (e.g. the exhausted tool budget)."""
    return _encode(tokenizer, format_tool_output(message, max_chars=len(message)))


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def first_prefix_with(tokens: Sequence[int], decode: Callable[[Sequence[int]], str],
                      predicate: Callable[[str], bool]) -> int:
    """The smallest n such that ``predicate(decode(tokens[:n]))`` holds (binary search).

    ``predicate`` must be monotone in n (once true for a prefix, true for longer ones), as
    "a code block has closed" and "a final answer is present" are.
    """
    lo, hi = 0, len(tokens)
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(decode(tokens[:mid])):
            hi = mid
        else:
            lo = mid + 1
    return lo
