"""KV cache: ragged prefill, token-by-token decode and ragged chunks match the full forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import KVCache, ModelConfig, Transformer, init_cache

CFG = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, qkv_bias=True, rope_theta=500.0)
SEQ_LENS = (9, 5, 12)
MAX_LEN = 12


@pytest.fixture(scope="module")
def setup():
    model = Transformer(CFG, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, CFG.vocab_size, n) for n in SEQ_LENS]
    # one right-padded batch: later (padding) tokens cannot change earlier logits
    padded = np.zeros((len(seqs), max(SEQ_LENS)), np.int32)
    for b, seq in enumerate(seqs):
        padded[b, :len(seq)] = seq
    logits = np.asarray(jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))(state, padded))
    references = [logits[b, :n] for b, n in enumerate(SEQ_LENS)]
    return graphdef, state, seqs, references


def _chunk_step(graphdef):
    @jax.jit
    def step(state, tokens, cache, chunk_lens):
        out = nnx.merge(graphdef, state).forward(tokens, cache=cache, chunk_lens=chunk_lens)
        return out.logits, out.cache

    return step


def _run_chunks(setup, chunk_schedule):
    """Feeds each row's sequence in chunks [B, T] (garbage padding); checks every valid logit."""
    graphdef, state, seqs, references = setup
    step = _chunk_step(graphdef)
    cache = init_cache(CFG, len(seqs), MAX_LEN)
    consumed = [0] * len(seqs)
    rng = np.random.default_rng(1)
    for chunk_lens in chunk_schedule:
        width = max(max(chunk_lens), 1)
        tokens = rng.integers(0, CFG.vocab_size, (len(seqs), width))  # padding is random tokens
        for b, n in enumerate(chunk_lens):
            tokens[b, :n] = seqs[b][consumed[b]:consumed[b] + n]
        logits, cache = step(state, jnp.asarray(tokens, jnp.int32), cache,
                             jnp.asarray(chunk_lens, jnp.int32))
        for b, n in enumerate(chunk_lens):
            np.testing.assert_allclose(
                logits[b, :n], references[b][consumed[b]:consumed[b] + n], atol=1e-5, rtol=1e-5
            )
            consumed[b] += n
        np.testing.assert_array_equal(cache.lengths, consumed)
    assert consumed == list(SEQ_LENS)


def test_ragged_prefill_then_token_by_token_decode(setup):
    prompt_lens = [4, 2, 7]
    schedule = [prompt_lens]
    consumed = list(prompt_lens)
    while consumed != list(SEQ_LENS):
        step = [1 if c < n else 0 for c, n in zip(consumed, SEQ_LENS)]
        consumed = [c + s for c, s in zip(consumed, step)]
        schedule.append(step)
    _run_chunks(setup, schedule)


def test_ragged_multi_token_chunks(setup):
    # e.g. a tool output appended for some rows while others wait (chunk length 0)
    schedule = [[3, 1, 4], [0, 3, 4], [4, 0, 2], [2, 1, 0], [0, 0, 2]]
    assert [sum(c) for c in zip(*schedule)] == list(SEQ_LENS)
    _run_chunks(setup, schedule)


def test_full_prefill_from_empty_cache_equals_no_cache_forward(setup):
    graphdef, state, seqs, references = setup
    tokens = jnp.asarray(seqs[2][None], jnp.int32)
    logits, cache = _chunk_step(graphdef)(state, tokens, init_cache(CFG, 1, MAX_LEN), None)
    np.testing.assert_allclose(logits[0], references[2], atol=1e-5, rtol=1e-5)
    assert int(cache.lengths[0]) == SEQ_LENS[2]


def test_writes_past_the_end_are_dropped_not_clamped():
    model = Transformer(CFG, rngs=nnx.Rngs(0))
    cache = init_cache(CFG, 1, 4)
    _, cache = _chunk_step(nnx.split(model)[0])(nnx.state(model), jnp.ones((1, 3), jnp.int32),
                                                cache, None)
    before = np.asarray(cache.k)
    out = model.forward(jnp.full((1, 3), 5, jnp.int32), cache=cache)  # positions 3, 4, 5
    np.testing.assert_array_equal(out.cache.k[:, :, :3], before[:, :, :3])
    assert not np.allclose(out.cache.k[:, :, 3], before[:, :, 3])


def test_cache_is_a_donatable_pytree():
    cache = init_cache(CFG, 2, 8, dtype="bfloat16")
    assert cache.k.shape == (2, 2, 8, 2, 8) and cache.k.dtype == jnp.bfloat16
    assert cache.lengths.dtype == jnp.int32 and cache.max_len == 8
    model = Transformer(CFG, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    @jax.jit
    def decode(state, cache):
        return nnx.merge(graphdef, state).forward(jnp.ones((2, 1), jnp.int32), cache=cache).cache

    donated = jax.jit(decode.__wrapped__, donate_argnums=1)
    new = donated(state, cache)
    assert isinstance(new, KVCache) and cache.k.is_deleted()
    np.testing.assert_array_equal(new.lengths, [1, 1])


def test_bad_cache_arguments_raise():
    model = Transformer(CFG, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="chunk_lens"):
        model.forward(jnp.ones((1, 2), jnp.int32), chunk_lens=jnp.array([1]))
    with pytest.raises(ValueError, match="init_cache"):
        init_cache(CFG, 0, 8)
