r"""Same seed, same numbers: a training command's metrics at another version of the code.

    python tools/same_metrics.py --ref=main -- --config=configs/math_ppo.py:smoke [--config.K=V]
    python tools/same_metrics.py RUN_A RUN_B          # two run directories already written

With ``--ref`` the commit (branch, tag) is exported with ``git archive`` into a fresh directory,
``python -m agentic_jax.train ARGS`` runs there and in this checkout, each in a run directory of
its own under ``--out`` (the two runs one after the other, not side by side), and the two run
directories are compared. Compared exactly: every step's record in ``metrics.jsonl`` (the keys
and every value), the held-out figures in ``summary.json`` and ``initial_eval.json``. Left out:
wall-clock and memory figures (`is_timing`), which differ between identical runs. Prints each
difference and exits with 1 when there is one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

# Wall-clock and memory figures: a part of a (flattened) key that starts with one of these or a
# key in seconds (..._s).
_TIMING = re.compile(r"(^|[/.])(time_|wall_|tokens_per_sec|accelerator_idle_frac|peak_rss_mb)"
                     r"|_s$")
FILES = ("metrics.jsonl", "summary.json", "initial_eval.json")


def is_timing(key: str) -> bool:
    return bool(_TIMING.search(key))


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one dict of dotted keys."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def read_run(workdir: str) -> dict[str, dict[str, Any]]:
    """file:step or file -> its flattened non-timing values, for each of FILES the run has."""
    out = {}
    for name in FILES:
        path = os.path.join(workdir, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            if name.endswith(".jsonl"):
                records = [json.loads(line) for line in f if line.strip()]
                entries = {f"{name}:step {r.get('step')}": r for r in records}
            else:
                entries = {name: json.load(f)}
        for where, record in entries.items():
            out[where] = {k: v for k, v in flatten(record).items() if not is_timing(k)}
    return out


def differences(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> list[str]:
    """One line per entry or value that is not the same in both (NaN equals NaN)."""
    lines = [f"{where}: only in the {'first' if where in a else 'second'} run"
             for where in sorted(set(a) ^ set(b))]
    for where in sorted(set(a) & set(b)):
        x, y = a[where], b[where]
        for key in sorted(set(x) | set(y)):
            u, v = x.get(key, "<absent>"), y.get(key, "<absent>")
            if u != v and not (u != u and v != v):
                lines.append(f"{where}: {key}: {u!r} != {v!r}")
    return lines


def run_at(source: str, workdir: str, args: list[str]) -> None:
    """``python -m agentic_jax.train ARGS --workdir=WORKDIR`` with ``source`` first on the path."""
    env = {**os.environ, "PYTHONPATH": source}
    cmd = [sys.executable, "-m", "agentic_jax.train", *args, f"--workdir={workdir}",
           "--progress=false"]
    print(f"{source}: {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, cwd=source, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help="two run directories to compare (no --ref)")
    parser.add_argument("--ref", help="a commit to run the training command at")
    parser.add_argument("--out", default=None, help="where the two runs go (default: a temp dir)")
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, train_args = parser.parse_args(argv[:cut]), argv[cut + 1:]
    if (args.ref is None) != (len(args.runs) == 2) or bool(args.ref) != bool(train_args):
        parser.error("give two run directories, or --ref=COMMIT -- TRAIN_ARGS")
    if args.ref is None:
        first, second = args.runs
    else:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = args.out or tempfile.mkdtemp(prefix="same_metrics_")
        ref_tree = os.path.join(out, "ref_tree")
        os.makedirs(ref_tree, exist_ok=False)
        archive = subprocess.run(["git", "-C", here, "archive", args.ref], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", ref_tree], input=archive, check=True)
        first, second = os.path.join(out, "ref"), os.path.join(out, "here")
        run_at(ref_tree, first, train_args)
        run_at(here, second, train_args)
    a, b = read_run(first), read_run(second)
    lines = differences(a, b)
    for line in lines:
        print(line)
    steps = sum(where.startswith("metrics.jsonl") for where in a)
    values = sum(len(v) for v in a.values())
    print(f"{first} vs {second}: {steps} steps, {values} values compared: "
          f"{'identical' if not lines else f'{len(lines)} differences'}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
