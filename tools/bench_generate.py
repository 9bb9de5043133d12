"""Benchmark `generate` against Hugging Face transformers `generate` on the same weights.

Default mode: a tiny random Qwen2 (4 layers, hidden 256, GQA, vocab 1024) is made with
transformers, saved, and loaded back through `from_pretrained`; both libraries then generate
128 new tokens for 32 prompts of 16 tokens (greedy, then sampled at temperature 1), warmed up,
timed as the median of repeats in the same run. PyTorch runs on CPU with `--torch_threads`.

    python tools/bench_generate.py                          # ours vs HF on CPU, prints the ratio
    python tools/bench_generate.py --workload=longtail      # RL-like rollouts: engine vs HF
                                                            # generate / generate_batch
    python tools/bench_generate.py --model=smollm2-135m     # a real model's chat prompts
    python tools/bench_generate.py --tool_loop              # tool loop's accelerator idle fraction
    python tools/bench_generate.py --gpu_preset qwen2.5-1.5b   # decode tok/s + bandwidth roofline

`--tool_loop` runs the real AgentLoop, rollout engine and Sandbox. A random model never writes
code, so the engine's decode runs the model for real (device time is genuine) but the tokens it
records are replaced by a script: per row code blocks, their sandbox runs, then a boxed answer.
Only the token content is scripted; the timings of decoding, appending and the sandbox are real.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time

import jax
import numpy as np
from flax import nnx

import bench_clock
from agentic_jax.models import Transformer, from_pretrained, get_preset
from agentic_jax.rollout import RowSpec, SamplingParams, generate
from agentic_jax.rollout.engine import Engine, EngineConfig, Request


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=None,
                        help="rows (default 32; 64 with --gpu_preset)")
    parser.add_argument("--prompt_len", type=int, default=16)
    parser.add_argument("--new_tokens", type=int, default=None,
                        help="new tokens (the cap with --workload=longtail); default 128 / 384")
    parser.add_argument("--workload", choices=("short", "longtail"), default="short")
    parser.add_argument("--model", default=None,
                        help="a real checkpoint (smollm2-135m, an HF directory): its chat "
                             "workloads instead (tools/bench_generate_real.py)")
    parser.add_argument("--real_workloads", default="chat,longtail",
                        help="--model: comma-separated subset of chat,longtail,episodes,profile")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="--model: what HF and the engine both compute in")
    parser.add_argument("--layer_arrays", choices=("auto", "0", "1"), default="auto",
                        help="--model: the engine's EngineConfig.layer_arrays (CPU: weights "
                             "one array a layer, layers unrolled); auto: the engine's default")
    parser.add_argument("--prefix_caching", type=int, choices=(0, 1), default=1,
                        help="--model: the engine's EngineConfig.prefix_caching (prompts "
                             "that start alike prefill their common full pages once; 1 is "
                             "the engine's default)")
    parser.add_argument("--speculative", type=int, default=0,
                        help="real model: speculative tokens k for the episodes workload "
                             "(0: 4) and, when set, an engine k=0 / k comparison of the "
                             "other workloads")
    parser.add_argument("--real_cap", type=int, default=0,
                        help="--model: new-token cap (0: the workload's own, 128 / 256)")
    parser.add_argument("--prompts", type=int, default=96, help="longtail: ragged prompts")
    parser.add_argument("--stop_ids", type=int, default=4, help="longtail: stop ids")
    parser.add_argument("--vocab", type=int, default=512, help="longtail: vocabulary")
    parser.add_argument("--slots", default="32,64",
                        help="engine decode slots, comma-separated: one engine row each "
                             "(longtail); the first is used by --tool_loop")
    parser.add_argument("--decode_steps", type=int, default=32,
                        help="longtail: engine decode steps per round trip")
    parser.add_argument("--kv_fraction", type=float, default=0.35,
                        help="longtail: engine page pool as a fraction of a dense cache")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is kept")
    parser.add_argument("--attention_baseline", type=int, choices=(0, 1), default=1,
                        help="--model: also time the engine with XLA's decode attention in "
                             "the same interleaved run, when its default is the native kernel")
    parser.add_argument("--torch_threads", type=int, default=2)
    parser.add_argument("--tool_loop", action="store_true",
                        help="measure the tool loop's accelerator idle fraction instead")
    parser.add_argument("--gpu_preset", default=None,
                        help="model preset for the accelerator decode benchmark")
    parser.add_argument("--peak_bandwidth_gbps", type=float, default=4800.0,
                        help="device memory bandwidth in GB/s (H200: 4800)")
    parser.add_argument("--allow_cpu", action="store_true",
                        help="let --gpu_preset run on CPU (a smoke test of the code path only)")
    args = parser.parse_args(argv)
    longtail = args.workload == "longtail"
    if args.new_tokens is None:
        args.new_tokens = 384 if longtail else 128
    if args.batch is None:
        args.batch = 64 if args.gpu_preset else 32
    return args


# ------------------------------------------------------------------------ ours vs transformers


def hf_model(directory: str, vocab: int = 1024):
    """A random 4-layer, 256-wide GQA Qwen2 made with transformers and saved to `directory`."""
    import torch
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    model.save_pretrained(directory)
    return model


def hf_generate(model, prompts: np.ndarray, new_tokens: int, sample: bool) -> np.ndarray:
    """HF generate of exactly `new_tokens` tokens per row (no EOS), returned as [B, new]."""
    import torch
    import transformers

    # Plain sampling at temperature 1 as ours does (HF would otherwise apply top_k=50).
    sampling = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0} if sample else {}
    config = transformers.GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
        pad_token_id=0, **sampling)
    with torch.no_grad():
        out = model.generate(torch.as_tensor(prompts, dtype=torch.long),
                             generation_config=config)
    return out[:, prompts.shape[1]:].numpy()


def bench_vs_transformers(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, 1024, (args.batch, args.prompt_len))
    prompt_lists = prompts.tolist()
    with tempfile.TemporaryDirectory() as directory:
        hf = hf_model(directory)
        ours = from_pretrained(directory, dtype="float32")
    tokens = args.batch * args.new_tokens
    print(f"model: Qwen2 4 layers, hidden 256, 8/2 heads, vocab 1024, float32; batch "
          f"{args.batch}, prompt {args.prompt_len}, new tokens {args.new_tokens}; median of "
          f"{args.repeats}, interleaved")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.device_count()} devices); "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads; "
          f"{bench_clock.machine_line()}")
    for mode, temperature in (("greedy", 0.0), ("sampled", 1.0)):
        run_ours = functools.partial(generate, ours, prompt_lists,
                                     max_new_tokens=args.new_tokens, temperature=temperature)
        run_hf = functools.partial(hf_generate, hf, prompts, args.new_tokens,
                                   sample=temperature > 0)
        sides = bench_clock.interleaved({"HF generate": run_hf, "ours: generate": run_ours},
                                        args.repeats)
        print(f"{mode}:")
        for line in bench_clock.table(sides, dict.fromkeys(sides, tokens), ["HF generate"]):
            print("  " + line)
        if mode == "greedy":
            agree = np.mean(np.asarray(run_ours()) == run_hf())
            print(f"         greedy tokens equal to HF's: {agree:.1%}")


# ------------------------------------------------------------------------ accelerator decode


def decode_bytes_per_step(model: Transformer, batch: int, context: float) -> float:
    """Bytes a decode step must read: every parameter once, plus K and V of `context` cached
    positions per row in every layer."""
    cfg = model.cfg
    params = nnx.state(model, nnx.Param)
    param_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    kv_itemsize = np.dtype(cfg.compute_dtype).itemsize
    kv_bytes = 2 * cfg.num_layers * batch * context * cfg.num_kv_heads * cfg.head_dim * kv_itemsize
    return param_bytes + kv_bytes


def bench_accelerator(args: argparse.Namespace) -> None:
    backend = jax.default_backend()
    if backend == "cpu" and not args.allow_cpu:
        raise SystemExit(f"--gpu_preset {args.gpu_preset}: needs a GPU or TPU, but JAX's backend "
                         f"is 'cpu'; nothing was measured (--allow_cpu runs it anyway as a smoke "
                         f"test).")
    dtype = "float32" if backend == "cpu" else "bfloat16"
    cfg = get_preset(args.gpu_preset, dtype=dtype, param_dtype=dtype)
    # Created inside jit so the random weights are drawn on the device, not on the host.
    model = nnx.jit(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))()
    # Every row in a slot of its own, all decode steps in one round trip.
    engine = Engine(model, EngineConfig(
        num_slots=args.batch, max_seq_len=args.prompt_len + args.new_tokens,
        decode_steps=args.new_tokens, prefill_rows=args.batch,
        sampling=SamplingParams(temperature=0.0)))
    prompts = np.random.default_rng(0).integers(0, cfg.vocab_size,
                                                (args.batch, args.prompt_len)).tolist()
    keys = jax.random.split(jax.random.key(0), args.batch)
    runs = iter(range(1_000_000))

    def decode_seconds() -> float:
        """The engine's decode seconds for the batch (its prefill not counted)."""
        engine.reset_stats()
        run = next(runs)
        for i, prompt in enumerate(prompts):
            engine.submit(Request((run, i), tuple(prompt), args.new_tokens, keys[i]))
        engine.run()
        return engine.stats.decode_s

    decode_seconds()
    seconds = statistics.median(decode_seconds() for _ in range(args.repeats))
    steps_per_s = args.new_tokens / seconds
    step_bytes = decode_bytes_per_step(model, args.batch, args.prompt_len + args.new_tokens / 2)
    roofline = step_bytes * steps_per_s / (args.peak_bandwidth_gbps * 1e9)
    print(f"preset {args.gpu_preset} ({cfg.num_params() / 1e9:.2f}B params, {dtype}) on "
          f"{jax.devices()[0].device_kind}; batch {args.batch}, prompt {args.prompt_len}, "
          f"{args.new_tokens} decode steps, median of {args.repeats}")
    print(f"decode: {args.batch * steps_per_s:.0f} tok/s ({steps_per_s:.1f} steps/s); "
          f"{step_bytes / 1e9:.3f} GB read per step (params + mean KV cache)")
    print(f"memory-bandwidth roofline: {roofline:.1%} of {args.peak_bandwidth_gbps:.0f} GB/s")


# ------------------------------------------------------------------------ tool loop


class ScriptedTokensEngine(Engine):
    """A real rollout engine whose decode runs the model as usual but records scripted tokens.

    Each request cycles through its turns (token lists, each ending where the agent loop sees
    an event: a closed code block or a boxed answer). The loop cuts a turn right after its
    event, so a request's position in its script advances to the next turn once the current
    one is out. The device never sees a scripted stop, so every slot runs whole round trips.
    """

    def __init__(self, model: nnx.Module, cfg, scripts: list[list[list[int]]]):
        super().__init__(model, cfg)
        self.scripts = scripts
        self.turn = [0] * len(scripts)
        self.cursor = [0] * len(scripts)

    def _take_tokens(self, seq, toks, lps, vals, stopped):
        b = seq.request.request_id
        turns = self.scripts[b]
        script = turns[min(self.turn[b], len(turns) - 1)]
        piece = script[self.cursor[b]:self.cursor[b] + len(toks)]
        toks = np.array(toks)
        toks[:len(piece)] = piece
        self.cursor[b] += len(toks)
        if self.cursor[b] >= len(script):
            self.turn[b], self.cursor[b] = self.turn[b] + 1, 0
        super()._take_tokens(seq, toks, lps, vals, False)


def tool_scripts(tokenizer, batch: int, code_turns: int) -> list[list[list[int]]]:
    """Per row: `code_turns` code blocks of differing lengths and run times, then an answer."""
    from agentic_jax.data.prompts import code_block, final_answer

    scripts = []
    for b in range(batch):
        filler = "Let me compute this step by step. " * (b % 4)
        turns = [f"{filler}{code_block(f'print(sum(i * i for i in range({20000 * (b + t + 1)})))')}"
                 for t in range(code_turns)]
        turns.append(final_answer(str(b)))
        scripts.append([tokenizer.encode(t, add_special_tokens=False) for t in turns])
    return scripts


def bench_tool_loop(args: argparse.Namespace) -> None:
    from agentic_jax.data import builtin_tokenizer
    from agentic_jax.data.prompts import format_prompt
    from agentic_jax.models import ModelConfig
    from agentic_jax.rollout import AgentConfig, AgentLoop, ToolController, build_service
    from agentic_jax.sandbox import Sandbox, SandboxConfig

    tokenizer = builtin_tokenizer()
    cfg = ModelConfig(vocab_size=1024, hidden_size=256, intermediate_size=768, num_layers=4,
                      num_heads=8, num_kv_heads=2, head_dim=32, qkv_bias=True)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    prompts = [tokenizer.encode(format_prompt(f"What is the sum of i*i for i below {b}?"),
                                add_special_tokens=False) for b in range(args.batch)]
    max_length = max(len(p) for p in prompts) + 384
    agent_cfg = AgentConfig(max_length=max_length)
    engine_cfg = EngineConfig(num_slots=min(int(args.slots.split(",")[0]), args.batch),
                              max_seq_len=max_length,
                              decode_steps=16)
    controller = ToolController(max_tool_calls=2, mode="fixed", timeout_ms=2000)
    # The result cache is off: every snippet really runs.
    with Sandbox(SandboxConfig(timeout_ms=2000, cache_size=0)) as sandbox:
        results = []
        for _ in range(args.repeats + 1):  # the first run compiles
            engine = ScriptedTokensEngine(model, engine_cfg,
                                          tool_scripts(tokenizer, args.batch, 2))
            service = build_service(engine, tokenizer, agent_cfg, sandbox=sandbox)
            loop = AgentLoop(service, controller, agent_cfg, sandbox)
            results.append(loop.run([RowSpec(p) for p in prompts], jax.random.key(0)))
    episodes, _ = results[-1]
    timings = [t for _, t in results[1:]]
    calls = sum(e.num_tool_calls for e in episodes)
    failures = sum(e.num_tool_failures for e in episodes)
    tool_s = sum(e.tool_ms for e in episodes) / 1e3
    med = {k: statistics.median(t.get(k, 0.0) for t in timings) for k in timings[0]}
    print(f"tool loop: batch {args.batch}, {engine_cfg.num_slots} slots, 4-layer 256-wide "
          f"model on {jax.devices()[0].platform}, scripted code turns, real engine and "
          f"sandbox; median of {args.repeats}")
    print(f"tool calls {calls} ({failures} failed), summed sandbox latency {tool_s:.2f} s, "
          f"answers {sum(e.finish_reason == 'answer' for e in episodes)}/{len(episodes)}")
    print(f"rollout {med['rollout_s']:.2f} s = engine steps {med.get('decode_s', 0):.2f} s "
          f"(prefill and appends {med['time_engine_prefill_s']:.2f} s, decode "
          f"{med['time_engine_decode_s']:.2f} s) + waiting for tools {med.get('tool_wait_s', 0):.2f} s"
          f" + host work")
    print(f"slot utilisation {med['engine_slot_utilisation']:.1%}; KV pages peak "
          f"{med['engine_pages_peak']:.0f} of {med['engine_pages_pool']:.0f}; prefix hits "
          f"{med['engine_prefix_hits']:.0f}; preemptions {med['engine_preemptions']:.0f}")
    print(f"accelerator idle fraction: {med['accelerator_idle_frac']:.1%} (waiting for tools "
          f"only: {med.get('tool_wait_s', 0) / med['rollout_s']:.1%})")


def bench_longtail(args: argparse.Namespace) -> None:
    import torch

    import bench_generate_longtail

    torch.set_num_threads(args.torch_threads)
    with tempfile.TemporaryDirectory() as directory:
        hf = hf_model(directory, args.vocab)
        ours = from_pretrained(directory, dtype="float32")
    bench_generate_longtail.run(args, hf, ours)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.model:
        import bench_generate_real

        bench_generate_real.run(args)
    elif args.workload == "longtail":
        bench_longtail(args)
    elif args.gpu_preset:
        bench_accelerator(args)
    elif args.tool_loop:
        bench_tool_loop(args)
    else:
        bench_vs_transformers(args)


if __name__ == "__main__":
    main(sys.argv[1:])
