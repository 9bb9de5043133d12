"""Wall time per RL step of synchronous against overlapped rollouts (``rl.async_mode``), in one
run: each mode trains the same steps from the same starting checkpoint in its own process (no
compilation cache shared), the modes interleaved round by round, and every figure is printed as
a ratio to ``sync`` of the same round.

    python tools/bench_async.py --init_from=RUN_DIR --steps=8        # the default run's shape
    python tools/bench_async.py --smoke --steps=6                    # the smoke shape, no init

Per mode: the mean step wall time (``time_step_s``) over the steps after the first two (which
compile), steps per hour, the staleness and the sampler / trainer busy fractions; the accuracy and
code-use curves of every run go to OUT/curves.png against step and against wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# name -> (rl.async_mode, rollout.max_staleness, rollout.stream_steps); the ":closed" modes are
# fully_async without streaming (a step's rollout starts after the previous one's last episode).
MODES = {"sync": ("sync", 0, True), "one_step_off": ("one_step_off", 1, True),
         "fully_async:1": ("fully_async", 1, True), "fully_async:2": ("fully_async", 2, True),
         "fully_async:1:closed": ("fully_async", 1, False),
         "fully_async:2:closed": ("fully_async", 2, False)}
WARM_STEPS = 2  # steps left out of the means: the first update and rollout compile


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--init_from", default="", help="a run or checkpoint directory to start from")
    p.add_argument("--smoke", action="store_true", help="configs/math_ppo.py:smoke's shape")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated of {list(MODES)}")
    p.add_argument("--out", default="/tmp/bench_async")
    p.add_argument("--extra", nargs="*", default=[], help="more --config.* flags for every run")
    args = p.parse_args(argv)
    unknown = [m for m in args.modes.split(",") if m not in MODES]
    if unknown:
        p.error(f"--modes: unknown {unknown}; expected some of {list(MODES)}")
    if args.steps <= WARM_STEPS:
        p.error(f"--steps: expected more than {WARM_STEPS} (the first ones compile)")
    return args


def run_mode(args: argparse.Namespace, mode: str, workdir: str) -> list[dict]:
    """Trains ``args.steps`` steps in ``mode`` in a fresh process; its metrics records."""
    async_mode, bound, stream = MODES[mode]
    config = "configs/math_ppo.py:smoke" if args.smoke else "configs/math_ppo.py"
    flags = [f"--config={config}", f"--workdir={workdir}",
             f"--config.training.total_steps={args.steps}",
             f"--config.checkpoint.every_steps={args.steps}",
             "--config.data.eval_size=8", "--config.logging.plots=False",
             "--config.logging.tensorboard=False", "--config.logging.transcripts_every=0",
             "--config.logging.progress=False",
             f"--config.rl.async_mode={async_mode}", f"--config.rollout.max_staleness={bound}",
             f"--config.rollout.stream_steps={stream}"]
    if args.init_from:
        flags.append(f"--config.checkpoint.init_from={args.init_from}")
    with open(workdir + ".log", "w") as log:
        subprocess.run([sys.executable, "-m", "agentic_jax.train", *flags, *args.extra],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(records: list[dict]) -> dict[str, float]:
    timed = records[WARM_STEPS:]

    def mean(key: str) -> float:
        """Over the steps that logged ``key`` (a zero-gradient step logs no mismatch)."""
        have = [r[key] for r in timed if key in r]
        return sum(have) / len(have) if have else 0.0

    step_s = mean("time_step_s")
    return {"step_s": step_s, "steps_per_hour": 3600.0 / step_s,
            "staleness_mean": mean("staleness_mean"),
            "staleness_max": max(r.get("staleness_max", 0.0) for r in timed),
            "sampler_busy": mean("time_sampler_busy_frac"),
            "trainer_busy": mean("time_trainer_busy_frac"),
            "slot_utilisation": mean("engine_slot_utilisation"),
            "streamed": mean("rollout_streamed"),
            "mismatch_kl": mean("mismatch_kl"), "accuracy": mean("accuracy")}


def plot(runs: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for name, records in runs.items():
        steps = [r["step"] for r in records]
        wall, total = [], 0.0
        for r in records:
            total += r.get("time_step_s", 0.0)
            wall.append(total)
        for col, x in enumerate((steps, wall)):
            axes[0, col].plot(x, [r["accuracy"] for r in records], label=name)
            axes[1, col].plot(x, [r["code_use_rate"] for r in records], label=name)
    for row, label in enumerate(("accuracy", "code use rate")):
        axes[row, 0].set_ylabel(label)
    axes[1, 0].set_xlabel("step")
    axes[1, 1].set_xlabel("wall time in RL steps (s)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    modes = args.modes.split(",")
    runs: dict[str, list[dict]] = {}
    rows = []
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else modes[::-1]  # alternate so no mode always runs first
        results = {}
        for mode in order:
            t0 = time.perf_counter()
            name = f"r{r}_{mode.replace(':', '_k')}"
            records = run_mode(args, mode, os.path.join(args.out, name))
            runs[name] = records
            results[mode] = summary(records)
            print(f"round {r} {mode}: {results[mode]['step_s']:.2f} s/step "
                  f"({time.perf_counter() - t0:.0f} s with start-up)", flush=True)
        base_mode = "sync" if "sync" in results else modes[0]
        base = results[base_mode]["step_s"]
        for mode in modes:
            rows.append((r, mode, results[mode], base / results[mode]["step_s"]))
    base_mode = "sync" if "sync" in modes else modes[0]
    print(f"\nspeed-up: against {base_mode} of the same round")
    print("\nround mode                  s/step  steps/h          speed-up  staleness mean/max  "
          "sampler/trainer busy  slots used  streamed  mismatch_kl  accuracy")
    for r, mode, s, speedup in rows:
        print(f"{r:5d} {mode:21s} {s['step_s']:7.2f} {s['steps_per_hour']:8.0f} "
              f"{speedup:17.2f}x {s['staleness_mean']:9.2f} / {s['staleness_max']:.0f}"
              f"{s['sampler_busy']:13.2f} / {s['trainer_busy']:.2f} "
              f"{s['slot_utilisation']:11.2f} {s['streamed']:9.2f} {s['mismatch_kl']:12.2e}"
              f" {s['accuracy']:9.3f}")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump([{"round": r, "mode": m, **s, "speedup_vs": base_mode, "speedup": x}
                   for r, m, s, x in rows],
                  f, indent=1)
    plot(runs, os.path.join(args.out, "curves.png"))
    print(f"\ncurves: {os.path.join(args.out, 'curves.png')}")


if __name__ == "__main__":
    main()
