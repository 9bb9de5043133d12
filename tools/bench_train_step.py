"""Benchmark the compiled PPO train step: tokens/s and achieved FLOP/s against a large matmul.

Model FLOPs are counted analytically (PaLM's 6 N + 12 L H D T per token, N = matmul
parameters including the LM head) and cross-checked against XLA's cost analysis of the compiled
step. A square matmul of the same dtype, measured in the same run, is the device's practical
peak; the printed ratio is the step's share of it.

    python tools/bench_train_step.py                        # ~19M-param model, T=512, CPU
    python tools/bench_train_step.py --preset qwen2.5-1.5b --dtype bfloat16 --batch 8 \
        --vocab 0 --remat full --matmul-size 8192           # on a GPU
    python tools/bench_train_step.py --smoke                # seconds, for a quick check
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer, get_preset
from agentic_jax.rl import LossConfig, init_opt_state, make_optimizer, make_train_step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny-16m")
    parser.add_argument("--vocab", type=int, default=8192, help="vocab size; 0 keeps the preset's")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--micro-batches", type=int, default=1)
    parser.add_argument("--dtype", default="float32", help="compute dtype of the model")
    parser.add_argument("--remat", default="none", choices=("none", "full", "dots"))
    parser.add_argument(
        "--scan-unroll",
        type=int,
        default=1,
        help="layers per iteration of the layer loop (ModelConfig.scan_unroll)",
    )
    parser.add_argument("--steps", type=int, default=5, help="timed steps after one warm-up")
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, a few seconds")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.vocab, args.seq_len, args.batch = "tiny-0.2m", 256, 64, 2
        args.steps, args.matmul_size = 2, 256
    return args


def model_config(args: argparse.Namespace) -> ModelConfig:
    overrides = {
        "value_head": True,
        "dtype": args.dtype,
        "remat": args.remat,
        "scan_unroll": args.scan_unroll,
        "max_seq_len": max(args.seq_len, 2048),
    }
    if args.vocab:
        overrides["vocab_size"] = args.vocab
    return get_preset(args.preset, **overrides)


def matmul_params(cfg: ModelConfig) -> int:
    """Parameters that take part in a matmul per token: attention, MLP and the LM head."""
    e, d = cfg.hidden_size, cfg.head_dim
    attention = e * cfg.num_heads * d * 2 + e * cfg.num_kv_heads * d * 2
    mlp = 3 * e * cfg.intermediate_size
    return cfg.num_layers * (attention + mlp) + e * cfg.vocab_size


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """6 N + 12 L H D T: forward + backward of the matmuls and of the attention scores (QK^T,
    AV over the full T; the causal mask halves the useful part, which is not discounted)."""
    attention = 12 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq_len
    return 6 * matmul_params(cfg) + attention


def make_batch(cfg: ModelConfig, batch: int, seq_len: int) -> dict[str, np.ndarray]:
    """Random tokens; the second half of every row is the response the loss sees."""
    rng = np.random.default_rng(0)
    mask = np.zeros((batch, seq_len), np.float32)
    mask[:, seq_len // 2 :] = 1.0
    normal = lambda scale: rng.normal(scale=scale, size=(batch, seq_len)).astype(np.float32)
    return {
        "tokens": rng.integers(0, cfg.vocab_size, (batch, seq_len)).astype(np.int32),
        "positions": np.broadcast_to(np.arange(seq_len, dtype=np.int32), (batch, seq_len)).copy(),
        "loss_mask": mask,
        "old_logprobs": normal(0.1) - np.log(cfg.vocab_size),
        "advantages": normal(1.0),
        "returns": normal(1.0),
        "old_values": normal(0.1),
    }


def compiled_flops(compiled) -> float | None:
    """FLOPs of one call from XLA's cost analysis, when the backend reports them."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        return None
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else None
    flops = (analysis or {}).get("flops")
    return float(flops) if flops and flops > 0 else None


def one_layer_xla_flops(cfg: ModelConfig, optimizer, batch, micro_batches: int) -> float | None:
    """XLA's FLOP count of the step compiled for `cfg` (meant with num_layers=1: the cost
    analysis counts a while-loop body once, so scanned layers would be undercounted)."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    opt_state = jax.eval_shape(lambda s: init_opt_state(optimizer, s), state)
    step = make_train_step(
        graphdef, optimizer, LossConfig(entropy_coef=0.01), micro_batches=micro_batches
    )
    return compiled_flops(step.lower(state, opt_state, batch).compile())


class Timing(NamedTuple):
    """Median seconds per call: wall clock, and this process's CPU time divided by the cores it
    may use (on a shared machine the wall clock also pays for other processes' work)."""

    wall: float
    cpu: float


def timed(call: Callable[[], object], iters: int) -> Timing:
    cores = len(os.sched_getaffinity(0))
    walls, cpus = [], []
    for _ in range(iters):
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(call())
        walls.append(time.perf_counter() - wall)
        cpus.append((time.process_time() - cpu) / cores)
    return Timing(statistics.median(walls), statistics.median(cpus))


def time_matmul(size: int, dtype, iters: int = 5) -> Timing:
    a = jnp.ones((size, size), dtype)
    b = jnp.ones((size, size), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(matmul(a, b))
    return timed(lambda: matmul(a, b), iters)


def time_steps(step, state, opt_state, batch, steps: int) -> Timing:
    """Per-step timing after one warm-up; state and opt_state are donated, so threaded through."""
    carry = list(step(state, opt_state, batch))
    jax.block_until_ready(carry[2])

    def call():
        carry[:] = step(carry[0], carry[1], batch)
        return carry[2]

    timing = timed(call, steps)
    if float(carry[2]["skipped"]):
        raise RuntimeError("the benchmarked step skipped its update (non-finite loss)")
    return timing


def report(
    args, cfg: ModelConfig, compile_s: float, step: Timing, matmul: Timing, xla_flops: float | None
) -> None:
    tokens = args.batch * args.seq_len
    flops = train_flops_per_token(cfg, args.seq_len) * tokens
    matmul_flops = 2 * args.matmul_size**3
    print(
        f"device: {jax.devices()[0].device_kind} x{jax.device_count()}  "
        f"backend: {jax.default_backend()}  cores: {len(os.sched_getaffinity(0))}"
    )
    print(
        f"model: {args.preset} vocab={cfg.vocab_size} params={cfg.num_params() / 1e6:.1f}M "
        f"dtype={args.dtype} remat={args.remat} scan_unroll={args.scan_unroll}  batch={args.batch}x{args.seq_len} "
        f"micro_batches={args.micro_batches}  compile {compile_s:.1f}s"
    )
    print(
        f"step: {step.wall * 1e3:.1f} ms  {tokens / step.wall:,.0f} tokens/s  "
        f"{flops / step.wall / 1e9:,.2f} GFLOP/s (analytic {flops / 1e9:,.1f} GFLOP/step)"
    )
    if xla_flops is not None:
        one_layer = train_flops_per_token(dataclasses.replace(cfg, num_layers=1), args.seq_len)
        print(
            f"cross-check on a 1-layer copy (XLA counts a scanned layer once): xla "
            f"{xla_flops / 1e9:,.2f} vs analytic {one_layer * tokens / 1e9:,.2f} GFLOP/step "
            f"(analytic / xla = {one_layer * tokens / xla_flops:.2f})"
        )
    print(
        f"matmul {args.matmul_size}^2 {jnp.dtype(cfg.compute_dtype).name}: "
        f"{matmul_flops / matmul.wall / 1e9:,.2f} GFLOP/s"
    )
    wall_ratio = (flops / step.wall) / (matmul_flops / matmul.wall)
    cpu_ratio = (flops / step.cpu) / (matmul_flops / matmul.cpu)
    print(f"ratio: step / matmul = {wall_ratio:.1%} (wall clock; {cpu_ratio:.1%} on CPU time)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cfg = model_config(args)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    optimizer = make_optimizer(1e-4, warmup_steps=0, total_steps=1000, weight_decay=0.01)
    opt_state = init_opt_state(optimizer, state)
    step = make_train_step(
        graphdef, optimizer, LossConfig(entropy_coef=0.01), micro_batches=args.micro_batches
    )
    batch = jax.tree.map(jnp.asarray, make_batch(cfg, args.batch, args.seq_len))

    start = time.perf_counter()
    compiled = step.lower(state, opt_state, batch).compile()
    compile_s = time.perf_counter() - start
    step_timing = time_steps(compiled, state, opt_state, batch, args.steps)
    matmul_timing = time_matmul(args.matmul_size, cfg.compute_dtype)
    one_layer = dataclasses.replace(cfg, num_layers=1)
    xla_flops = one_layer_xla_flops(one_layer, optimizer, batch, args.micro_batches)
    report(args, cfg, compile_s, step_timing, matmul_timing, xla_flops)


if __name__ == "__main__":
    main()
