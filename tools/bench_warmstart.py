r"""What a config's warm start does to a pretrained model, and what it costs.

    python tools/bench_warmstart.py --config=configs/math_ppo.py:smollm2-135m-tools \
        --config.data.eval_size=16 --samples=2 \
        [--rl_steps=2 --config.training.batch_size=4] --out=warmstart.json

Builds the config's run and evaluates its held-out problems with tools, greedy and at
temperature 1 (``--samples`` episodes a problem); trains the warm start
(`training.warmstart.warm_start`, timed) and evaluates again; then, with ``--rl_steps``, takes
that many RL steps from the warm-started policy (`training.run.rl_step`) and reports each one's
reward mean and std: a step whose rewards are all equal gives RL nothing to learn from. The
float32 matmul rate (bench_train_step.time_matmul) is measured at the start and printed beside
the wall times.
"""

from __future__ import annotations

import json
import sys
import time

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file (+ ':variant').")
_OUT = flags.DEFINE_string("out", None, "JSON file to write.")
_SAMPLES = flags.DEFINE_integer("samples", 2, "Episodes a problem at temperature 1.")
_RL_STEPS = flags.DEFINE_integer("rl_steps", 0, "RL steps after the warm start.")

EVAL_KEYS = ("accuracy", "code_use_rate", "answer_rate", "response_length", "truncated_rate",
             "num_episodes")
STEP_KEYS = ("reward", "reward_std", "accuracy", "code_use_rate", "response_length",
             "time_step_s")


def evaluate_policy(policy, samples: int) -> dict[str, dict[str, float]]:
    """Held-out results with tools: greedy, and ``samples`` episodes a problem at T=1."""
    from agentic_jax.evaluation.held_out import EvalConfig, evaluate

    out = {}
    for name, cfg in (("greedy", EvalConfig(temperature=0.0)),
                      ("t1", EvalConfig(temperature=1.0, num_samples=samples))):
        began = time.perf_counter()
        metrics = evaluate(policy, tools=True, cfg=cfg)
        out[name] = {k: metrics[k] for k in EVAL_KEYS if k in metrics}
        out[name]["time_s"] = time.perf_counter() - began
    return out


def _line(label: str, result: dict[str, dict[str, float]]) -> str:
    parts = []
    for name, m in result.items():
        n = m["num_episodes"]
        parts.append(f"{name}: code use {m['code_use_rate'] * n:.0f}/{n:.0f}, accuracy "
                     f"{m['accuracy'] * n:.0f}/{n:.0f}, length {m['response_length']:.0f}")
    return f"{label:>7}  " + "; ".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) > 1 or _CONFIG.value is None:
        print("usage: bench_warmstart.py --config=CONFIG [--samples=N] [--rl_steps=N] "
              "[--out=FILE]", file=sys.stderr)
        return 2
    import jax
    import jax.numpy as jnp
    from bench_train_step import time_matmul  # tools/ is the script's directory

    from agentic_jax.config import read_config
    from agentic_jax.rl import state as state_lib
    from agentic_jax.training.builders import build_run, publish
    from agentic_jax.training.run import rl_step
    from agentic_jax.training.warmstart import warm_start

    size = 2048
    gflops = 2 * size**3 / time_matmul(size, jnp.float32).wall / 1e9
    cfg = read_config(_CONFIG.value)
    if not cfg.warmstart.enabled:
        print("the config's warmstart.enabled is False: nothing to measure", file=sys.stderr)
        return 2
    run, state = build_run(cfg)
    try:
        publish(run.policy, state.params)
        before = evaluate_policy(run.policy, _SAMPLES.value)
        print(_line("before", before), flush=True)
        params, ws = warm_start(run, state.params, progress=False)
        publish(run.policy, params)
        after = evaluate_policy(run.policy, _SAMPLES.value)
        print(_line("after", after), flush=True)
        w = cfg.warmstart
        print(f"warm start: {ws['warmstart/examples']:.0f} examples "
              f"({ws['warmstart/tool_fraction']:.0%} with the tool), {w.steps} steps of "
              f"{w.batch_size} at lr {w.lr:g}, loss {ws['warmstart/first_loss']:.3f} -> "
              f"{ws['warmstart/loss']:.3f}, {ws['warmstart/time_s']:.0f} s wall "
              f"(float32 {size}^2 matmul at {gflops:.0f} GFLOP/s)", flush=True)
        state = state_lib.with_reference(state.replace(params=params), cfg.rl.needs_reference)
        steps, skipped = [], 0
        for step in range(1, _RL_STEPS.value + 1):
            state, metrics, skipped = rl_step(run, state, step, skipped)
            steps.append({k: float(metrics[k]) for k in STEP_KEYS if k in metrics})
            print(f"rl step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in steps[-1].items()),
                  flush=True)
    finally:
        run.policy.close()
    record = {"config": _CONFIG.value.to_dict(), "matmul_gflops": gflops,
              "devices": f"{jax.device_count()} x {jax.devices()[0].platform}",
              "before": before, "after": after, "warmstart": ws, "rl_steps": steps}
    if _OUT.value:
        with open(_OUT.value, "w") as f:
            json.dump(record, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    app.run(main)
