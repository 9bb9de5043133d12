r"""How long a response is through code and written out, per problem kind, before any training.

    python tools/reference_lengths.py --config=configs/math_ppo.py [--config.data.kinds=...]

For the config's training and held-out problems, the mean length in tokens (the run's
tokenizer) of each problem's two reference responses: the written-out one and the tool-using one
with its output block, the output taken to be the problem's answer (what its reference code
prints). Response length is counted as the run counts it: everything after the prompt, tool
output included.

This is what a policy's mean response length does when it switches from writing out to code and
nothing else changes: the held-out "tool - written" difference, times the change in code use.
Printed as a Markdown table, one row per split and kind.
"""

from __future__ import annotations

import collections
import sys

from absl import app
from ml_collections import config_flags


def reference_lengths(tokenizer, problems) -> dict[str, dict[str, float]]:
    """{kind: {"problems", "written", "tool"}} mean token lengths of ``problems``' reference
    responses, and the same over all of them under "all"."""
    from agentic_jax.data import prompts

    def length(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    rows = collections.defaultdict(list)
    for p in problems:
        pair = (length(prompts.direct_solution_text(p)),
                length(prompts.tool_solution_text(p, p.answer)))
        rows[p.kind].append(pair)
        rows["all"].append(pair)
    return {kind: {"problems": len(pairs),
                   "written": sum(w for w, _ in pairs) / len(pairs),
                   "tool": sum(t for _, t in pairs) / len(pairs)}
            for kind, pairs in rows.items()}


def table(by_split: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["| split | kind | problems | written out | through code | code - written |",
             "| --- | --- | --- | --- | --- | --- |"]
    for split, kinds in by_split.items():
        for kind in sorted(kinds, key=lambda k: (k == "all", k)):
            r = kinds[kind]
            lines.append(f"| {split} | {kind} | {r['problems']} | {r['written']:.1f} | "
                         f"{r['tool']:.1f} | {r['tool'] - r['written']:+.1f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    del argv
    from agentic_jax.config import read_config
    from agentic_jax.inference.policy import run_tokenizer
    from agentic_jax.episodes.problems import load_problems

    cfg = read_config(_CONFIG.value)
    tokenizer = run_tokenizer(cfg)
    problems = load_problems(cfg)
    print(table({"training": reference_lengths(tokenizer, problems.train),
                 "held-out": reference_lengths(tokenizer, problems.test)}))
    return 0


if __name__ == "__main__":
    # Defined here, not on import: the tests import this module beside others that define
    # --config in the same process.
    _CONFIG = config_flags.DEFINE_config_file("config", None,
                                              "Training config file (+ ':variant').")
    sys.exit(app.run(main))
