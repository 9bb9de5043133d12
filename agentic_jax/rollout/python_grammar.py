"""A Lark grammar (llguidance dialect) for a turn that opens a ```python block: free text up to
the opening fence, then a block of Python that `ast.parse` accepts, then the closing fence.

llguidance lexes greedily with the lexemes the parser allows at each point and has no
INDENT/DEDENT post-lexer, so indentation is spelled out: every statement rule is written once
per nesting level d < ``max_depth`` and a line at level d starts after a newline lexeme with
exactly 4*d spaces (``NL_d``, which also swallows blank and comment lines). There is no
``%ignore``: whitespace is part of the tokens (see `_MODE_TOKENS`), ``[ \\t]`` on a line and also
newlines and comments inside brackets, so the expression rules are written twice: line mode
(``_l``) and bracket mode (``_b``, implicit line joining). Strings and comments hold no
backtick, so no ``` can end the block early, and no control character (a ``\\r`` would end
the line for Python).

The accepted subset (everything in it parses; much valid Python is outside it):
- statements: expressions; assignment (chained, tuple/list targets, attribute and subscript
  targets), augmented and annotated assignment; import / from-import (absolute, ``as``, ``*``,
  parenthesised names); pass, break, continue, return, del, assert, raise [from], global;
  ``;``-separated statements on one line.
- compound statements: if/elif/else, for/else, while/else, def (positional parameters, then
  defaulted ones, ``*args``, ``**kwargs``, annotations, ``->``), class (bases and keywords),
  try/except [E [as e]]/else/finally, with [as]; a body on the same line or indented by 4
  spaces per level, up to ``max_depth`` levels (at the deepest level, same-line bodies only).
- expressions: Python's precedence ladder (lambda, conditional, or/and/not, comparisons incl.
  ``in``/``not in``/``is``/``is not``, bitwise, shifts, arithmetic, unary, ``**``), calls
  (positional and ``*`` arguments before keyword and ``**`` ones, or one generator argument),
  attributes, subscripts and slices, tuples, lists, dicts, sets, their comprehensions, ``*``/``**``
  unpacking in displays, all number forms, string and bytes literals (prefixes, raw, triple
  quotes, implicit concatenation of the same kind, valid escapes only), ``...``.
- left out: f-strings with replacement fields, decorators, yield, async/await, walrus, match,
  nonlocal, relative imports, star targets, backslash continuation, tabs for indentation.
  Keywords after an expression (``in``, ``and``, ``if``, ``as``, ...) need whitespace on both
  sides (``x if(y)`` and ``1if`` are refused; CPython deprecates the latter). Calls directly on
  number or constant literals are refused (CPython warns). Checks that CPython makes after parsing (``return`` outside a
  function, ``break`` outside a loop, duplicate parameters) are not enforced.
"""

from __future__ import annotations

import functools
import re

KEYWORDS = ("False None True and as assert async await break class continue def del elif else "
            "except finally for from global if import in is lambda nonlocal not or pass raise "
            "return try while with yield").split()


# Literal pieces (Rust regex syntax, as llguidance uses).
_DIGITS = r"[0-9](?:_?[0-9])*"
_FLOAT = rf"(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.)(?:[eE][+-]?{_DIGITS})?|{_DIGITS}[eE][+-]?{_DIGITS}"
_NUMBER = (rf"(?:{_FLOAT}|{_DIGITS})[jJ]|{_FLOAT}|[1-9](?:_?[0-9])*|0+(?:_?0)*"
           r"|0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+")
# Characters a literal or comment may hold: no line breaks or other control characters (a \r
# would end the line for Python), and no backtick, so that no ``` can close the block early.
_UNSAFE = r"\x00-\x08\x0a-\x1f\x7f`"
_COMMENT = rf"#[^{_UNSAFE}]*"
_WS = {"l": r"[ \t]*", "b": rf"(?:[ \t\n]|{_COMMENT}\n)*"}
_WS1 = {"l": r"[ \t]+", "b": rf"(?:[ \t\n]|{_COMMENT}\n)+"}
_ESC = r"\\(?:[\\'\"abfnrtv]|x[0-9a-fA-F]{2}|[0-3][0-7]{0,2}|[4-7][0-7]?)"


def _quoted(chars: str, esc: str, q: str) -> str:
    """One single-line literal body between quotes ``q``; ``chars`` excludes quote/backslash."""
    return rf"{q}(?:{chars}|{esc})*{q}"


def _triple(esc: str, q: str) -> str:
    """A triple-quoted body: no run of three quotes inside, and none before the closing one."""
    unit = rf"[^{q}\\{_UNSAFE}]|\n|{esc}"
    return rf"{q}{q}{q}(?:{unit}|{q}(?:{unit})|{q}{q}(?:{unit}))*{q}{q}{q}"


def _string_regex() -> str:
    """str literals: plain/u, raw, and f without replacement fields; single or triple quoted."""
    raw_esc, triple_raw_esc = rf"\\[^{_UNSAFE}]", rf"\\[^{_UNSAFE}]|\\\n"
    triple_esc = _ESC + r"|\\\n"
    forms = []
    for q in ("'", '"'):
        chars = rf"[^{q}\\{_UNSAFE}]"
        fchars = rf"[^{q}\\{_UNSAFE}{{}}]|\{{\{{|\}}\}}"
        forms += ["[uU]?" + _quoted(chars, _ESC, q), "[rR]" + _quoted(chars, raw_esc, q),
                  "[fF]" + _quoted(fchars, _ESC, q),
                  "(?:[fF][rR]|[rR][fF])" + _quoted(fchars, raw_esc, q),
                  "[uU]?" + _triple(triple_esc, q), "[rR]" + _triple(triple_raw_esc, q)]
    return "|".join(forms)


def _bytes_regex() -> str:
    """bytes literals: ASCII only, plain or raw, single quoted."""
    forms = []
    for q in ("'", '"'):
        printable = rf"[ -~&&[^{q}\\`]]"
        forms += ["[bB]" + _quoted(printable, _ESC, q),
                  "(?:[bB][rR]|[rR][bB])" + _quoted(printable, r"\\[ -_a-~]", q)]
    return "|".join(forms)


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"

# Tokens that end an operand (names, literals, closing brackets) carry no whitespace after them;
# what follows an operand (operators, separators, trailers, keywords, newlines) carries the
# whitespace before it. So a keyword after a number needs a space ("1 if", never "1if"), and
# a statement's first token sits exactly at its indentation.
# Per mode: name -> (before, regex, after); "w": the mode's whitespace, "w1": at least one
# whitespace character, "b": bracket whitespace (newlines and comments too).
_MODE_TOKENS = {
    **{name: ("w", core, "w") for name, core in (
        ("COMMA", ","), ("COLON", ":"), ("ASSIGN", "="), ("DOT", r"\."), ("POW", r"\*\*"),
        ("MULOP", r"\*|/|//|%|@"), ("ADDOP", r"[+\-]"), ("SHIFT", "<<|>>"), ("AMP", "&"),
        ("CARET", r"\^"), ("BAR", r"\|"), ("COMPOP", "<|>|==|>=|<=|!="))},
    **{name: ("", core, "w") for name, core in (
        ("STAR", r"\*"), ("DSTAR", r"\*\*"), ("UNARY", r"[+\-~]"), ("NOT", "not"),
        ("LAMBDA", "lambda"))},
    **{name: ("w1", core, "w1") for name, core in (
        ("IN", "in"), ("NOT_IN", r"not[ \t]+in"), ("IS", "is"), ("IS_NOT", r"is[ \t]+not"),
        ("AND", "and"), ("OR", "or"), ("IF", "if"), ("ELSE", "else"), ("FOR", "for"),
        ("AS", "as"), ("IMPORT", "import"), ("FROM", "from"))},
    "LPAR_T": ("w", r"\(", "b"), "LSQB_T": ("w", r"\[", "b"),
    "STRING_CONT": ("w", "STRING", ""), "BYTES_CONT": ("w", "BYTES", ""),
}

_EXPR_RULES = r"""
test_M: or_test_M (IF_M or_test_M ELSE_M test_M)? | lambdef_M
lambdef_M: LAMBDA_M lparams_M? COLON_M test_M
lparams_M: NAME (COMMA_M NAME)* (COMMA_M NAME ASSIGN_M test_M)* | NAME ASSIGN_M test_M (COMMA_M NAME ASSIGN_M test_M)*
or_test_M: and_test_M (OR_M and_test_M)*
and_test_M: not_test_M (AND_M not_test_M)*
not_test_M: NOT_M not_test_M | comparison_M
comparison_M: bor_M (comp_op_M bor_M)*
comp_op_M: COMPOP_M | IN_M | NOT_IN_M | IS_M | IS_NOT_M
bor_M: bxor_M (BAR_M bxor_M)*
bxor_M: band_M (CARET_M band_M)*
band_M: shift_M (AMP_M shift_M)*
shift_M: arith_M (SHIFT_M arith_M)*
arith_M: term_M (ADDOP_M term_M)*
term_M: factor_M (MULOP_M factor_M)*
factor_M: UNARY_M factor_M | power_M
power_M: primary_M (POW_M factor_M)?
primary_M: base_M trailer_M* | strs_M (DOT_M NAME | LSQB_T_M subscripts_b RSQB) trailer_M*
         | strs_M | NUMBER | CONST | ELLIPSIS
base_M: NAME | LPAR paren_b? RPAR | LSQB list_b? RSQB | LBRACE brace_b? RBRACE
strs_M: STRING STRING_CONT_M* | BYTES BYTES_CONT_M*
trailer_M: LPAR_T_M args_b? RPAR | LSQB_T_M subscripts_b RSQB | DOT_M NAME
testlist_M: test_M (COMMA_M test_M)* COMMA_M?
target_M: NAME | primary_M DOT_M NAME | primary_M LSQB_T_M subscripts_b RSQB
        | LPAR targets_b RPAR | LSQB targets_b RSQB
targets_M: target_M (COMMA_M target_M)* COMMA_M?
names_M: NAME (AS_M NAME)? (COMMA_M NAME (AS_M NAME)?)*
comp_for_M: FOR_M targets_M IN_M or_test_M (FOR_M targets_M IN_M or_test_M | IF_M or_test_M)*
"""

# Bracket contents exist in bracket mode only.
_BRACKET_RULES = r"""
star_item_b: test_b | STAR_b bor_b
paren_b: test_b comp_for_b? | star_item_b COMMA_b | star_item_b (COMMA_b star_item_b)+ COMMA_b?
list_b: test_b comp_for_b | star_item_b (COMMA_b star_item_b)* COMMA_b?
dict_item_b: test_b COLON_b test_b | DSTAR_b bor_b
brace_b: test_b COLON_b test_b comp_for_b | dict_item_b (COMMA_b dict_item_b)* COMMA_b?
       | test_b comp_for_b | star_item_b (COMMA_b star_item_b)* COMMA_b?
subscript_b: test_b | test_b? COLON_b test_b? (COLON_b test_b?)?
subscripts_b: subscript_b (COMMA_b subscript_b)* COMMA_b?
posarg_b: test_b | STAR_b test_b
kwarg_b: NAME ASSIGN_b test_b | DSTAR_b test_b
args_b: test_b comp_for_b | posarg_b (COMMA_b posarg_b)* (COMMA_b kwarg_b)* COMMA_b?
      | kwarg_b (COMMA_b kwarg_b)* COMMA_b?
param_b: NAME (COLON_b test_b)?
dparam_b: param_b ASSIGN_b test_b
starparams_b: STAR_b param_b (COMMA_b dparam_b)* (COMMA_b DSTAR_b param_b)? | DSTAR_b param_b
params_b: param_b (COMMA_b param_b)* (COMMA_b dparam_b)* (COMMA_b starparams_b)? COMMA_b?
        | dparam_b (COMMA_b dparam_b)* (COMMA_b starparams_b)? COMMA_b? | starparams_b COMMA_b?
"""

_STATEMENT_RULES = r"""
simple_l: small_l (SEMI_L small_l)* SEMI_L?
small_l: testlist_l | (targets_l ASSIGN_l)+ testlist_l | target_l AUGASSIGN_L testlist_l
       | target_l COLON_l test_l (ASSIGN_l test_l)?
       | import_l | PASS_S | BREAK_S | CONTINUE_S | RETURN_S testlist_l? | DEL_S targets_l
       | ASSERT_S test_l (COMMA_l test_l)? | RAISE_S (test_l (FROM_l test_l)?)?
       | GLOBAL_S NAME (COMMA_l NAME)*
dotted_l: NAME (DOT_l NAME)*
import_l: IMPORT_S dotted_l (AS_l NAME)? (COMMA_l dotted_l (AS_l NAME)?)*
        | FROM_S dotted_l IMPORT_l (STAR_l | names_l | LPAR names_b COMMA_b? RPAR)
"""

# One copy per nesting level D; E is D + 1 (the level of its blocks).
_LEVEL_RULES = r"""
stmt_D: simple_l | compound_D
compound_D: IF_S test_l COLON_l suite_E (NL_D ELIF_S test_l COLON_l suite_E)* (NL_D ELSE_S COLON_l suite_E)?
          | WHILE_S test_l COLON_l suite_E (NL_D ELSE_S COLON_l suite_E)?
          | FOR_S targets_l IN_l testlist_l COLON_l suite_E (NL_D ELSE_S COLON_l suite_E)?
          | DEF_S NAME LPAR_T_l params_b? RPAR (ARROW_L test_l)? COLON_l suite_E
          | CLASS_S NAME (LPAR_T_l args_b? RPAR)? COLON_l suite_E
          | WITH_S test_l (AS_l target_l)? (COMMA_l test_l (AS_l target_l)?)* COLON_l suite_E
          | TRY_S COLON_l suite_E (NL_D except_D)+ (NL_D ELSE_S COLON_l suite_E)? (NL_D FINALLY_S COLON_l suite_E)?
          | TRY_S COLON_l suite_E NL_D FINALLY_S COLON_l suite_E
except_D: EXCEPT_KW COLON_l suite_E | EXCEPT_S test_l (AS_l NAME)? COLON_l suite_E
"""

_STATEMENT_KEYWORDS = ("if elif else while for def class with try finally pass break continue "
                       "return del assert raise global import from").split()


def _terminal(name: str, core: str, before: str = "", after: str = "") -> str:
    """``NAME: /before(?:core)after/`` (slashes escaped for the /.../ syntax)."""
    body = f"{before}(?:{core}){after}".replace("/", r"\/")
    return f"{name}: /{body}/"


def _mode_terminals(m: str) -> list[str]:
    space = {"": "", "w": _WS[m], "w1": _WS1[m], "b": _WS["b"]}
    literal = {"STRING": _string_regex(), "BYTES": _bytes_regex()}
    return [_terminal(f"{name}_{m}", literal.get(core, core), space[before], space[after])
            for name, (before, core, after) in _MODE_TOKENS.items()]


@functools.lru_cache(maxsize=None)
def python_block_grammar(max_depth: int = 4) -> str:
    """The whole turn's grammar, ``start: pre code`` with ``code: LEAD? stmts? FENCE TAIL?``:
    ``pre`` is lazy free text through the first opening fence; TAIL, anything after the
    closing fence that does not turn it into another opener (see the module docstring)."""
    if max_depth < 1:
        raise ValueError(f"max_depth: expected >= 1, got {max_depth}")
    rules = ["start: pre code",
             r"pre[lazy]: /(?s:.*)```python\n/",
             "code: LEAD? (stmt_0 (NL_0 stmt_0)*)? FENCE TAIL?"]
    for m in ("l", "b"):
        rules.append(_EXPR_RULES.replace("_M", f"_{m}"))
    rules.append(_BRACKET_RULES)
    rules.append(_STATEMENT_RULES)
    for d in range(max_depth):
        level = _LEVEL_RULES.replace("_D", f"_{d}").replace("_E", f"_{d + 1}")
        if d == max_depth - 1:  # the deepest level: bodies on the header's line only
            level = level.replace(f"suite_{d + 1}", "simple_l")
        rules.append(level)
        if d + 1 < max_depth:
            rules.append(f"suite_{d + 1}: simple_l | NL_{d + 1} stmt_{d + 1} "
                         f"(NL_{d + 1} stmt_{d + 1})*")
    blank = rf"[ \t]*(?:{_COMMENT})?(?:\n[ \t]*(?:{_COMMENT})?)*"
    ws_b, ws_l = _WS["b"], _WS["l"]
    terminals = [f"NAME: /{_NAME}/ & ~/{'|'.join(KEYWORDS)}/",
                 "TAIL: /(?s:.+)/ & ~/(?:python|output)(?s:.*)/",
                 _terminal("NUMBER", _NUMBER), _terminal("STRING", _string_regex()),
                 _terminal("BYTES", _bytes_regex()), _terminal("CONST", "True|False|None"),
                 _terminal("ELLIPSIS", r"\.\.\."),
                 _terminal("LPAR", r"\(", after=ws_b), _terminal("LSQB", r"\[", after=ws_b),
                 _terminal("LBRACE", r"\{", after=ws_b), _terminal("RPAR", r"\)", ws_b),
                 _terminal("RSQB", r"\]", ws_b), _terminal("RBRACE", r"\}", ws_b),
                 _terminal("LEAD", rf"(?:[ \t]*(?:{_COMMENT})?\n)+"),
                 _terminal("FENCE", blank + "```"),
                 _terminal("SEMI_L", ";", ws_l, ws_l), _terminal("ARROW_L", "->", ws_l, ws_l),
                 _terminal("AUGASSIGN_L", r"\+=|-=|\*=|/=|//=|%=|@=|&=|\|=|\^=|>>=|<<=|\*\*=",
                           ws_l, ws_l),
                 _terminal("EXCEPT_KW", "except"), _terminal("EXCEPT_S", "except", after=_WS1["l"])]
    terminals += [_terminal(f"{kw.upper()}_S", kw, after=ws_l) for kw in _STATEMENT_KEYWORDS]
    terminals += [_terminal(f"NL_{d}", blank + r"\n" + " " * (4 * d)) for d in range(max_depth)]
    for m in ("l", "b"):
        terminals += _mode_terminals(m)
    text = "\n".join(rules + terminals) + "\n"
    # Terminal names are upper case in Lark: NAME_l -> NAME_L.
    return re.sub(r"\b([A-Z][A-Z0-9_]*_)([lb])\b", lambda m: m[1] + m[2].upper(), text)
