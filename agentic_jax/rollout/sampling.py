"""Token sampling from logits: temperature, top-k, top-p (nucleus), greedy.

Pure functions, traced inside the decode loop. The log-probability reported for a sampled token
is always under the untempered policy (temperature 1, no truncation): that is the probability
PPO's importance ratio compares against the trainer's recomputation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def filter_logits(logits: jax.Array, *, top_k: int, top_p: float | jax.Array) -> jax.Array:
    """Masks logits outside the top-k / nucleus set with -inf.

    Args:
      logits: [B, V] float32, already divided by the temperature.
      top_k: static; 0 keeps all tokens.
      top_p: keep the smallest set of tokens whose probability mass reaches ``top_p``; 1 keeps all.

    Returns:
      [B, V] logits with excluded tokens at -inf. The most likely token is always kept.
    """
    neg_inf = jnp.finfo(logits.dtype).min
    if top_k > 0:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, neg_inf, logits)
    sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    # Mass strictly before each sorted token; a token is kept while that mass is < top_p.
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = mass_before < top_p
    # The threshold is the smallest kept logit; ties at the threshold are kept too.
    threshold = jnp.min(jnp.where(keep_sorted, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits < threshold, neg_inf, logits)


def sample_tokens(
    logits: jax.Array,
    keys: jax.Array,
    *,
    temperature: float | jax.Array,
    top_k: int = 0,
    top_p: float | jax.Array = 1.0,
    use_filter: bool = False,
    allowed: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Samples one token per row.

    Args:
      logits: [B, V] float32 next-token logits.
      keys: [B] PRNG keys, one per row, so that a row's draw does not depend on which other rows
        are decoding alongside it.
      temperature: 0 is greedy (argmax); otherwise logits are divided by it. A scalar, or one
        per row ([B]), so that rows with different settings share one batch.
      top_k, top_p: truncation (see `filter_logits`), applied only when ``use_filter`` (static),
        so the common untruncated case compiles without a vocabulary sort. ``top_p`` may be
        per row ([B]); with ``top_k == 0`` a row whose top_p is 1 then keeps its logits as
        they are, exactly as it would be sampled without the filter.
      allowed: optional int32 [B, ceil(V / 32)] bitmasks (bit j of word i allows token
        32 * i + j), applied before truncation and greedy choice; None leaves the program as
        it is without masks.

    Returns:
      (tokens int32 [B], logprobs float32 [B]) with logprobs under the untempered policy.
    """
    logits = policy = logits.astype(jnp.float32)
    if allowed is not None:
        logits = jnp.where(unpack_bitmask(allowed, logits.shape[-1]), logits,
                           jnp.finfo(logits.dtype).min)
    greedy = jnp.argmax(logits, axis=-1)
    temperature = jnp.asarray(temperature, jnp.float32)
    per_row = temperature.ndim == 1
    safe_t = jnp.maximum(temperature, 1e-6)
    scaled = logits / (safe_t[:, None] if per_row else safe_t)
    if use_filter:
        top_p = jnp.asarray(top_p, jnp.float32)
        if top_p.ndim == 1:
            filtered = filter_logits(scaled, top_k=top_k, top_p=top_p[:, None])
            keep_all = (top_p >= 1.0) & (top_k == 0)
            scaled = jnp.where(keep_all[:, None], scaled, filtered)
        else:
            scaled = filter_logits(scaled, top_k=top_k, top_p=top_p)
    sampled = jax.vmap(jax.random.categorical)(keys, scaled)
    tokens = jnp.where(temperature > 0, sampled, greedy).astype(jnp.int32)
    logprobs = jnp.take_along_axis(jax.nn.log_softmax(policy, axis=-1), tokens[:, None], axis=-1)
    return tokens, logprobs[:, 0]


def unpack_bitmask(allowed: jax.Array, vocab_size: int) -> jax.Array:
    """int32 [B, W] bitmasks -> bool [B, vocab_size] (tokens past 32 * W are not allowed)."""
    bits = (allowed[:, :, None] >> jnp.arange(32, dtype=allowed.dtype)) & 1
    bits = bits.reshape(allowed.shape[0], -1).astype(bool)
    if bits.shape[1] < vocab_size:
        bits = jnp.pad(bits, ((0, 0), (0, vocab_size - bits.shape[1])))
    return bits[:, :vocab_size]
