"""The RL update's two savings, timed against the update without them in one process, rounds
interleaved (`bench_clock`): the LM head on the scored columns only (`rl.forward.scored_columns`)
and no separate old-log-prob pass for one optimizer step a batch
(`training.recompute_old_logprobs=auto`).

    python tools/bench_update_paths.py                      # SmolLM2-135M, 16 rows of 352
    python tools/bench_update_paths.py --rows 32 --repeats 5
    python tools/bench_update_paths.py --smoke              # a tiny model, seconds
    python tools/bench_update_paths.py --rows 24 --width 384 --paths=default   # the update alone

The update is what the training loop runs for GRPO with one update a step: the old-log-prob
pass (`compute_logprobs`, when it runs) and the compiled step (PPO-clip loss, AdamW, gradient
checkpointing, float32), on rows shaped like GSM8K episodes: a prompt of ``--prompt`` tokens,
then a response of ``--response`` tokens with a 20-token tool output inside (masked). The
weights are the architecture's at random (speed does not depend on their values).

    before     the pass, then the step, each with the LM head on every column
    scored     the same two with the head on the scored columns
    default    the step alone, head on the scored columns (what the loop runs now)

Printed: each path's wall and CPU seconds (median of ``--repeats`` rounds), the ratios against
``before`` (withheld when other processes took different shares of the machine), the float32
matmul rate, and the update's FLOP floor (`tools/bench_rl_step.FlopModel`) against each path.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_clock  # noqa: E402

from agentic_jax.models import Transformer, get_preset  # noqa: E402
from agentic_jax.rl import LossConfig, compute_logprobs, init_opt_state  # noqa: E402
from agentic_jax.rl import make_optimizer, make_train_step  # noqa: E402
from agentic_jax.rl.forward import scored_columns  # noqa: E402

PATHS = ("before", "scored", "default")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m",
                        help="a preset, a built-in checkpoint (smollm2-135m) or an HF directory")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--width", type=int, default=352, help="tokens a row")
    parser.add_argument("--prompt", type=int, default=150, help="prompt tokens a row")
    parser.add_argument("--response", type=int, default=128,
                        help="response tokens a row (a 20-token tool output among them)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="comma-separated subset of " + ",".join(PATHS) + " (default: all); "
                             "`--paths=default` times the loop's update alone, e.g. to compare "
                             "two checkouts run one after the other")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and rows")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.rows, args.width, args.prompt, args.response = (
            "tiny-0.2m", 4, 64, 20, 30)
        args.repeats = 1
    if args.prompt + args.response > args.width or args.response <= 20 or args.prompt < 1:
        parser.error(f"--prompt {args.prompt} + --response {args.response} (> 20) must fit "
                     f"--width {args.width}")
    if args.rows < 1 or args.repeats < 1:
        parser.error("--rows and --repeats: expected >= 1")
    args.paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown or not args.paths:
        parser.error(f"--paths: expected a subset of {','.join(PATHS)}, got {unknown or 'none'}")
    return args


def model_config(name: str):
    """A preset's or a built-in checkpoint's (smollm2-135m) or a Hugging Face directory's
    architecture, float32 with gradient checkpointing and no value head, as the GRPO recipes."""
    from agentic_jax.models.builtin import checkpoint_dir
    from agentic_jax.models.hf_config import config_from_hf
    from agentic_jax.utils import read_json

    overrides = dict(remat="full", value_head=False, dtype="float32", param_dtype="float32")
    directory = name if os.path.isdir(name) else checkpoint_dir(name, "")
    if directory:
        return config_from_hf(read_json(os.path.join(directory, "config.json")), **overrides)
    return get_preset(name, **overrides)


def make_batch(vocab: int, args: argparse.Namespace) -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    shape = (args.rows, args.width)
    mask = np.zeros(shape, np.float32)
    end = args.prompt + args.response
    mask[:, args.prompt:end] = 1.0
    mask[:, args.prompt + 10:args.prompt + 30] = 0.0  # the tool's output
    logprobs = rng.normal(scale=0.1, size=shape).astype(np.float32) - 2.0
    return jax.tree.map(jnp.asarray, {
        "tokens": rng.integers(0, vocab, shape).astype(np.int32),
        "positions": np.broadcast_to(np.arange(args.width, dtype=np.int32), shape).copy(),
        "loss_mask": mask,
        "sampler_logprobs": logprobs,
        # One advantage a row, as GRPO gives.
        "advantages": np.repeat(rng.normal(size=(args.rows, 1)), args.width, 1).astype(
            np.float32),
        "returns": np.zeros(shape, np.float32),
    })


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cfg = model_config(args.preset)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    optimizer = make_optimizer(1e-6, warmup_steps=0, total_steps=1000)
    loss = LossConfig(policy_loss="ppo", clip_low=0.2, clip_high=0.28, value_coef=0.0,
                      value_clip=None)
    step = make_train_step(graphdef, optimizer, loss)
    batch = make_batch(cfg.vocab_size, args)
    scored = scored_columns(batch["loss_mask"])
    carry = {"state": state, "opt": init_opt_state(optimizer, state)}

    def update(path: str):
        extra = {} if path == "before" else {"scored": scored}
        if path == "default":
            old = None
        else:
            old = compute_logprobs(graphdef, carry["state"], batch["tokens"],
                                   batch["positions"], **extra)[0]
        carry["state"], carry["opt"], metrics = step(carry["state"], carry["opt"],
                                                     {**batch, **extra, "old_logprobs": old})
        return jax.block_until_ready(metrics)

    print(f"{args.preset}: {cfg.num_params() / 1e6:.1f}M parameters, float32, remat full; "
          f"{args.rows} rows of {args.width} tokens: prompt {args.prompt}, response "
          f"{args.response} ({args.response - 20} scored, the LM head on "
          f"{scored.shape[1]} columns a row with scoring)")
    print(bench_clock.machine_line())
    paths = [p for p in PATHS if p in args.paths]
    sides = bench_clock.interleaved({p: functools.partial(update, p) for p in paths},
                                    repeats=args.repeats)
    for path in paths:
        print("  " + sides[path].describe())
    if "before" in sides:
        for path in paths[1:]:
            print("  " + bench_clock.ratio_line(sides[path], sides["before"]))
    try:
        from bench_rl_step import FlopModel
    except ImportError:  # trl's absence does not matter to the FLOP model
        return
    layers = cfg.num_layers * (2 * cfg.hidden_size * cfg.num_heads * cfg.head_dim
                               + 2 * cfg.hidden_size * cfg.num_kv_heads * cfg.head_dim
                               + 3 * cfg.hidden_size * cfg.intermediate_size)
    flops = FlopModel(layers, cfg.hidden_size * cfg.vocab_size)
    floor = flops.update_floor(args.rows * args.width, args.rows * (args.response - 20))
    gflops = bench_clock.matmul_gflops()
    floor_s = floor / (gflops * 1e9)
    print(f"update FLOP floor {floor / 1e12:.2f} TFLOP = {floor_s:.2f} s at {gflops:.0f} "
          f"GFLOP/s ({flops.describe()})")
    for path in paths:
        print(f"  {path}: {sides[path].wall / floor_s:.2f}x the floor")


if __name__ == "__main__":
    main()
