"""Token sampling from logits: temperature, top-k, top-p (nucleus), greedy.

Pure functions, traced inside the decode loop. The log-probability reported for a sampled token
is always under the untempered policy (temperature 1, no truncation): that is the probability
PPO's importance ratio compares against the trainer's recomputation.

A row's token is drawn by inverse transform sampling (`draw_tokens`): one uniform number per row
against the cumulative probabilities, searched in two levels (blocks of the vocabulary, then
tokens within the chosen block). The Gumbel-max trick (`jax.random.categorical`) draws one
number per vocabulary entry and takes two logarithms of each: at a 49k vocabulary that was a
sixth of a CPU decode step, against almost nothing here.
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
    greedy = _greedy(logits, temperature)
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
    sampled = draw_tokens(scaled, keys)
    tokens = jnp.where(temperature > 0, sampled, greedy).astype(jnp.int32)
    logprobs = jnp.take_along_axis(jax.nn.log_softmax(policy, axis=-1), tokens[:, None], axis=-1)
    return tokens, logprobs[:, 0]


def top_logprobs(logits: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The ``k`` most likely tokens of each row under the untempered policy, most likely first:
    (log-probs float32 [B, k], ids int32 [B, k]). The log-probs are computed as `sample_tokens`
    computes a sampled token's, so a sampled token listed here has the same number."""
    values, ids = jax.lax.top_k(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1), k)
    return values, ids.astype(jnp.int32)


def _greedy(logits: jax.Array, temperature: float | jax.Array) -> jax.Array:
    """argmax per row, computed only when some row is greedy (temperature <= 0): over a 49k
    vocabulary the argmax was 4% of a CPU decode step that samples every row."""
    def argmax() -> jax.Array:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def unused() -> jax.Array:
        return jnp.zeros(logits.shape[:1], jnp.int32)

    if isinstance(temperature, (int, float)):
        return argmax() if temperature <= 0 else unused()
    return jax.lax.cond(jnp.any(jnp.asarray(temperature) <= 0), argmax, unused)


# Vocabulary entries per block of the two-level search: the cumulative sums run over ~V / 256
# block masses and then 256 probabilities, so a token's interval is computed to float32
# precision relative to its block's mass rather than to the whole distribution's.
_BLOCK = 256


def draw_tokens(logits: jax.Array, keys: jax.Array) -> jax.Array:
    """One token per row from softmax(logits) by inverse transform sampling.

    Args:
      logits: [B, V] float32 (already tempered and filtered; entries at the dtype's minimum
        have probability 0 and are never drawn).
      keys: [B] PRNG keys; each row draws a single uniform number from its own key.

    Returns:
      int32 [B]: for u ~ U[0, 1), the first token whose cumulative probability exceeds u.
    """
    rows, vocab = logits.shape
    blocks = -(-vocab // _BLOCK)
    probs = jnp.exp(logits - logits.max(axis=-1, keepdims=True))       # unnormalised, max 1
    probs = jnp.pad(probs, ((0, 0), (0, blocks * _BLOCK - vocab))).reshape(rows, blocks, _BLOCK)
    mass = probs.sum(-1)                                                # [B, blocks]
    cum = jnp.cumsum(mass, axis=-1)
    u = jax.vmap(lambda key: jax.random.uniform(key, (), jnp.float32))(keys)
    target = u * cum[:, -1]
    # Rounding can put the target at or past the last cumulative sum: the last block / token
    # with positive probability then takes it, so a zero-probability entry is never returned.
    block = jnp.minimum(jnp.sum(cum <= target[:, None], axis=-1), _last_positive(mass))
    before = jnp.where(block > 0,
                       jnp.take_along_axis(cum, jnp.maximum(block - 1, 0)[:, None], -1)[:, 0], 0.0)
    inner = jnp.take_along_axis(probs, block[:, None, None], axis=1)[:, 0]     # [B, _BLOCK]
    inner_cum = jnp.cumsum(inner, axis=-1)
    index = jnp.sum(inner_cum <= (target - before)[:, None], axis=-1)
    index = jnp.minimum(index, _last_positive(inner))
    return (block * _BLOCK + index).astype(jnp.int32)


def _last_positive(x: jax.Array) -> jax.Array:
    """[B, N] -> int32 [B]: the index of each row's last positive entry (N - 1 when none is)."""
    n = x.shape[-1]
    return (n - 1 - jnp.argmax((x > 0)[:, ::-1], axis=-1)).astype(jnp.int32)


def unpack_bitmask(allowed: jax.Array, vocab_size: int) -> jax.Array:
    """int32 [B, W] bitmasks -> bool [B, vocab_size] (tokens past 32 * W are not allowed)."""
    bits = (allowed[:, :, None] >> jnp.arange(32, dtype=allowed.dtype)) & 1
    bits = bits.reshape(allowed.shape[0], -1).astype(bool)
    if bits.shape[1] < vocab_size:
        bits = jnp.pad(bits, ((0, 0), (0, vocab_size - bits.shape[1])))
    return bits[:, :vocab_size]
