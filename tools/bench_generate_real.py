"""The real-model workloads of `bench_generate.py --model=NAME` (e.g. smollm2-135m).

Prompts are the curriculum's real problems under the model's chat template; sampling is at
temperature 1 and stops at the model's end-of-turn token, so response lengths are the model's
own. One run times, on the same weights, HF `generate` (static batch, left padding), HF
`generate_batch` (transformers' continuous batching) and the rollout engine, interleaved in
rounds so machine load falls on all alike:

  chat      32 prompts, up to 128 new tokens, as many engine slots as prompts
  longtail  96 prompts, up to 256 new tokens, 32 engine slots: more requests than slots, so
            finished slots are refilled (HF generate pads all 96 to the longest)
  episodes  32 tool-using episodes of the SmolLM2 recipe's format (the chat prompt, the
            reference program in a code block and its rendered output, as the warm start's
            examples hold them), the model writing the rest (up to 128 new tokens): the engine
            without and with speculative decoding (``--speculative=K`` drafts, default 4),
            interleaved, with the drafts' acceptance rate and tokens per decode row
  profile   one engine decode step of 32 rows (and of 8, 16 and 24) against a plain jitted
            forward of 32 tokens without a cache, HF's forward of 32 tokens with its KV cache (what each step of
            HF generate runs) and the FLOP floor at the measured matmul rate; wall and CPU
            time (all threads), the latter steadier when other work shares the cores

`--dtype=bfloat16` loads both HF and our model in bfloat16 (the engine then computes and keeps
its KV cache in it). tok/s counts the tokens each produced (up to and including the end-of-turn token). A float32
matmul's rate is printed beside them: absolute times only mean something with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import bench_clock
from agentic_jax.rollout.engine import Engine, EngineConfig
from agentic_jax.rollout.engine.runner import choose_layer_arrays

WORKLOADS = {"chat": dict(prompts=32, cap=128, slots=32),
             "longtail": dict(prompts=96, cap=256, slots=32)}


def chat_prompts(tokenizer, n: int, seed: int = 0) -> list[list[int]]:
    """``n`` curriculum problems (arithmetic and algebra) under the chat template."""
    from agentic_jax.data import generate_curriculum
    from agentic_jax.data.prompts import format_prompt
    from agentic_jax.data.tokenizer import encode_prompt

    problems = generate_curriculum(seed=seed, sizes={"arithmetic": 200, "algebra": 200})
    rng = np.random.default_rng(seed)
    picked = [problems[i] for i in rng.choice(len(problems), n, replace=False)]
    return [encode_prompt(tokenizer, format_prompt(p.question, template="chat",
                                                   tokenizer=tokenizer)) for p in picked]


def episode_contexts(tokenizer, n: int, stops: list[int], seed: int = 0) -> list[list[int]]:
    """``n`` tool-using episodes cut after the tool's output: the chat prompt, the reference
    program's code block and its rendered output (`warmstart_data.build_example`, the SmolLM2
    recipe's layout), what a rollout holds when the model writes its answer."""
    import contextlib
    import io

    from agentic_jax.data import generate_curriculum
    from agentic_jax.data.prompts import format_prompt
    from agentic_jax.data.tokenizer import encode_prompt
    from agentic_jax.training.warmstart_data import ExampleFormat, build_example

    problems = generate_curriculum(seed=seed, sizes={"arithmetic": 200, "algebra": 200})
    rng = np.random.default_rng(seed)
    layout = ExampleFormat(output_tokens=32, end_ids=tuple(stops))
    contexts = []
    for i in rng.permutation(len(problems)):
        problem, out = problems[i], io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(problem.solution_code, {})  # the curriculum's own reference programs
        prompt = encode_prompt(tokenizer, format_prompt(problem.question, template="chat",
                                                        tokenizer=tokenizer))
        example = build_example(problem, prompt, tokenizer, tool_output=out.getvalue(),
                                max_length=1 << 20, layout=layout)
        last_output = max(j for j, m in enumerate(example.loss_mask) if m == 0)
        contexts.append(example.tokens[:last_output + 1])
        if len(contexts) == n:
            return contexts
    return contexts


def speculative_workload(ours, prompts: list[list[int]], stops: list[int], cap: int,
                         cfg: EngineConfig, k: int, repeats: int, name: str) -> None:
    """The engine without and with ``k`` speculative tokens on the same prompts, interleaved;
    prints the table, the drafts' acceptance rate and tokens per decode row."""
    import bench_generate_longtail as lt

    spec_cfg = dataclasses.replace(cfg, speculative_tokens=k)
    fns = {"engine": functools.partial(lt.engine, ours, prompts, stops, cap, cfg),
           f"engine speculative k={k}": functools.partial(lt.engine, ours, prompts, stops,
                                                          cap, spec_cfg)}
    tokens = {label: fn() for label, fn in fns.items()}   # warm-up, compiling
    sides = bench_clock.interleaved(fns, repeats, warmup=False)
    lengths = [len(p) for p in prompts]
    print(f"{name}: {len(prompts)} contexts of {min(lengths)}..{max(lengths)} tokens, "
          f"temperature 1, cap {cap}, stop <|im_end|>; median of {repeats}, interleaved; "
          f"load average {os.getloadavg()[0]:.2f}")
    for line in bench_clock.table(sides, tokens, ["engine"]):
        print(line, flush=True)
    for label, c in (("engine", cfg), (f"k={k}", spec_cfg)):
        stats = lt.engine_stats(ours, prompts, stops, cap, c)
        rate = stats["accepted_tokens"] / max(stats["drafted_tokens"], 1)
        print(f"{label}: decode {stats['decode_s']:.2f} s, {stats['token_steps']:.0f} tokens, "
              f"{stats['token_steps'] / max(stats['row_steps'], 1):.2f} tokens per decode "
              f"row computed; drafts {stats['drafted_tokens']:.0f}, accepted "
              f"{stats['accepted_tokens']:.0f} ({rate:.1%})", flush=True)


def matmul_gflops(size: int = 2048) -> float:
    """The float32 matmul rate (bench_train_step's median of 5), the machine's practical peak."""
    from bench_train_step import time_matmul

    return 2 * size**3 / time_matmul(size, jnp.float32).wall / 1e9


def _clocks(fn, repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of fn(), each the best of ``repeats``; CPU time is the process's, all
    threads summed."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w), min(cpu, time.process_time() - c)
    return wall, cpu


def hf_cached_step(hf, prompts: list[list[int]], context: int, repeats: int = 5
                   ) -> tuple[float, float]:
    """(wall, CPU) seconds of HF's forward of one token per row with its KV cache at about
    ``context`` positions (left-padded prompts, then single-token steps up to it): what every
    step of HF generate runs, sampling aside."""
    import torch

    width = max(map(len, prompts))
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):], mask[b, width - len(p):] = torch.tensor(p), 1
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        cache, token = out.cache, out.logits[:, -1:].argmax(-1)
        ones = torch.ones((len(prompts), 1), dtype=mask.dtype)

        def step():
            nonlocal out, cache, token, mask
            mask = torch.cat([mask, ones], dim=1)
            out = hf(input_ids=token, attention_mask=mask, cache=cache, use_cache=True)
            cache, token = out.cache, out.logits[:, -1:].argmax(-1)

        while mask.shape[1] < context:
            step()
        return _clocks(step, repeats)


def profile_decode(ours, prompts: list[list[int]], stops: list[int], gflops: float,
                   steps: int = 32, hf=None, layer_arrays: bool = False) -> None:
    """One engine decode step of 32 live rows against a plain jitted forward of the same 32
    tokens without a cache (the matmuls alone), HF's cached forward step (with ``hf``) and
    the analytic FLOP floor. With ``layer_arrays`` the engine's step is also timed with the
    stacked weights (its default), interleaved, best of 3 each."""
    from flax import nnx

    from agentic_jax.rollout.engine import Request

    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), len(prompts))))

    def engine_step(cfg: EngineConfig, rows: int = 32) -> tuple[float, float]:
        """(wall, CPU) seconds of one decode step: 4 full round trips of ``rows`` rows (no
        stop ids), prefill's share of the CPU time left out in proportion to its wall time."""
        engine = Engine(ours, cfg)
        for i, p in enumerate(prompts[:rows]):
            engine.submit(Request(i, tuple(p), 4 * steps, keys[i], stop_tokens=()))
        c = time.process_time()
        engine.run()
        cpu, stats = time.process_time() - c, engine.stats
        row_steps = max(1, stats.row_steps / rows)
        return (stats.decode_s / row_steps,
                cpu * stats.decode_s / (stats.decode_s + stats.prefill_s) / row_steps)

    cfgs = [EngineConfig(num_slots=32, page_size=16, decode_steps=steps,
                         max_seq_len=max(map(len, prompts)) + 4 * steps, layer_arrays=split)
            for split in ((True, False) if layer_arrays else (False,))]
    impl = Engine(ours, cfgs[0]).runner.decode_impl
    if impl != "xla":   # the default decode attention against the XLA path, same run
        cfgs.append(dataclasses.replace(cfgs[0], attention_impl="xla"))
    for cfg in cfgs:
        engine_step(cfg)  # compiles; equal engines share its programs
    rounds = [[engine_step(cfg) for cfg in cfgs] for _ in range(3)]
    (per_step, per_step_cpu), *others = [min(r[i] for r in rounds) for i in range(len(cfgs))]
    if layer_arrays:
        stacked = others.pop(0)
        print(f"engine decode step with layer_arrays {per_step * 1e3:.0f} ms, with the stacked "
              f"weights {stacked[0] * 1e3:.0f} ms: "
              f"{stacked[0] / per_step:.2f}x (interleaved, best of 3)", flush=True)
    if others:
        (xla, xla_cpu), = others
        print(f"engine decode step with {impl} attention {per_step * 1e3:.0f} ms "
              f"({per_step_cpu * 1e3:.0f} CPU-ms), with XLA's {xla * 1e3:.0f} ms "
              f"({xla_cpu * 1e3:.0f} CPU-ms): {xla / per_step:.2f}x wall, "
              f"{xla_cpu / per_step_cpu:.2f}x CPU (interleaved, best of 3)", flush=True)
    # What a step of fewer rows costs (the engine's decode batches: 8, 12, 16, 24, 32 rows).
    by_rows = {}
    for rows in (8, 16, 24):
        engine_step(cfgs[0], rows)  # compiles
        by_rows[rows] = min(engine_step(cfgs[0], rows)[0] for _ in range(3))
    print("engine decode step by rows: " + ", ".join(
        f"{rows} rows {t * 1e3:.0f} ms" for rows, t in [*by_rows.items(), (32, per_step)])
        + " (best of 3 each)", flush=True)
    graphdef, state = nnx.split(ours)
    forward = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))
    tokens = jnp.asarray([[p[-1]] for p in prompts[:32]], jnp.int32)
    forward(state, tokens).block_until_ready()
    best, best_cpu = _clocks(lambda: forward(state, tokens).block_until_ready(), 5)
    context = (min(map(len, prompts)) + max(map(len, prompts))) // 2 + 2 * steps
    hf_wall, hf_cpu = hf_cached_step(hf, prompts[:32], context) if hf is not None else (0, 0)
    m = ours.cfg
    head = m.hidden_size * m.vocab_size
    # Matmul parameters: all but an untied embedding table (a lookup); a tied one is the head.
    matmul = m.num_params() - (0 if m.tie_word_embeddings else head)
    flops, head_share = 2 * 32 * matmul, head / matmul
    print(f"decode profile, 32 rows, contexts {min(map(len, prompts))}..."
          f"{max(map(len, prompts)) + 4 * steps}: engine step {per_step * 1e3:.0f} ms "
          f"(decode round trips of {steps} steps, host work included); plain jitted forward "
          f"of the 32 tokens without a cache {best * 1e3:.0f} ms; FLOP floor "
          f"{flops / gflops / 1e6:.0f} ms at {gflops:.0f} GFLOP/s ({flops / 1e9:.1f} GFLOP a "
          f"step, the LM head {head_share:.0%} of it); engine / plain = "
          f"{per_step / best:.2f}", flush=True)
    print(f"CPU time a step (all threads): engine {per_step_cpu * 1e3:.0f} ms, plain jitted "
          f"forward {best_cpu * 1e3:.0f} ms (engine / plain = {per_step_cpu / best_cpu:.2f})"
          + (f", HF forward with its cache at {context} positions {hf_cpu * 1e3:.0f} ms "
             f"(wall {hf_wall * 1e3:.0f} ms; HF / engine = {hf_cpu / per_step_cpu:.2f}, "
             f"HF / plain = {hf_cpu / best_cpu:.2f})" if hf is not None else ""), flush=True)


def run(args: argparse.Namespace) -> None:
    import torch
    import transformers

    import bench_generate_longtail as lt
    from agentic_jax.models import from_pretrained
    from agentic_jax.models.builtin import checkpoint_dir

    torch.set_num_threads(args.torch_threads)
    directory = checkpoint_dir(args.model, "") or args.model
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=getattr(torch, args.dtype)).eval()
    ours = from_pretrained(directory, dtype=args.dtype)
    stops = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    gflops = matmul_gflops()
    setting = "auto" if args.layer_arrays == "auto" else bool(int(args.layer_arrays))
    layer_arrays, why = choose_layer_arrays(setting, ours.cfg)
    print(f"model {args.model} ({directory}) in {args.dtype}; jax {jax.__version__} on "
          f"{jax.devices()[0].platform}, torch {torch.__version__} with "
          f"{torch.get_num_threads()} threads; float32 2048^2 matmul {gflops:.0f} GFLOP/s; "
          f"engine layer_arrays={layer_arrays} ({why}) "
          f"prefix_caching={bool(args.prefix_caching)}")
    for name in args.real_workloads.split(","):
        if name == "episodes":
            cfg = EngineConfig(num_slots=32, page_size=16, decode_steps=args.decode_steps,
                               layer_arrays=setting, prefix_caching=bool(args.prefix_caching))
            speculative_workload(ours, episode_contexts(tokenizer, 32, stops), stops,
                                 args.real_cap or 128, cfg, args.speculative or 4,
                                 args.repeats, name)
            continue
        if name == "profile":
            profile_decode(ours, chat_prompts(tokenizer, 32), stops, gflops, hf=hf,
                           layer_arrays=layer_arrays)
            continue
        w = WORKLOADS[name]
        prompts = chat_prompts(tokenizer, w["prompts"])
        cap = args.real_cap or w["cap"]
        cfg = EngineConfig(num_slots=w["slots"], page_size=16, decode_steps=args.decode_steps,
                           layer_arrays=setting,
                           prefix_caching=bool(args.prefix_caching))
        fns = {
            "HF generate (static)": functools.partial(lt.hf_static, hf, prompts, stops, cap),
            "HF generate_batch (CB)": functools.partial(lt.hf_continuous, hf, prompts, stops,
                                                        cap),
            f"ours: engine {w['slots']} slots": functools.partial(lt.engine, ours, prompts,
                                                                  stops, cap, cfg),
        }
        xla_cfg = dataclasses.replace(cfg, attention_impl="xla")
        if args.attention_baseline and Engine(ours, cfg).runner.decode_impl != "xla":
            # The default decode attention against the XLA path it replaced, same run.
            fns[f"ours: engine {w['slots']} slots, XLA attention"] = functools.partial(
                lt.engine, ours, prompts, stops, cap, xla_cfg)
        tokens = {}
        for label, fn in fns.items():
            start = time.perf_counter()
            tokens[label] = fn()
            print(f"warm-up {label}: {tokens[label]} tokens in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
        sides = bench_clock.interleaved(fns, args.repeats, warmup=False)
        lengths = [len(p) for p in prompts]
        print(f"{name}: {len(prompts)} chat prompts of {min(lengths)}..{max(lengths)} tokens, "
              f"temperature 1, cap {cap}, stop <|im_end|>; median of {args.repeats}, "
              f"interleaved; load average {os.getloadavg()[0]:.2f}")
        for line in bench_clock.table(sides, tokens, ["HF generate (static)",
                                                      "HF generate_batch (CB)"]):
            print(line, flush=True)
        if args.speculative:
            speculative_workload(ours, prompts, stops, cap, cfg, args.speculative,
                                 args.repeats, name)
        stats = lt.engine_stats(ours, prompts, stops, cap, cfg)
        print(f"engine: slot utilisation {stats['slot_utilisation']:.1%} (tokens per row "
              f"computed {stats['token_steps'] / max(stats['row_steps'], 1):.1%}), prefill "
              f"{stats['prefill_s']:.2f} s / decode {stats['decode_s']:.2f} s, "
              f"{stats['decode_calls']:.0f} decode round trips; prompt positions "
              f"{stats['prefill_tokens']:.0f} prefilled, {stats['cached_tokens']:.0f} read "
              f"from the prefix cache", flush=True)
