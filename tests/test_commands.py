"""The commands are discoverable: `python -m agentic_jax` lists them, and train's / evaluate's
--help list the config variants, each with one line from its own docstring."""

import ast
import pathlib
import subprocess
import sys

import pytest

import agentic_jax
from agentic_jax import commands
from configs.math_ppo import VARIANTS

PACKAGE = pathlib.Path(agentic_jax.__file__).parent


def _run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=PACKAGE.parent)


def _runs_as_main(path: pathlib.Path) -> bool:
    """The file has a top-level ``if __name__ == "__main__":``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and getattr(node.test.left, "id", None) == "__name__"
                and getattr(node.test.comparators[0], "value", None) == "__main__"):
            return True
    return False


def test_every_runnable_module_is_a_listed_command():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if path.name == "__main__.py" and path.parent != PACKAGE:
            found.add(name.removesuffix(".__main__"))
        elif path.name != "__main__.py" and _runs_as_main(path):
            found.add(name)
    assert found == set(commands.COMMANDS)


def test_the_package_lists_its_commands_one_line_each():
    out = _run("agentic_jax")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for name in commands.COMMANDS:
        line = next(line for line in lines if line.startswith(f"  {name} "))
        summary = line[len(name) + 2:].strip()
        first_paragraph = " ".join(commands.command_docstring(name).split("\n\n")[0].split())
        assert summary and first_paragraph.startswith(summary.removesuffix("...")), name
    assert max(map(len, lines)) <= commands.LINE_CHARS
    assert "train" in out.stdout and "RL of a tool-using math policy" in out.stdout


def test_a_command_runs_through_the_package_and_an_unknown_one_is_refused():
    out = _run("agentic_jax", "apps.derivation", "-", stdin="2x + 3 = 7\n2x = 4\n")
    assert out.returncode == 0, out.stderr
    unknown = _run("agentic_jax", "trian")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: unknown command 'trian'; expected one of train,")


def test_the_config_docstring_describes_every_variant():
    listed = commands.config_variants(commands.DEFAULT_CONFIG)
    assert set(listed) == {"(none)" if v == "default" else v for v in VARIANTS}
    assert all(listed.values())


@pytest.mark.parametrize("command", ["agentic_jax.train", "agentic_jax.evaluate"])
def test_help_lists_the_config_variants(command):
    out = _run(command, "--help")
    assert out.returncode == 1, out.stderr   # absl's status after --help
    listing = out.stdout[out.stdout.index("config variants"):out.stdout.index("flags:")]
    names = [line.split()[0] for line in listing.splitlines() if line.startswith("  ")]
    assert set(names) == {"(none)" if v == "default" else v for v in VARIANTS}
    # Each line is the first sentence of the variant's entry in the config's docstring.
    described = commands.config_variants(commands.DEFAULT_CONFIG)
    assert commands.listing({n: described[n] for n in names if n in described}).strip() \
        in listing
    assert "  smoke " in listing and "what the tests run" in listing
    assert all(len(line) <= commands.LINE_CHARS for line in listing.splitlines())
    assert "--workdir" in out.stdout   # absl's flag list still follows


def test_a_variant_missing_from_the_docstring_is_still_listed(tmp_path):
    config = tmp_path / "config.py"
    config.write_text('"""A config.\n\nVariants:\n  (none)  the default. More.\n  fast    '
                      'quick\n          and small.\n"""\n'
                      'VARIANTS = {"default": None, "fast": None, "new": None}\n')
    assert commands.config_variants(str(config)) == {"(none)": "the default. More.",
                                                     "fast": "quick and small."}
    usage = commands.variants_usage(str(config))
    assert "  (none)  the default\n" in usage and "  fast    quick and small\n" in usage
    assert "  new     (not described in the config's docstring)" in usage


def test_one_line_shortens_in_order():
    text = ("Homework grading: each row's answer by the grader. More.")
    assert commands.one_line(text, 80) == "Homework grading: each row's answer by the grader"
    assert commands.one_line(text, 20) == "Homework grading"
    assert commands.one_line("the same (r=16 on every projection) at 10x", 30) == \
        "the same at 10x"
    assert commands.one_line("plots of expressions, equations and relations", 30) == \
        "plots of expressions"
    assert commands.one_line("several words without any comma", 16) == "several words..."
    assert commands.one_line("averylongwordwithoutbreaks", 12) == "averylong..."
    assert commands.one_line("e.g. a Sum. Next one", 80) == "e.g. a Sum"
    assert commands.one_line("", 80) == ""


def test_variants_of_a_missing_or_undocumented_config(tmp_path):
    assert "is not here" in commands.variants_usage(str(tmp_path / "nope.py"))
    bare = tmp_path / "bare.py"
    bare.write_text('"""A config without a variants block."""\n')
    assert "has none" in commands.variants_usage(str(bare))
