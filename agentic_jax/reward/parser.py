"""Recursive-descent parser for answers: LaTeX and plain math into ``values.Value`` trees.

Grammar (lowest precedence first)::

    answer   := item (',' item)*
    item     := union (relop union)*          relop: = < > \\le \\ge \\ne \\in
    union    := sum (('\\cup' | '\\setminus') sum)*
    sum      := ['+'|'-'] term (('+'|'-') term)*
    term     := unary (('*'|'/'|implicit) unary)*
    unary    := ('-'|'+') unary | power
    power    := postfix ['^' unary-or-group]
    postfix  := primary ('!' | '%' | '°' | "'")*
    primary  := number | name | command | bracket | '{' ... '}' | '|' sum '|'
    set      := '\\{' items '\\}' | '\\{' var ['\\in' union] ('|' | ':') item '\\}'

Expressions are built only through ``agentic_jax.reward.build`` (guarded SymPy constructors);
nothing is evaluated from text. Nesting depth is capped so hostile input fails fast.
"""

from __future__ import annotations

import sympy

from agentic_jax.reward import build, commands, sets
from agentic_jax.reward.build import Node
from agentic_jax.reward.lexer import ParseError, Token, tokenize
from agentic_jax.reward.values import (
    Matrix,
    Relation,
    Scalar,
    Seq,
    UnionOf,
    Value,
    as_node,
    as_value,
)

MAX_DEPTH = 50
RELATION_OPS = ("=", "<", ">", "le", "ge", "ne")
_SET_MINUS = ("setminus", "backslash")
_CLOSERS = {"(": (")", "]"), "[": ("]", ")")}


def parse_answer(text: str) -> Value:
    """Parses a normalised answer string; raises ParseError outside the supported subset."""
    parser = Parser(tokenize(text))
    items = parser.item_list()
    if parser.peek().kind != "end":
        raise ParseError(f"unexpected {parser.peek().text!r}")
    if len(items) == 1:
        return items[0]
    return Seq(tuple(items), "", "")


class Parser:
    """Parses one token list. Methods return a ``Node`` (scalar) or a structural ``Value``.

    The command handlers (``commands``) drive it through the ``commands.Grammar`` interface:
    the token helpers, ``push_back`` / ``replace_next`` to split a token, and the grammar rules.
    """

    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.abs_depth = 0

    # --- token helpers -------------------------------------------------------------------
    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def at(self, text: str, kind: str | None = None) -> bool:
        token = self.peek()
        return token.text == text and (kind is None or token.kind == kind)

    def accept(self, text: str, kind: str | None = None) -> bool:
        if self.at(text, kind):
            self.next()
            return True
        return False

    def expect(self, text: str, kind: str | None = None) -> Token:
        if not self.at(text, kind):
            raise ParseError(f"expected {text!r}, found {self.peek().text!r}")
        return self.next()

    def push_back(self, token: Token) -> None:
        """Makes ``token`` the next token (the rest of a letter run split by a handler)."""
        self.tokens.insert(self.pos, token)

    def replace_next(self, token: Token) -> None:
        """Replaces the next token (``\\frac12`` takes one digit of "12" per argument)."""
        self.tokens[self.pos] = token

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"nesting deeper than {MAX_DEPTH}")

    # --- lists, relations, unions ---------------------------------------------------------
    def item_list(self) -> list[Value]:
        items = [self.item()]
        while self.accept(",", "op") or self.accept(";", "op"):
            items.append(self.item())
        return items

    def item(self) -> Value:
        operands = [self.union()]
        ops: list[str] = []
        while self.peek().kind == "op" and self.peek().text in RELATION_OPS or self.at("in", "cmd"):
            ops.append(self.next().text)
            operands.append(self.union())
        if not ops:
            return operands[0]
        return _relation(operands, ops)

    def union(self) -> Value:
        parts = [as_value(self.sum())]
        while self.at("cup", "cmd") or self.peek().kind == "cmd" and self.peek().text in _SET_MINUS:
            if self.next().text == "cup":
                parts.append(as_value(self.sum()))
                continue
            base = parts[0] if len(parts) == 1 else UnionOf(tuple(parts))
            parts = [sets.minus_points(base, as_value(self.sum()))]
        return parts[0] if len(parts) == 1 else UnionOf(tuple(parts))

    # --- arithmetic -----------------------------------------------------------------------
    def sum(self) -> Node | Value:
        first = self.term()
        if not (self.at("+", "op") or self.at("-", "op")):
            return first
        terms = [as_node(first)]
        while self.at("+", "op") or self.at("-", "op"):
            sign = self.next().text
            term = as_node(self.term())
            terms.append(build.neg(term) if sign == "-" else term)
        return build.add(terms)

    def term(self) -> Node | Value:
        first = self.unary()
        factors: list[Node] = []
        while True:
            if self.accept("*", "op"):
                factors.append(as_node(self.unary()))
            elif self.accept("/", "op"):
                factors.append(build.power(as_node(self.unary()), Node(sympy.Integer(-1))))
            elif self.starts_implicit_factor():
                factors.append(as_node(self.power()))
            else:
                break
        if not factors:
            return first
        return build.mul([as_node(first)] + factors)

    def starts_implicit_factor(self) -> bool:
        """Whether the next token begins a factor multiplied by juxtaposition ("2x", "x(x+1)")."""
        token = self.peek()
        if token.kind == "name" or token.kind == "cmd" and commands.starts_value(token.text):
            return True
        if token.kind == "op":
            return token.text in ("(", "{") or token.text == "|" and self.abs_depth == 0
        return False

    def unary(self) -> Node | Value:
        self.enter()
        try:
            if self.accept("-", "op"):
                return build.neg(as_node(self.unary()))
            if self.accept("+", "op"):
                return as_node(self.unary())
            return self.power()
        finally:
            self.depth -= 1

    def power(self) -> Node | Value:
        base = self.postfix()
        if not self.at("^", "op"):
            return base
        self.next()
        if self.accept("°", "op"):
            return _marked(as_node(base), "°")
        exponent = as_node(self.group() if self.at("{", "op") else self.unary())
        return self.postfix_ops(build.power(as_node(base), exponent))

    def postfix(self) -> Node | Value:
        return self.postfix_ops(self.primary())

    def postfix_ops(self, value: Node | Value) -> Node | Value:
        while self.peek().kind == "op" and self.peek().text in ("!", "%", "°", "'"):
            op = self.next().text
            if op == "!":
                value = build.factorial(as_node(value))
            elif op == "%":
                value = _marked(build.div(as_node(value), Node(sympy.Integer(100))), "%")
            elif op == "°":
                value = _marked(as_node(value), "°")
        return value

    # --- primaries ------------------------------------------------------------------------
    def primary(self) -> Node | Value:
        self.enter()
        try:
            token = self.next()
            if token.kind == "num":
                return build.number(token.text)
            if token.kind == "name":
                return commands.name(self, token.text)
            if token.kind == "cmd":
                return commands.command(self, token.text)
            if token.text in _CLOSERS:
                return self.bracket(token.text)
            if token.text == "{":
                return self.brace_group()
            if token.text == "lset":
                return self.set_literal("rset")
            if token.text == "|":
                return self.absolute_value()
            raise ParseError(f"unexpected {token.text or 'end of input'!r}")
        finally:
            self.depth -= 1

    def group(self) -> Node | Value:
        """A LaTeX argument: ``{...}``, or a single digit, letter or command."""
        if self.accept("{", "op"):
            return self.brace_group()
        token = self.peek()
        if token.kind == "num" and len(token.text) > 1 and token.text.isdigit():
            # "\frac12" takes one digit per argument.
            self.replace_next(Token("num", token.text[1:]))
            return build.number(token.text[0])
        if token.kind == "name" and len(token.text) > 1:
            self.replace_next(Token("name", token.text[1:]))
            return commands.name(self, token.text[0])
        return self.primary()

    def brace_group(self) -> Node | Value:
        """Contents of ``{...}`` after the opening brace: a group, a set, or ``{n \\choose k}``."""
        if self.accept("}", "op"):
            return Seq((), "{", "}")
        items = self.item_list()
        if len(items) == 1 and self.accept("choose", "cmd"):
            items.append(as_value(self.sum()))
            self.expect("}", "op")
            return build.binomial(as_node(items[0]), as_node(items[1]))
        self.expect("}", "op")
        if len(items) == 1:
            return items[0].node if isinstance(items[0], Scalar) else items[0]
        return Seq(tuple(items), "{", "}")

    def set_literal(self, closer: str) -> Value:
        if self.accept(closer, "op"):
            return Seq((), "{", "}")
        if self.starts_set_builder():
            return self.set_builder(closer)
        items = self.item_list()
        self.expect(closer, "op")
        return Seq(tuple(items), "{", "}")

    def starts_set_builder(self) -> bool:
        """ "\\{x | ...", "\\{x : ...", "\\{x \\in ...": a variable, then a separator or \\in."""
        var, after = self.peek(), self.peek(1)
        if var.kind != "name" or len(var.text) != 1:
            return False
        return after.kind == "op" and after.text in ("|", ":") or after == Token("cmd", "in")

    def set_builder(self, closer: str) -> Value:
        """``\\{x \\mid x > 2\\}``: the set its condition describes (an interval when the
        condition bounds x by constants); the domain after \\in must be the reals."""
        self.next()
        if self.accept("in", "cmd"):
            self.abs_depth += 1  # so the "|" after the domain ends it
            try:
                domain = self.union()
            finally:
                self.abs_depth -= 1
            if domain != commands.REALS:
                raise ParseError("set-builder domains other than the reals are not supported")
        if not (self.accept("|", "op") or self.accept(":", "op")):
            raise ParseError("set-builder notation needs '|' or ':' after its variable")
        condition = self.item()
        self.expect(closer, "op")
        return condition

    def bracket(self, opener: str) -> Node | Value:
        if self.peek().text in _CLOSERS[opener]:
            return Seq((), opener, self.next().text)
        items = self.item_list()
        closer = self.next().text
        if closer not in _CLOSERS[opener]:
            raise ParseError(f"unbalanced {opener!r}")
        if opener == "(" and closer == ")" and len(items) == 1:
            return items[0].node if isinstance(items[0], Scalar) else items[0]
        if opener != closer.replace(")", "(").replace("]", "[") and len(items) != 2:
            raise ParseError("a half-open interval needs two endpoints")
        if opener == "[" and closer == "]" and all(isinstance(i, Seq) for i in items):
            return _matrix_from_rows(items)
        return Seq(tuple(items), opener, closer)

    def absolute_value(self) -> Node:
        self.abs_depth += 1
        try:
            inner = as_node(self.sum())
        finally:
            self.abs_depth -= 1
        self.expect("|", "op")
        return build.function("abs", [inner])


def _marked(node: Node, mark: str) -> Node:
    return Node(node.expr, node.inexact, node.deferred, mark)


def _matrix_from_rows(rows: list[Value]) -> Value:
    """``[[1, 2], [3, 4]]`` is a matrix when its rows are equal-length plain lists."""
    if any(r.open != "[" or r.close != "]" for r in rows) or len({len(r.items) for r in rows}) != 1:
        return Seq(tuple(rows), "[", "]")
    return Matrix(tuple(tuple(r.items) for r in rows))


def _relation(operands: list[Value], ops: list[str]) -> Value:
    """A relation; inequalities bounding one variable by constants become intervals."""
    interval = sets.as_interval(operands, ops)
    if interval is not None:
        return interval
    return Relation(tuple(operands), tuple(ops))
