"""How many GSM8K training solutions become a Python program that prints the reference answer.

    python tools/gsm8k_programs.py [--split=train] [--path=DIR] [--workers=0] [--show=3]

Each solution's calculator steps become a program (`agentic_jax.data.gsm8k.calc_program`); every
program runs in the sandbox with its limits (500 ms, 100 MB, the import whitelist), and the last
printed line is graded against the reference answer (`warmstart_data.prints_answer`), as the
warm start does before keeping a tool-using example. Prints the counts at each stage, the
snippets per second, a few programs, and the first failures.
"""

from __future__ import annotations

import argparse
import os
import time

from agentic_jax.data.gsm8k import load_gsm8k
from agentic_jax.data.sources import SourceStats
from agentic_jax.sandbox import Sandbox, SandboxConfig
from agentic_jax.training.warmstart_data import prints_answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="train", choices=("train", "test"))
    parser.add_argument("--path", default=None, help="a directory of train.jsonl / test.jsonl")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="sandbox workers")
    parser.add_argument("--show", type=int, default=3, help="programs and failures to print")
    args = parser.parse_args()

    stats = SourceStats()
    problems = load_gsm8k(args.split, path=args.path, stats=stats)
    converted = [p for p in problems if p.solution_code]
    began = time.perf_counter()
    with Sandbox(SandboxConfig(num_workers=args.workers)) as sandbox:
        results = sandbox.run_batch([p.solution_code for p in converted])
    elapsed = time.perf_counter() - began
    ran = [(p, r) for p, r in zip(converted, results) if r.ok and r.stdout.strip()]
    kept = [p for p, r in ran if prints_answer(p, r.stdout)]
    rows = stats.loaded + stats.skipped
    print(f"GSM8K {args.split}: {rows} rows, {stats.skipped} unreadable")
    print(f"  converted to a program:         {len(converted):5d} ({len(converted) / rows:.1%})")
    print(f"  ran in the sandbox and printed: {len(ran):5d}")
    print(f"  printed the reference answer:   {len(kept):5d} ({len(kept) / rows:.1%})")
    print(f"  sandbox: {len(converted)} snippets in {elapsed:.1f} s "
          f"({len(converted) / max(elapsed, 1e-9):.0f}/s)")
    for p in kept[:args.show]:
        print(f"\n{p.id} (answer {p.answer}):\n{p.solution_code}")
    failed = [(p, r) for p, r in zip(converted, results) if p not in set(kept)]
    for p, r in failed[:args.show]:
        print(f"\nnot kept: {p.id} (answer {p.answer}): {(r.stdout or str(r.error))[-120:]!r}")


if __name__ == "__main__":
    main()
