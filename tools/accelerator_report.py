"""Accelerator report: paged decode vs the HBM roofline, flash attention vs cuDNN, train-step MFU.

One process, every check at qwen2.5-1.5b shapes in bf16 (about 8 minutes on one GPU):
  * paged decode: the rollout engine's decode round trip (Pallas paged kernel) for 64 slots at a
    1k-token context; bytes read per step (weights + K/V) / step time vs the peak bandwidth;
  * flash attention forward + backward (causal, GQA 12/2, head dim 128) at 4k..16k tokens,
    the Pallas kernel vs cuDNN through jax.nn.dot_product_attention;
  * the PPO train step's model FLOPs utilisation (6 N T + attention, vs the peak bf16 rate).
Writes OUT/accelerator_report.json and OUT/accelerator_report.md. A check that fails becomes a
row with its error, so one unsupported configuration does not hide the others.

    python tools/accelerator_report.py --out docs/results          # on a GPU
    python tools/accelerator_report.py --dry_run --out /tmp/report  # tiny shapes, CPU, interpret
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_attention  # noqa: E402  (a sibling tool: timing and FLOP counts of attention)
import bench_train_step  # noqa: E402

from agentic_jax.models import ModelConfig, Transformer, get_preset  # noqa: E402
from agentic_jax.rollout.engine import page_bytes  # noqa: E402
from agentic_jax.rollout.engine import paged_model as pm  # noqa: E402
from agentic_jax.rollout.engine.paged_model import SlotState  # noqa: E402
from agentic_jax.rollout.engine.paged_kv import init_paged_kv  # noqa: E402
from agentic_jax.kernels.paged_attention import PagePairs  # noqa: E402

_TINY = ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=16)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="accelerator_report", help="output directory")
    parser.add_argument("--preset", default="qwen2.5-1.5b")
    parser.add_argument("--peak_bandwidth_gbps", type=float, default=4800.0, help="H200: 4800")
    parser.add_argument("--peak_tflops", type=float, default=989.0, help="H200 dense bf16: 989")
    parser.add_argument("--dry_run", action="store_true",
                        help="tiny shapes on CPU, Pallas in interpret mode (a test of the code)")
    return parser.parse_args(argv)


def _median_seconds(fn: Callable[[], Any], iters: int) -> float:
    jax.block_until_ready(fn())
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def paged_decode(args: argparse.Namespace) -> list[dict]:
    """One decode round trip of the engine's program over full slots; bytes/s vs the peak."""
    dtype = "float32" if args.dry_run else "bfloat16"
    cfg = _TINY if args.dry_run else get_preset(args.preset, dtype=dtype, param_dtype=dtype)
    slots, context, steps, ps = (4, 24, 2, 8) if args.dry_run else (64, 1024, 32, 16)
    model = nnx.jit(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))()
    graphdef, params = nnx.split(model)
    engine_weights = pm.engine_weights(params, cfg)
    per_seq = -(-(context + steps) // ps)
    kv = init_paged_kv(cfg, slots * per_seq, ps)
    tables = np.arange(slots * per_seq, dtype=np.int32).reshape(slots, per_seq)
    pairs = PagePairs(np.repeat(np.arange(slots, dtype=np.int32), per_seq), tables.ravel(),
                      np.tile(np.arange(per_seq, dtype=np.int32) * ps, slots))
    state = {"kv": kv}

    def round_trip():
        st = SlotState(np.ones(slots, np.int32), np.full(slots, context, np.int32),
                       np.full(slots, steps, np.int32), np.ones(slots, bool),
                       np.zeros((slots, 2), np.uint32), np.full((slots, 1), -1, np.int32))
        out = pm.decode_jit(graphdef, engine_weights, state["kv"], st, tables, pairs,
                            np.zeros(slots, np.float32), np.ones(slots, np.float32),
                            jnp.int32(slots + 1), num_steps=steps, top_k=0, use_filter=False,
                            attention_impl="pallas")
        state["kv"] = out.kv
        return out.tokens

    step_s = _median_seconds(round_trip, 2 if args.dry_run else 5) / steps
    weights = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    kv_read = slots * (context + steps / 2) * page_bytes(cfg, ps) / ps
    achieved = (weights + kv_read) / step_s / 1e9
    return [{"check": "paged decode step", "shape": f"{slots} slots x {context} ctx, page {ps}",
             "value": f"{step_s * 1e3:.3f} ms/step, {achieved:.1f} GB/s",
             "vs": f"{achieved / args.peak_bandwidth_gbps:.1%} of {args.peak_bandwidth_gbps:.0f}"
                   " GB/s HBM roofline"}]


def flash_vs_cudnn(args: argparse.Namespace) -> list[dict]:
    """Forward + backward TFLOP/s of the Pallas kernel and of cuDNN (xla on a dry run)."""
    other = "xla" if args.dry_run else "cudnn"
    ns = argparse.Namespace(tokens=128 if args.dry_run else 16384, heads=4 if args.dry_run else 12,
                            kv_heads=2, head_dim=16 if args.dry_run else 128,
                            iters=1 if args.dry_run else 5, smoke=args.dry_run)
    rows = []
    for seq in ([128] if args.dry_run else [4096, 8192, 16384]):
        ours, theirs = (bench_attention.bench_one(i, ns, seq) for i in ("pallas", other))
        if isinstance(ours, str) or isinstance(theirs, str):
            value, vs = "failed", str(ours if isinstance(ours, str) else theirs)
        else:
            value = f"pallas {ours[1]:.2f} / {other} {theirs[1]:.2f} TFLOP/s (fwd+bwd)"
            vs = f"{ours[1] / theirs[1]:.2f}x {other}; fwd {ours[0] / theirs[0]:.2f}x"
        rows.append({"check": "flash attention fwd+bwd", "shape": f"T={seq}, "
                     f"{ns.heads}/{ns.kv_heads} heads, D={ns.head_dim}, bf16", "value": value,
                     "vs": vs})
    return rows


def train_mfu(args: argparse.Namespace) -> list[dict]:
    """The PPO train step at the preset's shapes: model FLOPs / step time / peak."""
    flags = ["--smoke"] if args.dry_run else [
        "--preset", args.preset, "--vocab", "0", "--dtype", "bfloat16", "--seq-len", "2048",
        "--batch", "8", "--remat", "full", "--steps", "3"]
    from agentic_jax.rl import LossConfig, init_opt_state, make_optimizer, make_train_step

    targs = bench_train_step.parse_args(flags)
    cfg = bench_train_step.model_config(targs)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    optimizer = make_optimizer(1e-4, warmup_steps=0, total_steps=1000, weight_decay=0.01)
    opt_state = init_opt_state(optimizer, state)
    step = make_train_step(graphdef, optimizer, LossConfig(entropy_coef=0.01))
    batch = jax.tree.map(jnp.asarray, bench_train_step.make_batch(cfg, targs.batch, targs.seq_len))
    timing = bench_train_step.time_steps(step, state, opt_state, batch, targs.steps)
    flops = bench_train_step.train_flops_per_token(cfg, targs.seq_len) * targs.batch * targs.seq_len
    peak = args.peak_tflops
    if args.dry_run:   # no datasheet peak for a CPU: its measured matmul rate stands in
        mm = bench_train_step.time_matmul(targs.matmul_size, cfg.compute_dtype)
        peak = 2 * targs.matmul_size ** 3 / mm.wall / 1e12
    tflops = flops / timing.wall / 1e12
    return [{"check": "train step MFU", "shape": f"{targs.preset}, {targs.batch}x{targs.seq_len}",
             "value": f"{timing.wall * 1e3:.1f} ms/step, {tflops:.3f} TFLOP/s",
             "vs": f"{tflops / peak:.1%} of {peak:.3g} TFLOP/s"}]


def _run_check(check: Callable[[argparse.Namespace], list[dict]], args) -> list[dict]:
    try:
        return check(args)
    except Exception as err:  # one failed check is a row, the others still run
        return [{"check": check.__name__, "shape": "", "value": "failed",
                 "vs": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if jax.default_backend() == "cpu" and not args.dry_run:
        print("accelerator_report: JAX's backend is cpu; run on a GPU/TPU or pass --dry_run",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    rows = [r for check in (paged_decode, flash_vs_cudnn, train_mfu) for r in _run_check(check, args)]
    report = {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(),
              "dry_run": args.dry_run, "seconds": time.perf_counter() - start, "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "accelerator_report.json"), "w") as f:
        json.dump(report, f, indent=2)
    lines = [f"Device: {report['device']} ({report['backend']}{', dry run' if args.dry_run else ''})"
             f", {report['seconds']:.0f} s", "", "| check | shape | measured | vs |",
             "|---|---|---|---|"]
    lines += [f"| {r['check']} | {r['shape']} | {r['value']} | {r['vs']} |" for r in rows]
    with open(os.path.join(args.out, "accelerator_report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
