"""`generate`: one-shot sampling for ragged prompts on the compiled sampler."""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from flax import nnx

from agentic_jax.rollout.sampler import Sampler, SamplingParams

_LEN_BUCKET = 64


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
):
    """Samples continuations of ragged prompts; the whole decode is one device dispatch.

    Args:
      model: an `agentic_jax.models.Transformer`.
      prompts: token-id lists (ragged, each non-empty).
      max_new_tokens: the most tokens generated per prompt.
      temperature: 0 is greedy.
      top_p, top_k: nucleus / top-k truncation (1.0 / 0 disable).
      seed: PRNG seed.
      stop_tokens: a row ends after emitting any of these ids (the id is included).
      return_logprobs: also return per-token log-probabilities (temperature 1).

    Returns:
      The generated tokens per prompt (prompt excluded), and with ``return_logprobs`` a second
      list of float32 arrays of the same lengths.
    """
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
    if not prompts:
        return ([], []) if return_logprobs else []
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
    longest = max(len(p) for p in prompts)
    max_len = -(-(longest + max_new_tokens) // _LEN_BUCKET) * _LEN_BUCKET
    sampler = Sampler(model, max_len=max_len)
    state = sampler.prefill(prompts)
    n = len(prompts)
    _, toks, lps, _, count, _ = sampler.decode(
        state, jax.random.split(jax.random.key(seed), n), active=np.ones(n, bool),
        budget=np.full(n, max_new_tokens), stop_ids=list(stop_tokens), params=params,
        num_steps=max_new_tokens)
    toks, lps, count = jax.device_get((toks, lps, count))
    out = [toks[b, :count[b]].tolist() for b in range(n)]
    if return_logprobs:
        return out, [lps[b, :count[b]] for b in range(n)]
    return out
