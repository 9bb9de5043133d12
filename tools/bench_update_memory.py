"""Peak memory of one RL update (PPO step with AdamW) against what it must hold: the weights,
their gradients and the optimizer's two moments.

Each variant runs in a fresh process (its peak RSS is the process's own), on the same random
batch of ``--rows`` packed rows of ``--seq-len`` tokens, with the model's real shape and random
weights (the values do not change the memory):

  before         the LM head applied to the whole batch at once (the [B, T, V] logits, their
                 log-softmax and gradients live together) and every layer's activations kept
                 for the backward pass, attention probabilities [B, H, T, T] included
  pieces only    the LM head in pieces along the sequence (agentic_jax.rl.forward)
  full FT        pieces, and each layer recomputed in the backward pass (model.remat=full):
                 what a pretrained model trains with
  LoRA r=16      the same, only rank-16 adapters (and the value head) train

    python tools/bench_update_memory.py --model=smollm2-135m        # the built-in real model
    python tools/bench_update_memory.py --model=tiny-16m --rows 8   # any preset, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

VARIANTS = {
    "before": dict(lora_rank=0, whole_logits=True, remat="none"),
    "pieces only": dict(lora_rank=0, whole_logits=False, remat="none"),
    "full FT": dict(lora_rank=0, whole_logits=False, remat="full"),
    "LoRA r=16": dict(lora_rank=16, whole_logits=False, remat="full"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m",
                   help="a preset, a built-in checkpoint (smollm2-135m) or an HF directory")
    p.add_argument("--rows", type=int, default=32, help="packed rows of one update minibatch")
    p.add_argument("--seq-len", type=int, default=384)
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated subset of {list(VARIANTS)}")
    p.add_argument("--one", default="", help=argparse.SUPPRESS)  # a child process's variant
    return p.parse_args(argv)


def model_config(name: str, lora_rank: int, remat: str):
    from agentic_jax.models import get_preset
    from agentic_jax.models.builtin import checkpoint_dir
    from agentic_jax.models.hf_config import config_from_hf
    from agentic_jax.utils import read_json

    overrides = dict(value_head=True, lora_rank=lora_rank, remat=remat, scan_unroll=1)
    directory = name if os.path.isdir(name) else checkpoint_dir(name, "")
    if directory:
        return config_from_hf(read_json(os.path.join(directory, "config.json")), **overrides)
    return get_preset(name, **overrides)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def measure(args: argparse.Namespace, variant: str) -> dict:
    """One variant in this process: build, compile, run two updates; sizes in MiB."""
    import jax
    import numpy as np
    from flax import nnx

    from agentic_jax.models import Transformer
    from agentic_jax.rl import LossConfig, init_opt_state, make_optimizer, make_train_step
    from agentic_jax.rl import forward
    from agentic_jax.rl.shardings import params_and_rest

    spec = VARIANTS[variant]
    if spec["whole_logits"]:
        forward.FULL_LOGITS_MAX_ELEMENTS = 1 << 62
    cfg = model_config(args.model, spec["lora_rank"], spec["remat"])
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    optimizer = make_optimizer(1e-6, warmup_steps=0, total_steps=100, weight_decay=0.0)
    opt_state = init_opt_state(optimizer, state)
    nbytes = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree)) / 2**20
    weights, trainable = nbytes(state), nbytes(params_and_rest(state)[0])
    rng = np.random.default_rng(0)
    b, t = args.rows, args.seq_len
    batch = {
        "tokens": rng.integers(0, cfg.vocab_size, (b, t)).astype(np.int32),
        "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
        "loss_mask": (np.arange(t) >= t // 4).astype(np.float32)[None].repeat(b, 0),
        "old_logprobs": np.full((b, t), -np.log(cfg.vocab_size), np.float32),
        "advantages": rng.normal(size=(b, t)).astype(np.float32),
        "returns": rng.normal(size=(b, t)).astype(np.float32),
        "old_values": np.zeros((b, t), np.float32),
    }
    step = make_train_step(graphdef, optimizer, LossConfig())
    before = rss_mb()
    began = time.perf_counter()
    state, opt_state, metrics = step(state, opt_state, batch)
    jax.block_until_ready(metrics)
    first = time.perf_counter() - began
    began = time.perf_counter()
    state, opt_state, metrics = step(state, opt_state, batch)
    jax.block_until_ready(metrics)
    return dict(variant=variant, weights_mb=weights, trainable_mb=trainable,
                needed_mb=weights + 3 * trainable, rss_before_step_mb=before,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                first_step_s=first, step_s=time.perf_counter() - began,
                skipped=float(metrics["skipped"]))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.one:
        print(json.dumps(measure(args, args.one)))
        return
    rows = []
    for variant in [v.strip() for v in args.variants.split(",")]:
        if variant not in VARIANTS:
            sys.exit(f"error: --variants: unknown {variant!r}; expected {list(VARIANTS)}")
        out = subprocess.run(
            [sys.executable, __file__, f"--model={args.model}", f"--rows={args.rows}",
             f"--seq-len={args.seq_len}", f"--one={variant}"],
            capture_output=True, text=True, check=False)
        if out.returncode:
            sys.exit(f"error: {variant}: {out.stderr.strip().splitlines()[-1:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"model {args.model}, one update of {args.rows} x {args.seq_len} tokens "
          "(PPO + AdamW, float32); needed = weights + grads + 2 AdamW moments of what trains")
    print(f"{'variant':<14} {'weights':>9} {'needed':>9} {'peak RSS':>9} {'peak/needed':>12} "
          f"{'step s':>7} {'vs before':>9}")
    base = next((r for r in rows if r["variant"] == "before"), None)
    for r in rows:
        versus = f"{r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x" if base else "-"
        print(f"{r['variant']:<14} {r['weights_mb']:>7.0f}MB {r['needed_mb']:>7.0f}MB "
              f"{r['peak_rss_mb']:>7.0f}MB {r['peak_rss_mb'] / r['needed_mb']:>11.2f}x "
              f"{r['step_s']:>7.2f} {versus:>9}")


if __name__ == "__main__":
    main()
