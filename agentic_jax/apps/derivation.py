r"""Derivation checking: each step must be equivalent to the one before it.

    python -m agentic_jax.apps.derivation FILE      # one step per line; "-" reads stdin

A step is an expression ("(x+1)^2"), an expression continuing the previous line ("= x^2+2x+1",
compared with the previous step's last side) or an equation ("2x + 3 = 7" then "2x = 4": same
solutions). Plain text or LaTeX (``\frac``, ``\cdot``, ``&`` alignment, ``\\`` line ends).
Parsing and comparison are the grader's: our own parser into SymPy objects, never eval/exec or
sympify on the text, under a time budget. The first step that is not equivalent is marked with
the reason (for expressions, a point where the two sides differ). Exit status 0 when every
step holds, 1 when one does not, 2 on unreadable input.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Sequence

import sympy

from agentic_jax.errors import UserError
from agentic_jax.reward import grade_answer
from agentic_jax.reward.compare import canonical
from agentic_jax.reward.grader import interpret
from agentic_jax.reward.normalize import normalize
from agentic_jax.reward.values import Relation, Scalar, Seq, Text, Value

MAX_STEPS = 200
MAX_STEP_CHARS = 1000  # the grader's own limit on one answer
MAX_DEGREE = 8  # polynomial equations whose roots are compared exactly
MAX_COEFFICIENT_BITS = 256  # ... and whose coefficients are at most this wide
_PROBE_VALUES = (sympy.Rational(7, 3), sympy.Rational(-5, 2), sympy.Integer(3))
_CONTINUES = re.compile(r"^\s*(=|\\iff|\\Leftrightarrow|\\Rightarrow|=>|<=>)\s*")
_LATEX_NOISE = re.compile(r"\\begin\{[a-z*]+\}|\\end\{[a-z*]+\}|\\\\\s*$|&|\\qquad|\\quad")


@dataclasses.dataclass(frozen=True)
class StepCheck:
    """One step: its 1-based ``line`` in the input, the ``text`` compared, and ``status``
    ("start" for the first step, "valid", "invalid"), with the ``reason`` when invalid."""

    line: int
    text: str
    status: str
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class DerivationResult:
    steps: tuple[StepCheck, ...]
    first_invalid: int | None  # index into ``steps``

    @property
    def ok(self) -> bool:
        return self.first_invalid is None


def split_steps(text: str) -> list[tuple[int, str]]:
    """(line number, step text) of the non-empty lines, LaTeX alignment removed."""
    steps = []
    for number, line in enumerate(text.splitlines(), 1):
        cleaned = _LATEX_NOISE.sub(" ", line).strip().removesuffix("\\\\").strip()
        cleaned = cleaned.rstrip(",.;")
        if cleaned:
            steps.append((number, cleaned))
    return steps


def check_derivation(text: str, time_budget_s: float | None = None) -> DerivationResult:
    """Checks every step against the previous one (ValueError for empty or oversized input).

    ``time_budget_s`` bounds the whole check (a server's budget per request; each step is
    bounded, but 200 steps of root finding take minutes): steps not reached by then are
    marked invalid, with the reason that they were not checked."""
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    lines = split_steps(text)
    if not lines:
        raise UserError("derivation: expected at least one non-empty line")
    if len(lines) > MAX_STEPS:
        raise UserError(f"derivation: {len(lines)} steps; at most {MAX_STEPS}")
    steps, first_invalid, previous = [], None, None
    for number, raw in lines:
        continues = bool(_CONTINUES.match(raw))
        step = _CONTINUES.sub("", raw, count=1)
        if len(step) > MAX_STEP_CHARS:
            check = StepCheck(number, step[:80] + "...", "invalid",
                              f"longer than {MAX_STEP_CHARS} characters")
        elif deadline is not None and time.monotonic() > deadline:
            check = StepCheck(number, step, "invalid", f"not checked: the {time_budget_s:g} s "
                              "budget of one derivation ran out")
        elif previous is None:
            check = StepCheck(number, step, "start", _unparsed(step))
            if check.reason:
                check = dataclasses.replace(check, status="invalid")
        else:
            against = _last_side(previous) if continues else previous
            check = _compare(number, step, against)
        steps.append(check)
        if check.status == "invalid" and first_invalid is None:
            first_invalid = len(steps) - 1
        previous = step
    return DerivationResult(tuple(steps), first_invalid)


def _compare(number: int, step: str, previous: str) -> StepCheck:
    problem = _unparsed(step)
    if problem:
        return StepCheck(number, step, "invalid", problem)
    if grade_answer(step, previous):
        return StepCheck(number, step, "valid")
    ours, theirs = _solutions(_value(step)), _solutions(_value(previous))
    if (ours is not None and ours == theirs) or _same_roots(step, previous):
        return StepCheck(number, step, "valid")
    return StepCheck(number, step, "invalid", _why_different(step, previous, ours, theirs))


def _value(text: str) -> Value:
    cleaned = normalize(text)
    return Text(text) if cleaned is None else interpret(cleaned)


def _unparsed(step: str) -> str:
    if isinstance(_value(step), Text):
        return "not an expression or equation the checker can parse"
    return ""


def _last_side(step: str) -> str:
    """The right-most side of a relation ("a = b = c" -> "c"); the step itself otherwise."""
    return re.split(r"(?<![<>!\\])=(?!=)", step)[-1].strip()


def _deferred(value: Value) -> bool:
    """Whether the grader left part of ``value`` unevaluated (too large to compute): such a
    value is only compared by the grader, never substituted into, expanded or simplified
    here, since any of those would evaluate it on the request thread."""
    if isinstance(value, Scalar):
        return value.node.deferred
    if isinstance(value, Relation):
        return any(_deferred(v) for v in value.operands)
    if isinstance(value, Seq):
        return any(_deferred(v) for v in value.items)
    return False


def _degree_bound(expr: sympy.Expr) -> int | None:
    """An upper bound on the polynomial degree of ``expr`` read from its tree without expanding
    it (Poly((x+1)^3000) expands 3000 terms before its degree can be checked); None when the
    tree is not visibly a polynomial."""
    if not expr.free_symbols:
        return 0
    if expr.is_Symbol:
        return 1
    if expr.is_Add or expr.is_Mul:
        degrees = [_degree_bound(a) for a in expr.args]
        if None in degrees:
            return None
        return max(degrees) if expr.is_Add else sum(degrees)
    if expr.is_Pow and expr.exp.is_Integer and expr.exp >= 0:
        base = _degree_bound(expr.base)
        return None if base is None else base * int(expr.exp)
    return None


def _polynomial(value: Value) -> sympy.Poly | None:
    """p for an equation "lhs = rhs" in one unknown whose p = lhs - rhs is a polynomial of
    degree at most MAX_DEGREE with coefficients at most MAX_COEFFICIENT_BITS wide; None for
    anything else, and for what has deferred parts."""
    value = canonical(value)
    if _deferred(value) or not (isinstance(value, Relation) and value.ops == ("=",) and all(
            isinstance(v, Scalar) for v in value.operands)):
        return None
    expr = value.operands[0].node.expr - value.operands[1].node.expr
    if len(expr.free_symbols) != 1 or not 0 < (_degree_bound(expr) or 0) <= MAX_DEGREE:
        return None
    try:
        poly = sympy.Poly(expr, *expr.free_symbols)
    except sympy.PolynomialError:
        return None
    if not 0 < poly.degree() <= MAX_DEGREE or _coefficient_bits(poly) > MAX_COEFFICIENT_BITS:
        return None
    return poly


def _solutions(value: Value) -> frozenset | None:
    """The solution set of a polynomial equation in one unknown ("(x-2)(x-3) = 0") when
    every root has a closed form, or the values a list of roots states ("x = 2, x = 3"); None
    for anything else (x^5 - x + 1 = 0 has roots, but none that sympy.roots can write)."""
    poly = _polynomial(value)
    if poly is not None:
        roots = sympy.roots(poly)  # {root: multiplicity}, leaving out what it cannot write
        if sum(roots.values()) < poly.degree():
            return None
        return frozenset(sympy.nsimplify(r) for r in roots)
    value = canonical(value)
    if _deferred(value):
        return None
    if isinstance(value, Seq) and all(isinstance(v, Scalar) and v.node.expr.is_number
                                      for v in value.items):
        return frozenset(sympy.nsimplify(v.node.expr) for v in value.items)
    if isinstance(value, Scalar) and value.node.expr.is_number:
        return frozenset({sympy.nsimplify(value.node.expr)})
    return None


def _same_roots(step: str, previous: str) -> bool:
    """Whether two polynomial equations have the same solutions, found without solving them:
    their square-free parts (each root once) agree up to a constant factor."""
    p, q = _polynomial(_value(step)), _polynomial(_value(previous))
    if p is None or q is None:
        return False
    return p.sqf_part().monic().all_coeffs() == q.sqf_part().monic().all_coeffs()


def _coefficient_bits(poly: sympy.Poly) -> int:
    """The widest exact coefficient (numerator plus denominator bits): root finding factors
    the polynomial, which slows with the coefficients' size."""
    return max((int(c.p).bit_length() + int(c.q).bit_length()
                for c in poly.all_coeffs() if c.is_Rational), default=0)


def _why_different(step: str, previous: str, ours: frozenset | None,
                   theirs: frozenset | None) -> str:
    a, b = _value(step), _value(previous)
    if ours is not None and theirs is not None:
        return (f"solutions {_set(ours)} differ from the previous step's {_set(theirs)} "
                f"({previous!r})")
    if isinstance(a, Relation) or isinstance(b, Relation):
        return f"not equivalent to the previous step {previous!r}"
    if isinstance(a, Scalar) and isinstance(b, Scalar) and not (_deferred(a) or _deferred(b)):
        point = _differing_point(a.node.expr, b.node.expr)
        if point:
            return f"not equal to the previous step {previous!r}: {point}"
    return f"not equal to the previous step {previous!r}"


def _differing_point(a: sympy.Expr, b: sympy.Expr) -> str:
    """'at x = 7/3: 9.44 vs 7.11' for the first probe point where a and b differ.

    Evaluated in 15-digit floats (``evalf(subs=...)``), never by exact substitution, which
    would compute (7/3)^(10^9) digit by digit."""
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    for offset in range(len(_PROBE_VALUES)):
        subs = {s: _PROBE_VALUES[(i + offset) % len(_PROBE_VALUES)]
                for i, s in enumerate(symbols)}
        try:
            va, vb = complex(a.evalf(15, subs=subs)), complex(b.evalf(15, subs=subs))
            # abs() of a complex near the float limit overflows: such a point shows nothing.
            differ = abs(va - vb) > 1e-9 * max(1.0, abs(va), abs(vb))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if differ:
            where = ", ".join(f"{s} = {v}" for s, v in subs.items())
            return (f"at {where}: " if where else "") + f"{_show(va)} vs {_show(vb)}"
    return ""


def _set(values: frozenset) -> str:
    return "{" + ", ".join(sorted(map(_number_text, values))) + "}"


def _number_text(value: sympy.Expr) -> str:
    """A solution as text: exact when short, else 6 significant digits (Python refuses to
    print integers over 4300 digits)."""
    try:
        text = str(value)
    except ValueError:
        text = ""
    return text if 0 < len(text) <= 60 else str(sympy.N(value, 6))


def _show(value: complex) -> str:
    return f"{value.real:.6g}" if abs(value.imag) < 1e-12 else f"{value:.6g}"


def format_result(result: DerivationResult) -> str:
    marks = {"start": " ", "valid": "✓", "invalid": "✗"}
    lines = []
    for i, step in enumerate(result.steps):
        line = f"{step.line:4d} {marks[step.status]} {step.text}"
        if step.reason:
            line += f"    <- {step.reason}"
        if i == result.first_invalid:
            line += "    [first invalid step]"
        lines.append(line)
    lines.append("valid derivation" if result.ok
                 else f"invalid from line {result.steps[result.first_invalid].line}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m agentic_jax.apps.derivation FILE (or - for stdin)",
              file=sys.stderr)
        return 2
    try:
        if args[0] == "-":
            text = sys.stdin.read()
        else:
            with open(args[0], encoding="utf-8") as f:
                text = f.read(1 << 20)
        result = check_derivation(text)
    except (OSError, UnicodeDecodeError, UserError) as err:
        print(f"error: {args[0]}: {err}", file=sys.stderr)
        return 2
    print(format_result(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
