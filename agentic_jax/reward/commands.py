"""Names and backslash commands of the answer language: constants, symbols, functions
(``\\sin^2 x``, ``\\log_2 8``, ``sqrt(2)``), ``\\frac``, ``\\sqrt[n]``, ``\\binom``, matrices.

Each handler is called by the parser after the name or command token has been consumed, and
returns a ``build.Node`` or a structural ``values.Value``. Handlers see the parser only through
``Grammar``, the small interface the parser provides, so this module does not import it.
"""

from __future__ import annotations

from typing import Protocol

import sympy

from agentic_jax.reward import build
from agentic_jax.reward.build import Node
from agentic_jax.reward.lexer import ParseError, Token, word_set
from agentic_jax.reward.values import Matrix, Seq, Value, as_node, scalar


class Grammar(Protocol):
    """What a handler may do with the parser: read and consume tokens, split the next token,
    and parse the sub-rules it needs (see ``parser.Parser``)."""

    def peek(self, offset: int = 0) -> Token: ...
    def next(self) -> Token: ...
    def at(self, text: str, kind: str | None = None) -> bool: ...
    def accept(self, text: str, kind: str | None = None) -> bool: ...
    def expect(self, text: str, kind: str | None = None) -> Token: ...
    def push_back(self, token: Token) -> None: ...
    def item_list(self) -> list[Value]: ...
    def item(self) -> Value: ...
    def sum(self) -> Node | Value: ...
    def power(self) -> Node | Value: ...
    def primary(self) -> Node | Value: ...
    def group(self) -> Node | Value: ...
    def starts_implicit_factor(self) -> bool: ...


CONSTANTS = {
    "pi": sympy.pi,
    "oo": sympy.oo,
    "inf": sympy.oo,
    "infty": sympy.oo,
    "infinity": sympy.oo,
    "e": sympy.E,
    "E": sympy.E,
    "i": sympy.I,
    "I": sympy.I,
}
GREEK = word_set(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu "
    "xi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi "
    "Psi Omega"
)
LATEX_FUNCTIONS = word_set("sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln exp")
PLAIN_FUNCTIONS = frozenset(build.FUNCTIONS) | {"sqrt", "factorial", "binomial"}
FORMAT_COMMANDS = word_set(
    "mathrm mathbf boldsymbol textbf text mbox textrm mathit bm overline vec hat bar tilde "
    "mathsf textit emph underline widehat mathnormal"
)
MATRIX_ENVS = word_set("matrix pmatrix bmatrix Bmatrix smallmatrix array")
_NOT_VALUES = word_set("cup setminus backslash in choose end pm mp rfloor rceil")
REALS = Seq((scalar(-sympy.oo), scalar(sympy.oo)), "(", ")")
_PREFIXES = sorted(PLAIN_FUNCTIONS | {"pi"}, key=len, reverse=True)


def starts_value(command_name: str) -> bool:
    """Whether a command can begin an operand (so it multiplies by juxtaposition)."""
    return command_name not in _NOT_VALUES


def _is_function_token(token: Token) -> bool:
    return (
        token.kind == "cmd"
        and token.text in LATEX_FUNCTIONS
        or token.kind == "name"
        and token.text in PLAIN_FUNCTIONS
    )


def name(parser: Grammar, text: str) -> Node | Value:
    """A run of letters: a function call, a constant, or a product of one-letter symbols."""
    if text in PLAIN_FUNCTIONS or text in ("Matrix", "FiniteSet"):
        if parser.at("(", "op"):
            return _call(parser, text)
        if text in PLAIN_FUNCTIONS:
            return build.function(text, [implicit_argument(parser)])
    if text in CONSTANTS and len(text) > 1:
        return build.atom(CONSTANTS[text])
    if len(text) == 1:
        return _letter(parser, text)
    # "xy" is x*y; "sinx" is sin(x): split off the longest known prefix or one letter.
    head = next((p for p in _PREFIXES if text.startswith(p) and len(p) < len(text)), text[0])
    parser.push_back(Token("name", text[len(head) :]))
    return name(parser, head)


def _letter(parser: Grammar, letter: str) -> Node:
    if parser.accept("_", "op"):
        return build.atom(sympy.Symbol(f"{letter}_{_subscript(parser)}"))
    if letter in CONSTANTS:
        return build.atom(CONSTANTS[letter])
    return build.atom(sympy.Symbol(letter))


def _subscript(parser: Grammar) -> str:
    if not parser.accept("{", "op"):
        return parser.next().text
    parts = []
    while not parser.accept("}", "op"):
        token = parser.next()
        if token.kind == "end" or token.text == "{":
            raise ParseError("malformed subscript")
        parts.append(token.text)
    return "".join(parts)


def _call(parser: Grammar, func: str) -> Node | Value:
    parser.expect("(", "op")
    args = parser.item_list()
    parser.expect(")", "op")
    if func == "FiniteSet":
        return Seq(tuple(args), "{", "}")
    if func == "Matrix":
        if len(args) != 1 or not isinstance(args[0], (Seq, Matrix)):
            raise ParseError("Matrix() takes one list of rows")
        if isinstance(args[0], Matrix):
            return args[0]
        return Matrix(tuple((item,) for item in args[0].items))
    return build.function(func, [as_node(a) for a in args])


def implicit_argument(parser: Grammar) -> Node:
    """The argument of ``\\sin 2x``: juxtaposed factors up to the next function or operator."""
    if parser.at("(", "op"):
        return as_node(parser.primary())
    factors = [as_node(parser.power())]
    while parser.starts_implicit_factor() and not _is_function_token(parser.peek()):
        factors.append(as_node(parser.power()))
    return factors[0] if len(factors) == 1 else build.mul(factors)


def _latex_function(parser: Grammar, func: str) -> Node:
    """``\\sin^2 x``, ``\\sin^{-1} x``, ``\\log_2 8``, ``\\ln(x)``."""
    log_base = exponent = None
    for _ in range(2):
        if func == "log" and parser.accept("_", "op"):
            log_base = as_node(parser.group())
        elif parser.accept("^", "op"):
            exponent = as_node(parser.group())
    if exponent is not None and exponent.expr == -1 and func in build.INVERSE:
        func, exponent = build.INVERSE[func], None
    arg = implicit_argument(parser)
    result = build.function(func, [arg] if log_base is None else [arg, log_base])
    return result if exponent is None else build.power(result, exponent)


def command(parser: Grammar, cmd: str) -> Node | Value:
    """A backslash command (its token already consumed)."""
    if cmd in ("frac", "dfrac", "tfrac", "cfrac"):
        numerator = as_node(parser.group())
        return build.div(numerator, as_node(parser.group()))
    if cmd == "sqrt":
        degree = None
        if parser.accept("[", "op"):
            degree = as_node(parser.sum())
            parser.expect("]", "op")
        arg = as_node(parser.group())
        return build.function("sqrt", [arg]) if degree is None else build.root(arg, degree)
    if cmd in ("binom", "dbinom", "tbinom"):
        n = as_node(parser.group())
        return build.binomial(n, as_node(parser.group()))
    if cmd in CONSTANTS:
        return build.atom(CONSTANTS[cmd])
    if cmd in GREEK:
        return build.atom(sympy.Symbol(cmd))
    if cmd in LATEX_FUNCTIONS:
        return _latex_function(parser, cmd)
    if cmd == "operatorname":
        parser.expect("{", "op")
        func = parser.next().text
        parser.expect("}", "op")
        if func not in build.FUNCTIONS:
            raise ParseError(f"unsupported function {func}")
        return _latex_function(parser, func)
    if cmd in FORMAT_COMMANDS:
        return parser.group()
    if cmd == "mathbb":
        braced = parser.accept("{", "op")
        parser.expect("R", "name")
        if braced:
            parser.expect("}", "op")
        return REALS
    if cmd in ("emptyset", "varnothing"):
        return Seq((), "{", "}")
    if cmd in ("lfloor", "lceil"):
        inner = as_node(parser.sum())
        parser.expect("r" + cmd[1:], "cmd")
        return build.function("floor" if cmd == "lfloor" else "ceiling", [inner])
    if cmd == "begin":
        return _matrix_environment(parser)
    raise ParseError(f"unsupported command \\{cmd}")


def _environment_name(parser: Grammar) -> str:
    parser.expect("{", "op")
    env = parser.next().text
    parser.expect("}", "op")
    return env


def _matrix_environment(parser: Grammar) -> Matrix:
    """``\\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix}`` (also bmatrix, matrix, array)."""
    env = _environment_name(parser)
    if env not in MATRIX_ENVS:
        raise ParseError(f"unsupported environment {env}")
    if env == "array" and parser.accept("{", "op"):
        while not parser.accept("}", "op"):
            if parser.next().kind == "end":
                raise ParseError("unterminated array column spec")
    rows: list[list[Value]] = [[]]
    while not parser.accept("end", "cmd"):
        rows[-1].append(parser.item())
        if parser.accept("rowsep", "op") and not parser.at("end", "cmd"):
            rows.append([])
        elif not parser.accept("&", "op") and not parser.at("end", "cmd"):
            raise ParseError(f"unexpected {parser.peek().text!r} in matrix")
    if _environment_name(parser) != env:
        raise ParseError(f"\\begin{{{env}}} closed by a different environment")
    if len({len(row) for row in rows}) != 1:
        raise ParseError("matrix rows of different lengths")
    return Matrix(tuple(tuple(row) for row in rows))
