r"""Plots of expressions, equations and relations, rendered by matplotlib inside the sandbox.

    python -m agentic_jax.apps.plot "x^2 - 3x; \sin(x)" --out=plot.png [--xmin=-5 --xmax=5]

What can be plotted (``;`` separates several curves):
  - an expression in one variable, ``x^2 - 3x``: its graph;
  - an equation solved for one variable, ``y = \sin(x)``: the graph of its right side;
  - any other equation in two variables, ``x^2 + y^2 = 1``: the curve where it holds;
  - an inequality in two variables, ``y < x^2``: the region where it holds, shaded.

The text is parsed on the host by the grader's parser (never eval'd); the plotting program is
written from the parsed SymPy expressions (NumPy code) and runs in a sandbox whose whitelist adds
matplotlib (Agg backend), io and base64 for this tool alone; the PNG comes back as base64 on
stdout.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

import sympy
from sympy.printing.numpy import NumPyPrinter

from agentic_jax.reward.grader import interpret
from agentic_jax.reward.normalize import normalize
from agentic_jax.reward.values import Relation, Scalar

MAX_CURVES = 6
MAX_RANGE = 1e6
# Exact numbers wider than this are beyond float64 (about 2^1024) and only cost time: SymPy's
# printer evaluates terms to order them, and Python refuses to print ints over 4300 digits.
MAX_NUMBER_BITS = 1100
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_INEQUALITIES = {"<": "<", ">": ">", "le": "<=", "ge": ">="}


class PlotError(ValueError):
    """The text cannot be plotted, or the sandbox could not render it (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Curve:
    """One thing to draw: ``kind`` "graph" (y = expr of x), "implicit" (expr(x, y) = 0) or
    "region" (expr(x, y) ``op`` 0); the expression over the plot variables x0 / x1."""

    kind: str
    expr: sympy.Expr
    label: str
    op: str = ""


@dataclasses.dataclass(frozen=True)
class PlotResult:
    png: bytes
    code: str  # the program that ran in the sandbox
    curves: tuple[Curve, ...]


def parse_curves(text: str) -> tuple[tuple[Curve, ...], tuple[str, str]]:
    """The curves of ``text`` and the axis names (horizontal, vertical)."""
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if not parts:
        raise PlotError("plot: expected an expression, equation or relation")
    if len(parts) > MAX_CURVES:
        raise PlotError(f"plot: at most {MAX_CURVES} curves, got {len(parts)}")
    parsed = [_parse(p) for p in parts]
    names = sorted({str(s) for value, _ in parsed for s in _symbols(value)},
                   key=lambda n: (n != "x", n))
    if len(names) > 2:
        raise PlotError(f"plot: expected at most two variables, got {', '.join(names)}")
    if "y" in names:  # y is the vertical axis wherever it appears
        others = [n for n in names if n != "y"]
        axes = (others[0] if others else "x", "y")
    else:
        axes = ((names + ["x"])[0], names[1] if len(names) == 2 else "y")
    curves = tuple(_curve(value, label, axes) for value, label in parsed)
    return curves, axes


def _parse(text: str) -> tuple[Any, str]:
    cleaned = normalize(text)
    value = interpret(cleaned) if cleaned else None
    if isinstance(value, Scalar) or (
            isinstance(value, Relation) and len(value.ops) == 1
            and all(isinstance(v, Scalar) for v in value.operands)
            and value.ops[0] in ("=", *_INEQUALITIES)):
        _check_numbers(value, text)
        return value, text
    raise PlotError(f"plot: {text!r} is not an expression, equation or inequality the parser "
                    "reads")


def _check_numbers(value: Any, text: str) -> None:
    """Refuses what the grader left unevaluated (too large to compute) and exact numbers
    wider than MAX_NUMBER_BITS, before anything substitutes into, prints or evaluates them."""
    nodes = [value.node] if isinstance(value, Scalar) else [v.node for v in value.operands]
    if any(n.deferred for n in nodes):
        raise PlotError(f"plot: {text[:80]!r} has a number too large to evaluate")
    for node in nodes:
        for number in node.expr.atoms(sympy.Rational):
            if max(int(number.p).bit_length(), int(number.q).bit_length()) > MAX_NUMBER_BITS:
                raise PlotError(f"plot: {text[:80]!r} has a number beyond double precision "
                                f"(more than {MAX_NUMBER_BITS} bits)")


def _symbols(value: Any) -> set:
    if isinstance(value, Scalar):
        return value.node.expr.free_symbols
    return set().union(*(v.node.expr.free_symbols for v in value.operands))


def _curve(value: Any, label: str, axes: Sequence[str]) -> Curve:
    """The curve in the plot variables x0 (horizontal) and x1 (vertical)."""
    x0, x1 = sympy.Symbol("x0"), sympy.Symbol("x1")
    rename = {sympy.Symbol(axes[0]): x0, sympy.Symbol(axes[1]): x1}
    if isinstance(value, Scalar):
        expr = value.node.expr.subs(rename)
        if x1 in expr.free_symbols:
            raise PlotError(f"plot: {label!r} has two variables; write an equation")
        return Curve("graph", expr, label)
    left, right = (v.node.expr.subs(rename) for v in value.operands)
    op = value.ops[0]
    if op == "=" and left == x1 and x1 not in right.free_symbols:
        return Curve("graph", right, label)
    if op == "=" and right == x1 and x1 not in left.free_symbols:
        return Curve("graph", left, label)
    if op == "=":
        return Curve("implicit", left - right, label)
    return Curve("region", left - right, label, _INEQUALITIES[op])


def plot_program(curves: Sequence[Curve], axes: tuple[str, str], xmin: float, xmax: float
                 ) -> str:
    """The sandbox program: NumPy code of each curve, matplotlib (Agg), PNG as base64."""
    printer = NumPyPrinter()
    lines = [
        "import matplotlib", "matplotlib.use('Agg')", "import matplotlib.pyplot as plt",
        "import numpy", "import io", "import base64",
        f"x0 = numpy.linspace({xmin!r}, {xmax!r}, 801)",
        (f"g0, x1 = numpy.meshgrid(numpy.linspace({xmin!r}, {xmax!r}, 301), "
        f"numpy.linspace({xmin!r}, {xmax!r}, 301))"),
        "fig, ax = plt.subplots(figsize=(6, 4.5), dpi=100)", "shown = []",
        "numpy.seterr(all='ignore')",
    ]
    for i, c in enumerate(curves):
        code = printer.doprint(c.expr)
        label = repr(c.label)
        if c.kind == "graph":
            lines += [f"y = numpy.broadcast_to(numpy.asarray({code}, dtype=float), x0.shape)",
                      "y = numpy.where(numpy.isfinite(y), y, numpy.nan)",
                      f"ax.plot(x0, y, label={label}, color='C{i}')", "shown.append(y)"]
        else:
            grid = code.replace("x0", "g0")
            lines.append(f"z = numpy.broadcast_to(numpy.asarray({grid}, dtype=float), g0.shape)")
            if c.kind == "implicit":
                lines.append(f"ax.contour(g0, x1, z, levels=[0], colors=['C{i}'])")
            else:
                lines.append(f"ax.contourf(g0, x1, (z {c.op} 0).astype(float), levels=[0.5, 1.5],"
                             f" colors=['C{i}'], alpha=0.35)")
            lines.append(f"ax.plot([], [], color='C{i}', label={label})")
    lines += [
        ("finite = numpy.concatenate([s[numpy.isfinite(s)] for s in shown]) if shown "
        "else numpy.array([])"),
        "if finite.size:",
        "    lo, hi = numpy.percentile(finite, [2, 98])",
        "    pad = (hi - lo) * 0.1 or 1.0",
        "    ax.set_ylim(lo - pad, hi + pad)",
        f"ax.set_xlabel({axes[0]!r})", f"ax.set_ylabel({axes[1]!r})",
        "ax.grid(alpha=0.3)", "ax.axhline(0, color='k', lw=0.5)", "ax.axvline(0, color='k', lw=0.5)",
        "ax.legend(loc='best')", "fig.tight_layout()",
        "buf = io.BytesIO()", "fig.savefig(buf, format='png')",
        "print(base64.b64encode(buf.getvalue()).decode())",
    ]
    return "\n".join(lines) + "\n"


def render_plot(text: str, sandbox: Any, xmin: float = -5.0, xmax: float = 5.0) -> PlotResult:
    """The PNG of ``text`` over [xmin, xmax] (both axes for equations and inequalities)."""
    if not (math.isfinite(xmin) and math.isfinite(xmax) and xmin < xmax
            and max(abs(xmin), abs(xmax)) <= MAX_RANGE):
        raise PlotError(f"plot range: expected finite xmin < xmax within ±{MAX_RANGE:g}, got "
                        f"[{xmin}, {xmax}]")
    curves, axes = parse_curves(text)
    code = plot_program(curves, axes, float(xmin), float(xmax))
    result = sandbox.run(code)
    if not result.ok:
        raise PlotError(f"plot: the sandbox could not render it: {result.message}")
    try:
        png = base64.b64decode(result.stdout.strip().splitlines()[-1], validate=True)
    except (ValueError, IndexError):
        raise PlotError("plot: the sandbox printed no image") from None
    if not png.startswith(PNG_MAGIC):
        raise PlotError("plot: the sandbox's output is not a PNG")
    return PlotResult(png, code, curves)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from agentic_jax.apps.sandboxes import plot_sandbox

    parser = argparse.ArgumentParser(prog="python -m agentic_jax.apps.plot",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("text", help="expression, equation or inequality; ';' between curves")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--xmin", type=float, default=-5.0)
    parser.add_argument("--xmax", type=float, default=5.0)
    args = parser.parse_args(argv)
    try:
        with plot_sandbox() as sandbox:
            result = render_plot(args.text, sandbox, args.xmin, args.xmax)
    except PlotError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        with open(args.out, "wb") as f:
            f.write(result.png)
    except OSError as err:
        print(f"error: --out: {err}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(result.png)} bytes, {len(result.curves)} curve(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
