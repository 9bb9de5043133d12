r"""Checks that two runs computed the same numbers: every non-timing metric of every step.

    python tools/compare_runs.py RUN_A RUN_B [--also=initial_eval.json,summary.json]

Compares the runs' ``metrics.jsonl`` line by line (and the JSON files named in ``--also``):
every numeric or string value whose key does not measure time, memory or throughput must be
equal, with the same keys present. Prints the first differences and exits 1 on any, 0 when the
runs agree. A refactor proves itself this way: same seed, same config, identical metrics.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterator

# Keys that measure the machine rather than the computation.
_MACHINE = re.compile(
    r"(^|[/_])(time|times|seconds|elapsed|wall|rss|memory|mb|gb|bytes|throughput|per_s|"
    r"per_sec|tokens_per_s|steps_per_hour|idle|wait|utilization|utilisation|busy|latency|compile)"
    r"($|[/_])|_s$|_ms$|_frac$|^timing/|^time/|^perf/|timestamp")


def is_machine_key(key: str) -> bool:
    return bool(_MACHINE.search(key.lower()))


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(v, f"{prefix}/{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def diff_records(a: dict, b: dict, where: str) -> list[str]:
    fa = {k: v for k, v in flatten(a) if not is_machine_key(k)}
    fb = {k: v for k, v in flatten(b) if not is_machine_key(k)}
    out = [f"{where}: {k} only in the first run" for k in sorted(fa.keys() - fb.keys())]
    out += [f"{where}: {k} only in the second run" for k in sorted(fb.keys() - fa.keys())]
    out += [f"{where}: {k}: {fa[k]!r} != {fb[k]!r}"
            for k in sorted(fa.keys() & fb.keys()) if not _same(fa[k], fb[k])]
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(run_a: Path, run_b: Path, also: list[str]) -> list[str]:
    """The differences between two run directories (empty: identical non-timing metrics)."""
    a, b = _jsonl(run_a / "metrics.jsonl"), _jsonl(run_b / "metrics.jsonl")
    problems = [] if len(a) == len(b) else [f"metrics.jsonl: {len(a)} vs {len(b)} records"]
    for i, (ra, rb) in enumerate(zip(a, b)):
        problems += diff_records(ra, rb, f"metrics.jsonl record {i} (step {ra.get('step')})")
    for name in also:
        pa, pb = run_a / name, run_b / name
        if pa.exists() != pb.exists():
            problems.append(f"{name}: present in only one run")
        elif pa.exists():
            problems += diff_records(json.loads(pa.read_text()), json.loads(pb.read_text()),
                                     name)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--also", default="initial_eval.json",
                        help="comma-separated JSON files of the run directories to compare too")
    parser.add_argument("--show", type=int, default=20, help="differences to print")
    args = parser.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not (run / "metrics.jsonl").is_file():
            print(f"error: {run}/metrics.jsonl not found", file=sys.stderr)
            return 2
    problems = compare(args.run_a, args.run_b, [n for n in args.also.split(",") if n])
    records = len(_jsonl(args.run_a / "metrics.jsonl"))
    if problems:
        print(f"{len(problems)} differences:")
        print("\n".join(problems[:args.show]))
        return 1
    print(f"identical: {records} metric records (timing, memory and throughput keys skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
