"""Verification layer: checks a candidate answer against a problem beyond string equivalence.

Checks, each recorded by name in the result:
  ``parse``      the answer is in the math subset (or a yes/no),
  ``range``      every value is finite and of sane magnitude relative to the reference,
  ``roots``      each stated root makes the problem's expression vanish,
  ``derivative`` the answer equals d/dvar of the problem's expression,
  ``antiderivative`` d/dvar of the answer equals the integrand,
  ``factored``   the answer is a product equal to the expression,
  ``reference``  equivalence with the reference answer (up to a constant for antiderivatives),
  ``tests``      the problem's test code accepts it, run in the sandbox when one is given.
Symbolic checks run for the kinds in ROOT_KINDS, DERIVATIVE_KINDS, ANTIDERIVATIVE_KINDS and
FACTOR_KINDS, and read ``problem.meta["expression"]`` (and
``meta["variable"]``, default x), or the body of a curriculum ``meta["key"]``: plain math strings
from our own generator, still parsed with the same safe parser.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import sympy

from agentic_jax.reward import numeric
from agentic_jax.reward.build import Node
from agentic_jax.reward.compare import canonical, scalars_equal, stated_value
from agentic_jax.reward.grader import TIME_BUDGET_S, grade_answer, interpret
from agentic_jax.reward.normalize import normalize
from agentic_jax.reward.values import Bool, Matrix, Relation, Scalar, Seq, Text, UnionOf, Value

MAGNITUDE_FACTOR = 1e6  # "sane": at most this many times larger than the reference's largest
CHECK_POINTS = 4
EXACT_TOL = 1e-20  # exact answers evaluated at 192 bits agree far below this
DECIMAL_TOL = 1e-6
ABS_TOL = 1e-25
ROOT_KINDS = frozenset({"linear", "quadratic", "equation", "roots"})
DERIVATIVE_KINDS = frozenset({"derivative", "derivative_functions"})
ANTIDERIVATIVE_KINDS = frozenset({"antiderivative", "indefinite_integral", "integral"})
FACTOR_KINDS = frozenset({"factor", "factoring"})
KEY_TAGS = frozenset({"quad", "linear", "diff", "dfun", "int", "factor"})


@dataclasses.dataclass(frozen=True)
class VerificationResult:
    """``ok`` when every check in ``checks`` passed; ``reason`` explains the first failure."""

    ok: bool
    checks: tuple[str, ...]
    reason: str


class _Failed(Exception):
    def __init__(self, check: str, reason: str):
        super().__init__(reason)
        self.check = check


def _scalars(value: Value | None) -> Iterator[Scalar]:
    """Every scalar inside a (possibly nested) value."""
    if isinstance(value, Scalar):
        yield value
    elif isinstance(value, Relation):
        for operand in value.operands:
            yield from _scalars(operand)
    elif isinstance(value, Seq):
        for item in value.items:
            yield from _scalars(item)
    elif isinstance(value, UnionOf):
        for part in value.parts:
            yield from _scalars(part)
    elif isinstance(value, Matrix):
        for row in value.rows:
            for item in row:
                yield from _scalars(item)


def _magnitude(scalar: Scalar, deadline: float) -> float | None:
    """|value| of a constant scalar as a float (inf when infinite); None for symbolic ones."""
    expr = scalar.node.expr
    if expr.free_symbols:
        return None
    if scalar.node.deferred or expr.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return float("inf")
    try:
        return float(abs(numeric.evaluate(expr, {}, deadline)))
    except (numeric.Undecidable, ZeroDivisionError, ValueError, OverflowError):
        return float("inf")


def _check_range(candidate: Value, reference: Value, deadline: float) -> None:
    ref_sizes = [m for s in _scalars(reference) if (m := _magnitude(s, deadline)) is not None]
    bound = MAGNITUDE_FACTOR * max([1.0] + ref_sizes)
    for scalar in _scalars(candidate):
        size = _magnitude(scalar, deadline)
        if size is not None and size > bound:
            raise _Failed("range", "a value is infinite, undefined or implausibly large")


def _candidate_scalars(candidate: Value) -> list[Scalar]:
    """The expressions an answer states: "x = 2, x = -3" -> [2, -3]."""
    value = canonical(candidate)
    items = value.items if isinstance(value, Seq) else (value,)
    scalars = [stated_value(item) for item in items]
    if not scalars or not all(isinstance(s, Scalar) and not s.node.deferred for s in scalars):
        raise _Failed("parse", "expected one or more evaluable expressions")
    return scalars


def _single(candidate: Value) -> Scalar:
    scalars = _candidate_scalars(candidate)
    if len(scalars) != 1:
        raise _Failed("parse", "expected a single expression")
    return scalars[0]


def _points(exprs: list[sympy.Expr], exclude: sympy.Symbol | None = None) -> list[dict]:
    symbols = set().union(*(e.free_symbols for e in exprs)) - {exclude}
    return numeric.sample_points(symbols, CHECK_POINTS if symbols else 1, seed=7)


def _agree(
    left: Callable[[dict], Any], right: Callable[[dict], Any], points: list[dict], rel_tol: float
) -> bool:
    """left(p) == right(p) within tolerance at every point where both are defined (>= 1)."""
    agreed = 0
    for point in points:
        try:
            a, b = left(point), right(point)
        except (numeric.Undecidable, ZeroDivisionError, ValueError):
            continue
        if not numeric.close(a, b, rel_tol, ABS_TOL):
            return False
        agreed += 1
    return agreed > 0


def _check_roots(expr: sympy.Expr, var: sympy.Symbol, candidate: Value, deadline: float) -> None:
    """Each stated root r makes expr vanish: |expr(r)| small next to its largest term."""
    terms = expr.args if expr.is_Add else (expr,)
    for root in _candidate_scalars(candidate):
        tol = DECIMAL_TOL if root.node.inexact else EXACT_TOL
        checked = 0
        for point in _points([expr, root.node.expr], exclude=var):
            try:
                at = {**point, var: numeric.evaluate(root.node.expr, point, deadline)}
                residual = numeric.evaluate(expr, at, deadline)
                scale = max([1] + [abs(numeric.evaluate(t, at, deadline)) for t in terms])
            except (numeric.Undecidable, ZeroDivisionError, ValueError):
                continue
            if abs(residual) > tol * scale:
                raise _Failed("roots", "a stated root does not satisfy the equation")
            checked += 1
        if not checked:
            raise _Failed("roots", "a stated root could not be evaluated")


def _same_derivative(
    answer: Scalar,
    target: sympy.Expr,
    var: sympy.Symbol,
    deadline: float,
    differentiate_target: bool,
) -> bool:
    """d(answer)/d(var) equals ``target`` (or d(target)/d(var)), numerically at seeded points."""
    expr = answer.node.expr
    points = _points([expr, target, var])

    def right(point: dict) -> Any:
        if differentiate_target:
            return numeric.derivative(target, var, point, deadline)
        return numeric.evaluate(target, point, deadline)

    tol = DECIMAL_TOL if answer.node.inexact else EXACT_TOL
    return _agree(lambda p: numeric.derivative(expr, var, p, deadline), right, points, tol)


def _kind_checks(problem: Any, candidate: Value, deadline: float) -> list[str]:
    """Runs the symbolic checks that the problem's kind and meta allow; returns their names."""
    kind = _kind(problem)
    expr = _problem_expression(problem)
    var = _variable(problem)
    if expr is None or isinstance(candidate, (Bool, Text)):
        return []
    if kind in ROOT_KINDS:
        _check_roots(expr, var, candidate, deadline)
        return ["roots"]
    if kind in DERIVATIVE_KINDS:
        if not scalars_equal(_single(candidate), Scalar(Node(sympy.diff(expr, var))), deadline):
            raise _Failed("derivative", "the answer is not the derivative of the expression")
        return ["derivative"]
    if kind in ANTIDERIVATIVE_KINDS:
        if not _same_derivative(_single(candidate), expr, var, deadline, False):
            raise _Failed("antiderivative", "the derivative of the answer is not the integrand")
        return ["antiderivative"]
    if kind in FACTOR_KINDS:
        answer = _single(candidate)
        is_product = answer.node.expr.is_Mul or answer.node.expr.is_Pow
        if not is_product or not scalars_equal(answer, Scalar(Node(expr)), deadline):
            raise _Failed("factored", "the answer is not a factorisation of the expression")
        return ["factored"]
    return []


def _problem_expression(problem: Any) -> sympy.Expr | None:
    """``meta["expression"]``, else the body of a curriculum ``meta["key"]`` ("quad:x**2 - 1");
    an equation "lhs = rhs" becomes lhs - rhs. None when absent or not a plain expression."""
    meta = _meta(problem)
    text = meta.get("expression")
    if not isinstance(text, str):
        tag, _, body = str(meta.get("key", "")).partition(":")
        text = body if tag in KEY_TAGS else None
    if text is None:
        return None
    value = interpret(normalize(text) or "")
    if isinstance(value, Relation) and value.ops == ("=",) and len(value.operands) == 2:
        lhs, rhs = value.operands
        if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
            value = Scalar(Node(lhs.node.expr - rhs.node.expr))
    return value.node.expr if isinstance(value, Scalar) and not value.node.deferred else None


def _kind(problem: Any) -> str:
    return str(getattr(problem, "kind", "") or "").lower()


def _meta(problem: Any) -> dict:
    return getattr(problem, "meta", None) or {}


def _variable(problem: Any) -> sympy.Symbol:
    return sympy.Symbol(str(_meta(problem).get("variable", "x")))


def _check_reference(problem: Any, answer: str, candidate: Value, deadline: float) -> None:
    if grade_answer(answer, problem.answer):
        return
    if _kind(problem) in ANTIDERIVATIVE_KINDS and isinstance(candidate, Scalar):
        # An antiderivative may differ from the reference by a constant.
        reference = interpret(normalize(problem.answer) or "")
        if (
            isinstance(reference, Scalar)
            and not (candidate.node.deferred or reference.node.deferred)
            and _same_derivative(candidate, reference.node.expr, _variable(problem), deadline, True)
        ):
            return
    raise _Failed("reference", "the answer differs from the reference answer")


def _check_tests(problem: Any, answer: str, sandbox: Any) -> None:
    code = f"ANSWER = {answer!r}\n{problem.tests}"
    result = sandbox.run(code)
    if not result.ok:
        raise _Failed("tests", f"the problem's tests rejected the answer ({result.error})")


def verify(problem: Any, answer: str | None, *, sandbox: Any = None) -> VerificationResult:
    """Verifies ``answer`` (a final-answer string) for ``problem`` (any object with ``answer``,
    and optionally ``kind``, ``meta`` and ``tests``). ``sandbox``: an
    ``agentic_jax.sandbox.Sandbox`` to run the problem's tests in; without one they are skipped.
    """
    checks: list[str] = []
    deadline = time.monotonic() + 2 * TIME_BUDGET_S
    try:
        checks.append("parse")
        text = normalize(answer) if answer is not None else None
        candidate = interpret(text) if text else Text("")
        if isinstance(candidate, Text):
            raise _Failed("parse", "no answer in the supported math format")
        reference = interpret(normalize(problem.answer) or "")
        checks.append("range")
        _check_range(candidate, reference, deadline)
        checks.extend(_kind_checks(problem, candidate, deadline))
        checks.append("reference")
        _check_reference(problem, answer, candidate, deadline)
        if sandbox is not None and getattr(problem, "tests", None):
            checks.append("tests")
            _check_tests(problem, answer, sandbox)
    except _Failed as failure:
        if failure.check not in checks:
            checks.append(failure.check)
        return VerificationResult(False, tuple(checks), f"{failure.check}: {failure}")
    except Exception as error:  # noqa: BLE001 - model text must never crash a caller
        reason = f"{checks[-1]}: could not be checked ({type(error).__name__})"
        return VerificationResult(False, tuple(checks), reason)
    return VerificationResult(True, tuple(checks), "all checks passed")
