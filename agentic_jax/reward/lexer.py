"""Tokenizer for the LaTeX / plain-text math subset that answers are written in.

Produces a flat token list for the recursive-descent parser. It never evaluates anything; its
only job is to split text into numbers, letter runs, backslash commands and operators.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_NUMBER_DIGITS = 1000  # longer literals are refused (also keeps below Python's int-str limit)


def word_set(words: str) -> frozenset[str]:
    """A frozenset of the whitespace-separated words of ``words`` (keeps word tables short)."""
    return frozenset(words.split())


class ParseError(ValueError):
    """Raised when an answer is not in the supported math subset (or exceeds a safety limit)."""


class Token(NamedTuple):
    """One lexical token: ``kind`` is "num", "name", "cmd", "op" or "end"."""

    kind: str
    text: str


_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_LETTERS = re.compile(r"[A-Za-z]+")
_COMMAND = re.compile(r"\\([A-Za-z]+)")

# Multi-character operators first so "**" is not read as two "*".
_MULTI_OPS = {
    "**": "^",
    "<=": "le",
    ">=": "ge",
    "!=": "ne",
    "==": "=",
    "\\{": "lset",
    "\\}": "rset",
    "\\\\": "rowsep",
    "\\|": "|",
}
_SINGLE_OPS = set("+-*/^_()[]{},=<>!|&'%°:;")
_OP_COMMANDS = {
    "le": "le",
    "leq": "le",
    "leqslant": "le",
    "ge": "ge",
    "geq": "ge",
    "geqslant": "ge",
    "lt": "<",
    "gt": ">",
    "ne": "ne",
    "neq": "ne",
    "cdot": "*",
    "times": "*",
    "ast": "*",
    "div": "/",
    "lvert": "|",
    "rvert": "|",
    "vert": "|",
    "mid": "|",
    "circ": "°",
    "degree": "°",
    "lbrace": "lset",
    "rbrace": "rset",
    "approx": "=",
    "to": "=",
    "quad": ",",
    "qquad": ",",
}
_SIZING_COMMANDS = word_set(
    "left right big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr displaystyle limits"
)


def _continues_number(tokens: list[Token], text: str, number_end: int, pos: int,
                      digits: str) -> bool:
    """Whether the number at ``pos`` continues the number token just before it, only
    whitespace between ("1 8", "1.5 2"; not "1e5 2", whose exponent is complete, nor the
    "3" of "x^2 3", since a bare superscript or subscript takes a single token)."""
    return (bool(tokens) and tokens[-1].kind == "num" and number_end >= 0
            and text[number_end:pos].isspace() and "e" not in tokens[-1].text.lower()
            and not (len(tokens) > 1 and tokens[-2] in (Token("op", "^"), Token("op", "_")))
            and _NUMBER.fullmatch(tokens[-1].text + digits) is not None)


def tokenize(text: str) -> list[Token]:
    """Splits ``text`` into tokens, ending with an ``end`` token; raises ParseError on junk."""
    tokens: list[Token] = []
    pos, n = 0, len(text)
    number_end = -1  # where the last number token ended
    while pos < n:
        ch = text[pos]
        if ch.isspace():
            pos += 1
            continue
        pair = text[pos : pos + 2]
        if pair in _MULTI_OPS:
            tokens.append(Token("op", _MULTI_OPS[pair]))
            pos += 2
            continue
        match = _NUMBER.match(text, pos)
        if match:
            digits = match.group()
            if _continues_number(tokens, text, number_end, pos, digits):
                # Math mode ignores spaces: \mathbf{1 8} is typeset, and meant, as 18.
                digits = tokens.pop().text + digits
            if len(digits) > MAX_NUMBER_DIGITS:
                raise ParseError(f"number literal longer than {MAX_NUMBER_DIGITS} digits")
            tokens.append(Token("num", digits))
            pos = number_end = match.end()
            continue
        match = _LETTERS.match(text, pos)
        if match:
            tokens.append(Token("name", match.group()))
            pos = match.end()
            continue
        match = _COMMAND.match(text, pos)
        if match:
            name = match.group(1)
            pos = match.end()
            if name in _SIZING_COMMANDS:
                # "\\left." is an invisible delimiter: drop the dot with the command.
                pos += text.startswith(".", pos)
                continue
            op = _OP_COMMANDS.get(name)
            tokens.append(Token("op", op) if op else Token("cmd", name))
            continue
        if ch in _SINGLE_OPS:
            tokens.append(Token("op", ch))
            pos += 1
            continue
        raise ParseError(f"unsupported character {ch!r} at position {pos}")
    tokens.append(Token("end", ""))
    return tokens
