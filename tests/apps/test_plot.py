"""Plots render inside the sandbox (matplotlib whitelisted for the plot sandbox only) and come
back as valid PNGs; text that is not math is refused before anything runs."""

import struct
import time

import pytest

from agentic_jax.apps import plot
from agentic_jax.apps.sandboxes import grading_sandbox, plot_sandbox


@pytest.fixture(scope="module")
def sandbox():
    with plot_sandbox() as sb:
        yield sb


def _png_size(png):
    assert png.startswith(plot.PNG_MAGIC) and png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def test_graphs_curves_and_regions_are_pngs(sandbox):
    result = plot.render_plot("x^2 - 3x; y = \\sin(x); x^2 + y^2 = 4; y < x^2 - 1", sandbox,
                              xmin=-3, xmax=3)
    assert _png_size(result.png) == (600, 450)
    assert [c.kind for c in result.curves] == ["graph", "graph", "implicit", "region"]
    assert "matplotlib.use('Agg')" in result.code


def test_axis_names_follow_the_variables():
    curves, axes = plot.parse_curves("t^2 + 1")
    assert axes == ("t", "y") and curves[0].kind == "graph"
    assert plot.parse_curves("y = a^3")[1] == ("a", "y")


@pytest.mark.parametrize("text, message", [
    ("", "expected an expression"),
    ("__import__('os').system('id')", "not an expression"),
    ("x y z", "at most two variables"),
    ("x * y", "two variables"),
])
def test_what_cannot_be_plotted(sandbox, text, message):
    with pytest.raises(plot.PlotError, match=message):
        plot.render_plot(text, sandbox)


@pytest.mark.parametrize("text, message", [
    ("10^4400 x", "beyond double precision"),  # printing its 4,401 digits raised ValueError
    ("1/10^4400 + x", "beyond double precision"),
    ("x + 9^{9^{9^9}}", "too large to evaluate"),  # the printer evaluated it to order terms
    ("y = x * gamma(80001/2)", "too large to evaluate|beyond double precision"),
])
def test_numbers_too_large_to_plot_are_refused_quickly(text, message):
    start = time.monotonic()
    with pytest.raises(plot.PlotError, match=message):
        plot.plot_program(*plot.parse_curves(text), -5.0, 5.0)
    assert time.monotonic() - start < 2.0


def test_bad_range(sandbox):
    with pytest.raises(plot.PlotError, match="xmin < xmax"):
        plot.render_plot("x", sandbox, xmin=2, xmax=1)


def test_matplotlib_is_only_on_the_plot_sandbox():
    with grading_sandbox(num_workers=1) as sb:
        result = sb.run("import matplotlib")
    assert not result.ok and result.error == "ImportError"


def test_the_command(tmp_path, capsys):
    out = tmp_path / "p.png"
    assert plot.main(["x^3", f"--out={out}"]) == 0
    _png_size(out.read_bytes())
    assert plot.main(["x y z", f"--out={out}"]) == 2
    assert "at most two variables" in capsys.readouterr().err
    assert plot.main(["10^4400 x", f"--out={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plot:") and err.count("\n") == 1 and "Traceback" not in err
    assert plot.main(["x", f"--out={tmp_path / 'no' / 'dir.png'}"]) == 2
    assert capsys.readouterr().err.startswith("error: --out:")
