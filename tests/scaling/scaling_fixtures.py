"""Synthetic run directories in the trainer's format, drawn from a known scaling law."""

from __future__ import annotations

import json
import math
import os
import random

# alpha, beta, gamma, bias in the law's units. Tiny models and short runs sit far from the
# published operating point, so the step and size effects need larger constants to show.
TRUTH = (0.8, 150.0, 0.02, 5.0)
PRESET_PARAMS = {"tiny-0.2m": 0.2e6, "tiny-1m": 1e6, "tiny-4m": 4e6, "tiny-16m": 16e6}


def synthetic_records(
    num_params: float, seed: int, steps: int = 30, num_problems: int = 64
) -> list[dict]:
    """One metrics record per step; accuracy ~ Binomial(num_problems, law(N, T, L)) / n.

    Plain Python (no numpy), so that the stand-in trainer starts fast.
    """
    alpha, beta, gamma, bias = TRUTH
    rng = random.Random(seed * 1000 + int(num_params) % 997)
    records = []
    for step in range(1, steps + 1):
        length = 30.0 + 10.0 * seed + 25.0 * step / steps + rng.gauss(0.0, 3.0)
        logit = (
            alpha * math.log(num_params / 1e9)
            + beta * math.sqrt(step / 1e6)
            - gamma * length
            + bias
        )
        p = 1.0 / (1.0 + math.exp(-logit))
        accuracy = sum(rng.random() < p for _ in range(num_problems)) / num_problems
        records.append(
            {
                "step": step,
                "reward": accuracy - 0.1,
                "accuracy": accuracy,
                "code_use_rate": min(1.0, 0.1 + step / steps),
                "exec_success_rate": 0.9,
                "tool_calls": 0.5 + step / steps,
                "response_length": length,
                "kl": 0.01,
                "entropy": 1.0,
                "tokens_per_sec": 1000.0,
                "num_problems": num_problems,
            }
        )
    return records


def write_synthetic_run(
    run_dir: str,
    num_params: float,
    seed: int,
    steps: int = 30,
    partial_tail: bool = False,
    garbage: bool = False,
    params_in: str = "config",
) -> None:
    """Writes run_dir/metrics.jsonl (+ config.json); optionally a garbage line and a partial
    last line, as a crashed or still-running trainer leaves them.

    params_in: "config" (top-level num_params), "model" (config model.num_params) or "metrics".
    """
    os.makedirs(run_dir, exist_ok=True)
    records = synthetic_records(num_params, seed, steps)
    if params_in == "metrics":
        for r in records:
            r["num_params"] = num_params
    else:
        config = (
            {"num_params": num_params}
            if params_in == "config"
            else {"model": {"num_params": num_params}}
        )
        with open(os.path.join(run_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"seed": seed, **config}, f)
    lines = [json.dumps(r) + "\n" for r in records]
    if garbage:
        lines.insert(len(lines) // 2, "this is not json\n")
    if partial_tail:
        lines.append(json.dumps(records[-1])[:25])
    with open(os.path.join(run_dir, "metrics.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(lines)
