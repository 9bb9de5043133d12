"""Benchmark the Pallas flash-attention kernel against jax.nn.dot_product_attention.

Measures TFLOP/s of the forward and forward+backward passes (bf16, causal, head dim 128) for the
Pallas kernel and for jax.nn.dot_product_attention with implementation="xla" and "cudnn", plus a
large bf16 matmul as the device's practical peak, all in the same run, and prints ratios.

    python tools/bench_attention.py                  # on a CUDA GPU
    python tools/bench_attention.py --seq-lens 4096 8192 --iters 20
    python tools/bench_attention.py --smoke          # tiny interpret-mode run on CPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from agentic_jax.kernels import flash_attention

IMPLS = ("pallas", "cudnn", "xla")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--tokens", type=int, default=16384, help="batch * seq per measurement")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, runs on CPU")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seq_lens, args.tokens, args.heads, args.kv_heads = [128], 128, 2, 1
        args.iters, args.matmul_size = 2, 256
    return args


def time_call(fn: Callable, *args, iters: int) -> float:
    """Median wall seconds per call of a jitted fn, after one compile-and-warm-up call."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def attention_fn(impl: str, smoke: bool) -> Callable:
    if impl == "pallas":
        interpret = True if smoke else None
        return lambda q, k, v: flash_attention(q, k, v, causal=True, interpret=interpret)
    return lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=True, implementation=impl
    )


def attention_flops(batch: int, seq: int, heads: int, head_dim: int) -> tuple[float, float]:
    """(forward, forward+backward) FLOPs of causal attention: half of the 2 matmuls of
    2·T·S·D each; the backward does 5 such matmuls, i.e. 2.5x the forward."""
    forward = 4.0 * batch * heads * seq * seq * head_dim / 2
    return forward, forward * 3.5


def bench_one(impl: str, args: argparse.Namespace, seq: int) -> tuple[float, float] | str:
    """(forward TFLOP/s, forward+backward TFLOP/s), or the reason it could not run."""
    batch = max(1, args.tokens // seq)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(keys[0], (batch, seq, args.heads, args.head_dim), jnp.bfloat16)
    k = jax.random.normal(keys[1], (batch, seq, args.kv_heads, args.head_dim), jnp.bfloat16)
    v = jax.random.normal(keys[2], (batch, seq, args.kv_heads, args.head_dim), jnp.bfloat16)
    attend = attention_fn(impl, args.smoke)
    forward = jax.jit(attend)
    train = jax.jit(jax.grad(lambda q, k, v: attend(q, k, v).astype(jnp.float32).sum(), (0, 1, 2)))
    fwd_flops, train_flops = attention_flops(batch, seq, args.heads, args.head_dim)
    try:
        fwd_s = time_call(forward, q, k, v, iters=args.iters)
        train_s = time_call(train, q, k, v, iters=args.iters)
    except Exception as err:  # OOM or an unsupported configuration: report it in the table
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return fwd_flops / fwd_s / 1e12, train_flops / train_s / 1e12


def matmul_tflops(size: int, iters: int) -> float:
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    a = jax.random.normal(keys[0], (size, size), jnp.bfloat16)
    b = jax.random.normal(keys[1], (size, size), jnp.bfloat16)
    seconds = time_call(jax.jit(jnp.matmul), a, b, iters=iters)
    return 2.0 * size**3 / seconds / 1e12


def max_abs_error_vs_xla(args: argparse.Namespace) -> float:
    """Sanity check that the compiled kernel agrees with XLA before timing it."""
    shape = (1, 512, args.heads, args.head_dim)
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    q = jax.random.normal(keys[0], shape, jnp.bfloat16)
    kv_shape = shape[:2] + (args.kv_heads, args.head_dim)
    k = jax.random.normal(keys[1], kv_shape, jnp.bfloat16)
    v = jax.random.normal(keys[2], kv_shape, jnp.bfloat16)
    ours = jax.jit(attention_fn("pallas", args.smoke))(q, k, v).astype(jnp.float32)
    theirs = jax.jit(attention_fn("xla", args.smoke))(q, k, v).astype(jnp.float32)
    return float(jnp.max(jnp.abs(ours - theirs)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backend = jax.default_backend()
    if backend != "gpu" and not args.smoke:
        print(
            f"bench_attention: needs a CUDA GPU, found backend {backend!r}. "
            "Run it on a GPU machine, or pass --smoke for a tiny CPU check.",
            file=sys.stderr,
        )
        return 0
    impls = ("pallas", "xla") if args.smoke else IMPLS
    device = jax.devices()[0]
    print(f"device: {device.device_kind} | bf16 causal, Hq={args.heads} Hkv={args.kv_heads} "
          f"D={args.head_dim}, batch*seq={args.tokens}")  # fmt: skip
    print(f"max |pallas - xla| on a 512-token check: {max_abs_error_vs_xla(args):.3e}")
    peak = matmul_tflops(args.matmul_size, args.iters)
    print(f"bf16 matmul {args.matmul_size}^3: {peak:.1f} TFLOP/s")
    header = "  seq | " + " | ".join(f"{i:>6} fwd  {i:>6} f+b" for i in impls)
    print(header + " | pallas/cudnn f+b | pallas fwd/matmul")
    failures = []
    for seq in args.seq_lens:
        results = {impl: bench_one(impl, args, seq) for impl in impls}
        cells = []
        for impl in impls:
            r = results[impl]
            if isinstance(r, tuple):
                cells.append(f"{r[0]:11.1f} {r[1]:10.1f}")
            else:
                cells.append(f"{'failed':>22}")
                failures.append(f"{impl} at seq {seq}: {r}")
        ours, cudnn = results["pallas"], results.get("cudnn")
        vs_cudnn = (
            f"{ours[1] / cudnn[1]:.2f}x"
            if isinstance(ours, tuple) and isinstance(cudnn, tuple) else "n/a"
        )  # fmt: skip
        vs_peak = f"{ours[0] / peak:.0%}" if isinstance(ours, tuple) else "n/a"
        print(f"{seq:>5} | " + " | ".join(cells) + f" | {vs_cudnn:>16} | {vs_peak:>17}")
    for note in failures:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
