"""`generate`: one-shot sampling for ragged prompts on the rollout engine."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np
from flax import nnx

from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine.types import SamplingParams

_DEFAULT_SLOTS = 64


def generate(
    model: nnx.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    stop_tokens: Sequence[int] = (),
    *,
    top_k: int = 0,
    return_logprobs: bool = False,
    engine_config: EngineConfig | None = None,
):
    """Samples continuations of ragged prompts with continuous batching over paged KV.

    Args:
      model: an `agentic_jax.models.Transformer`.
      prompts: token-id lists (ragged, each non-empty); equal prompts share their pages.
      max_new_tokens: the most tokens generated per prompt.
      temperature: 0 is greedy.
      top_p, top_k: nucleus / top-k truncation (1.0 / 0 disable).
      seed: PRNG seed; prompt i samples with ``jax.random.split(key(seed), n)[i]``.
      stop_tokens: a row ends after emitting any of these ids (the id is included).
      return_logprobs: also return per-token log-probabilities (temperature 1).
      engine_config: slots, page size, pool budget; the sampling fields and max_seq_len are
        set from the arguments above. Default: min(n, 64) slots, a pool with room for every slot
        at full length.

    Returns:
      The generated tokens per prompt (prompt excluded), and with ``return_logprobs`` a second
      list of float32 arrays of the same lengths.
    """
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
    if not prompts:
        return ([], []) if return_logprobs else []
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
    n = len(prompts)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
    cfg = engine_config or EngineConfig(num_slots=min(n, _DEFAULT_SLOTS))
    cfg = dataclasses.replace(
        cfg, sampling=sampling, max_seq_len=max(len(p) for p in prompts) + max_new_tokens)
    engine = Engine(model, cfg)
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(seed), n)))
    stops = tuple(int(t) for t in stop_tokens)
    for i, p in enumerate(prompts):
        engine.submit(Request(request_id=i, prompt=tuple(p), max_new_tokens=max_new_tokens,
                              key=keys[i], stop_tokens=stops))
    results = {e.request_id: e for e in engine.run()}
    out = [results[i].tokens for i in range(n)]
    if return_logprobs:
        return out, [results[i].logprobs for i in range(n)]
    return out
