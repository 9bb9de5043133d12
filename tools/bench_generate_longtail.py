"""The long-tail rollout workload of `bench_generate.py --workload=longtail`.

Ragged prompts, temperature 1, several stop ids in a small vocabulary so that lengths are
geometric with a long tail, a cap on new tokens: what an RL rollout looks like. One run times,
on the same weights, HF `generate` (static batch, left padding), HF `generate_batch`
(transformers' continuous batching with paged attention) and this project's rollout engine
(through `generate`), interleaved in rounds so machine load falls on all alike.
tok/s counts the tokens each produced (up to and including the first stop id).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time

import jax
import numpy as np

import bench_clock
from agentic_jax.rollout import generate
from agentic_jax.rollout.engine import EngineConfig, page_bytes


def workload(args: argparse.Namespace) -> tuple[list[list[int]], list[int]]:
    """`args.prompts` prompts of 8..64 tokens (ids past the stop ids) and the stop ids."""
    rng = np.random.default_rng(0)
    stops = list(range(args.stop_ids))
    prompts = [rng.integers(args.stop_ids, args.vocab, int(rng.integers(8, 65))).tolist()
               for _ in range(args.prompts)]
    return prompts, stops


def _cut_at_stop(row: list[int], stops: set[int]) -> list[int]:
    for i, t in enumerate(row):
        if t in stops:
            return row[:i + 1]
    return row


def hf_static(hf, prompts, stops, cap: int) -> int:
    """HF generate on the left-padded batch; returns the tokens produced."""
    import torch
    import transformers

    width = max(map(len, prompts))
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):], mask[b, width - len(p):] = torch.tensor(p), 1
    config = transformers.GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=cap,
        eos_token_id=stops, pad_token_id=stops[0])
    torch.manual_seed(0)
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, generation_config=config)
    rows = out[:, width:].tolist()
    return sum(len(_cut_at_stop(r, set(stops))) for r in rows)


def hf_continuous(hf, prompts, stops, cap: int) -> int:
    """HF generate_batch (continuous batching, paged KV); returns the tokens produced."""
    import torch
    import transformers

    config = transformers.GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=cap,
        eos_token_id=stops, pad_token_id=stops[0])
    torch.manual_seed(0)
    with torch.no_grad():
        results = hf.generate_batch(prompts, generation_config=config, progress_bar=False)
    return sum(len(r.generated_tokens) for r in results.values())


def engine(model, prompts, stops, cap: int, cfg: EngineConfig) -> int:
    return sum(map(len, generate(model, prompts, max_new_tokens=cap, temperature=1.0,
                                 stop_tokens=stops, engine_config=cfg)))


def engine_run(model, prompts, stops, cap: int, cfg: EngineConfig):
    """One engine run of the workload, request i keyed by split(key(0))[i] as `generate`
    keys it: (the engine's `EngineStats`, each request's sampled tokens by index)."""
    from agentic_jax.rollout.engine import Engine, Request

    cfg = dataclasses.replace(cfg, max_seq_len=max(map(len, prompts)) + cap)
    eng = Engine(model, cfg)
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), len(prompts))))
    for i, p in enumerate(prompts):
        eng.submit(Request(i, tuple(p), cap, keys[i], stop_tokens=tuple(stops)))
    tokens = {e.request_id: tuple(e.tokens) for e in eng.run()}
    return eng.stats, tokens


def engine_stats(model, prompts, stops, cap: int, cfg: EngineConfig) -> dict[str, float]:
    """The engine's statistics for one run of the workload."""
    return engine_run(model, prompts, stops, cap, cfg)[0].as_dict()


def greedy_agreement(hf, model, prompts, new_tokens: int) -> float:
    """Share of greedy tokens equal to HF's (HF one unpadded prompt at a time, no stop ids)."""
    import torch
    import transformers

    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=new_tokens,
                                           eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        expected = [hf.generate(torch.tensor([p]), generation_config=config)[0, len(p):].tolist()
                    for p in prompts]
    ours = generate(model, prompts, max_new_tokens=new_tokens, temperature=0.0)
    return float(np.mean(np.asarray(ours) == np.asarray(expected)))


def run(args: argparse.Namespace, hf, model) -> None:
    import torch

    prompts, stops = workload(args)
    cap, mcfg = args.new_tokens, model.cfg
    ps = 16
    per_position = page_bytes(mcfg, ps) // ps
    dense_bytes = len(prompts) * (max(map(len, prompts)) + cap) * per_position
    kv_pages = int(args.kv_fraction * dense_bytes) // page_bytes(mcfg, ps)
    slots = [int(s) for s in str(args.slots).split(",")]
    cfgs = {n: EngineConfig(num_slots=n, page_size=ps, kv_pages=kv_pages,
                            decode_steps=args.decode_steps) for n in slots}
    fns = {
        "HF generate (static)": functools.partial(hf_static, hf, prompts, stops, cap),
        "HF generate_batch (CB)": functools.partial(hf_continuous, hf, prompts, stops, cap),
    }
    for n, cfg in cfgs.items():
        fns[f"ours: engine {n} slots"] = functools.partial(engine, model, prompts, stops, cap, cfg)
    tokens = {}
    for name, fn in fns.items():  # the warm-up run: compiles, and counts each one's tokens
        start = time.perf_counter()
        tokens[name] = fn()
        print(f"warm-up {name}: {tokens[name]} tokens in {time.perf_counter() - start:.1f} s",
              flush=True)
    sides = bench_clock.interleaved(fns, args.repeats, warmup=False)
    rate = {name: tokens[name] / sides[name].wall for name in fns}
    lengths = [len(p) for p in prompts]
    print(f"longtail: {len(prompts)} prompts of {min(lengths)}..{max(lengths)} tokens, "
          f"temperature 1, {len(stops)} stop ids in a {args.vocab} vocabulary, cap {cap}; "
          f"Qwen2 4 layers, hidden 256, 8/2 heads, float32; median of {args.repeats}, interleaved")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; torch {torch.__version__} "
          f"with {torch.get_num_threads()} threads; engine: page {ps}, {kv_pages} pages, "
          f"{args.decode_steps} decode steps per round trip; {bench_clock.machine_line()}")
    for line in bench_clock.table(sides, tokens, ["HF generate (static)",
                                                  "HF generate_batch (CB)"]):
        print(line)
    best = max(cfgs, key=lambda n: rate[f"ours: engine {n} slots"])
    stats = engine_stats(model, prompts, stops, cap, cfgs[best])
    print(f"engine with {best} slots (the fastest above):")
    print(f"engine KV: pool {stats['kv_pool_bytes'] / 2**20:.1f} MiB "
          f"({stats['kv_pool_bytes'] / dense_bytes:.0%} of a dense cache of "
          f"{dense_bytes / 2**20:.1f} MiB), peak in use {stats['kv_peak_bytes'] / 2**20:.1f} MiB "
          f"({stats['kv_peak_bytes'] / dense_bytes:.0%})")
    print(f"engine: slot utilisation {stats['slot_utilisation']:.1%}, preemptions "
          f"{stats['preemptions']:.0f}, prefill {stats['prefill_s']:.2f} s / decode "
          f"{stats['decode_s']:.2f} s, {stats['decode_calls']:.0f} decode round trips")
    agree = greedy_agreement(hf, model, prompts[:8], 48)
    print(f"greedy tokens equal to HF's (8 prompts x 48 tokens): {agree:.1%}")
    print("median seconds: " + ", ".join(f"{n} {sides[n].wall:.2f}" for n in fns))
