"""tools/reference_lengths.py: the token lengths of the written-out and tool-using references."""

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

from agentic_jax.data import prompts
from agentic_jax.data.problem import draft
from agentic_jax.data.tokenizer import builtin_tokenizer

_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "reference_lengths.py"
_spec = importlib.util.spec_from_file_location("reference_lengths", _SCRIPT)
rl = sys.modules["reference_lengths"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rl)


def _problem(kind, expr, answer, direct):
    p = draft(kind, 0.0, f"Evaluate {expr}.", answer, f"print({expr})", "", direct, kind)
    return dataclasses.replace(p, stage="arithmetic")


def test_lengths_are_the_references_token_counts_per_kind():
    tok = builtin_tokenizer()
    product = _problem("product", "81 * 29", "2349",
                       "81 * 29 = 81 * 20 + 81 * 9 = 1620 + 729 = 2349.")
    sums = [_problem("sum", "12 + 30", "42", "12 + 30 = 42."),
            _problem("sum", "7 + 5", "12", "7 + 5 = 12.")]
    got = rl.reference_lengths(tok, [product, *sums])

    def n(text):
        return len(tok.encode(text, add_special_tokens=False))

    assert got["product"]["problems"] == 1 and got["sum"]["problems"] == 2
    assert got["product"]["written"] == n(prompts.direct_solution_text(product))
    assert got["product"]["tool"] == n(prompts.tool_solution_text(product, "2349"))
    # The distributive steps make the written-out product the longer one; a one-line sum is
    # shorter written out than through code and its output block.
    assert got["product"]["written"] > got["product"]["tool"]
    assert got["sum"]["written"] < got["sum"]["tool"]
    assert got["sum"]["tool"] == sum(n(prompts.tool_solution_text(p, p.answer))
                                     for p in sums) / 2
    assert got["all"]["problems"] == 3
    assert got["all"]["written"] == sum(n(prompts.direct_solution_text(p))
                                        for p in [product, *sums]) / 3
    rows = rl.table({"held-out": got}).splitlines()
    assert rows[0].startswith("| split | kind |")
    assert [r.split(" | ")[1] for r in rows[2:]] == ["product", "sum", "all"]  # "all" last
    difference = got["product"]["tool"] - got["product"]["written"]
    assert difference < 0 and rows[2].endswith(f"| {difference:+.1f} |")


def test_the_command_prints_both_splits_of_a_config():
    out = subprocess.run([sys.executable, str(_SCRIPT), "--config=configs/math_ppo.py:smoke"],
                         cwd=_SCRIPT.parents[1], capture_output=True, text=True, check=True)
    rows = [r for r in out.stdout.splitlines() if r.startswith(("| training", "| held-out"))]
    kinds = {r.split(" | ")[1] for r in rows}
    assert kinds == {"sum", "difference", "product", "all"}  # the smoke config's kinds
    assert {r.split(" | ")[0] for r in rows} == {"| training", "| held-out"}
