"""Attention dispatch: the XLA path against a naive per-head reference, masks, impl routing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.models.attention import attention, build_mask


def _qkv(batch=2, q_len=5, kv_len=5, heads=4, kv_heads=2, dim=8, seed=0):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(kq, (batch, q_len, heads, dim))
    k = jax.random.normal(kk, (batch, kv_len, kv_heads, dim))
    v = jax.random.normal(kv, (batch, kv_len, kv_heads, dim))
    return q, k, v


def _naive(q, k, v, mask):
    """Per-head loop with repeated kv heads, in numpy float64."""
    q, k, v, mask = (np.asarray(a, np.float64) for a in (q, k, v, mask))
    group = q.shape[2] // k.shape[2]
    out = np.zeros_like(q)
    for h in range(q.shape[2]):
        scores = np.einsum("btd,bsd->bts", q[:, :, h], k[:, :, h // group]) / np.sqrt(q.shape[-1])
        scores = np.where(mask > 0, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out[:, :, h] = np.einsum("bts,bsd->btd", probs, v[:, :, h // group])
    return out


def test_xla_causal_gqa_matches_naive_reference():
    q, k, v = _qkv()
    out = attention(q, k, v, impl="xla")
    mask = np.tril(np.ones((5, 5)))[None].repeat(2, 0)
    np.testing.assert_allclose(out, _naive(q, k, v, mask), atol=1e-5)


def test_causal_alignment_with_shorter_queries_sees_the_tail():
    q, k, v = _qkv(q_len=2, kv_len=5)
    out = attention(q, k, v, impl="xla")
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])[None].repeat(2, 0)
    np.testing.assert_allclose(out, _naive(q, k, v, mask), atol=1e-5)


def test_positions_and_segment_ids_build_the_expected_mask():
    q_pos = jnp.array([[3, 4]])
    mask = build_mask(1, 2, 6, causal=True, q_positions=q_pos, kv_positions=jnp.arange(6),
                      segment_ids=(jnp.array([[0, 1]]), jnp.array([[0, 0, 1, 1, 1, 1]])))
    expected = [[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0]]
    np.testing.assert_array_equal(mask[0], np.array(expected, bool))


def test_segment_ids_isolate_packed_sequences():
    q, k, v = _qkv(batch=1, q_len=6, kv_len=6)
    seg = jnp.array([[0, 0, 0, 1, 1, 1]])
    packed = attention(q, k, v, impl="xla", segment_ids=seg)
    second = attention(q[:, 3:], k[:, 3:], v[:, 3:], impl="xla")
    np.testing.assert_allclose(packed[:, 3:], second, atol=1e-6)


def test_cudnn_is_a_clear_error_off_gpu():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="cudnn"):
        attention(q, k, v, impl="cudnn")


def test_pallas_with_positions_falls_back_to_xla_and_auto_is_xla_on_cpu():
    q, k, v = _qkv(q_len=1, kv_len=4)
    kwargs = dict(q_positions=jnp.array([[2], [3]]), kv_positions=jnp.arange(4))
    reference = attention(q, k, v, impl="xla", **kwargs)
    np.testing.assert_array_equal(attention(q, k, v, impl="pallas", **kwargs), reference)
    q, k, v = _qkv()
    np.testing.assert_array_equal(attention(q, k, v, impl="auto"), attention(q, k, v, impl="xla"))


def test_bad_arguments_raise():
    q, k, v = _qkv(heads=3, kv_heads=2)
    with pytest.raises(ValueError, match="Hq % Hkv"):
        attention(q, k, v)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="impl"):
        attention(q, k, v, impl="flash")
    with pytest.raises(ValueError, match="kv_positions"):
        attention(q, k, v, q_positions=jnp.zeros((2, 5), jnp.int32))


def test_pallas_kernel_matches_xla_on_the_no_cache_path():
    q, k, v = _qkv(q_len=16, kv_len=16)
    segments = jnp.array([[0] * 7 + [1] * 9, [0] * 16])
    np.testing.assert_allclose(attention(q, k, v, impl="pallas", segment_ids=segments),
                               attention(q, k, v, impl="xla", segment_ids=segments), atol=1e-5)


@pytest.mark.parametrize("q_len,kv_len", [(150, 150), (70, 200), (64, 64)])
def test_causal_blocks_match_the_naive_reference_and_its_gradients(q_len, kv_len):
    """Queries in blocks of CAUSAL_BLOCK against the keys up to each block's end: the same
    outputs and gradients as every query against every key, with a packed row's segments,
    shorter queries aligned to the keys' end, and a last block shorter than the others."""
    from agentic_jax.models.attention import CAUSAL_BLOCK, xla_attention

    assert max(q_len, kv_len) > CAUSAL_BLOCK or q_len == CAUSAL_BLOCK
    q, k, v = _qkv(batch=2, q_len=q_len, kv_len=kv_len, heads=6, kv_heads=2, dim=16)
    cut = kv_len // 3
    seg = jnp.broadcast_to((jnp.arange(kv_len) >= cut).astype(jnp.int32), (2, kv_len))
    segments = (seg[:, kv_len - q_len:], seg)
    out = attention(q, k, v, impl="xla", segment_ids=segments)
    mask = build_mask(2, q_len, kv_len, causal=True, segment_ids=segments)
    np.testing.assert_allclose(out, _naive(q, k, v, mask), atol=2e-5)

    def blocked(q, k, v):
        return jnp.sum(jnp.sin(attention(q, k, v, impl="xla", segment_ids=segments)))

    def full(q, k, v):
        return jnp.sum(jnp.sin(xla_attention(q, k, v, mask, q.shape[-1] ** -0.5)))

    for got, want in zip(jax.grad(blocked, (0, 1, 2))(q, k, v),
                         jax.grad(full, (0, 1, 2))(q, k, v)):
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_long_rows_take_at_most_the_capped_number_of_blocks(monkeypatch):
    """4,096 queries: CAUSAL_MAX_BLOCKS blocks, not 64; more queries than keys: one call."""
    import importlib

    module = importlib.import_module("agentic_jax.models.attention")
    calls = []
    full = module.xla_attention
    monkeypatch.setattr(module, "xla_attention",
                        lambda q, *a: calls.append(q.shape[1]) or full(q, *a))
    q, k, v = _qkv(batch=1, q_len=4096, kv_len=4096, heads=2, kv_heads=1, dim=4)
    jax.eval_shape(lambda q, k, v: attention(q, k, v, impl="xla"), q, k, v)
    assert calls == [4096 // module.CAUSAL_MAX_BLOCKS] * module.CAUSAL_MAX_BLOCKS
    calls.clear()
    q, k, v = _qkv(batch=1, q_len=200, kv_len=40)
    jax.eval_shape(lambda q, k, v: attention(q, k, v, impl="xla"), q, k, v)
    assert calls == [200]


def test_causal_blocks_skip_the_scores_above_the_diagonal():
    """At 384 tokens in blocks of 128 or less, the compiled attention does at most 2/3 of the
    floating-point work of scoring every query against every key (XLA's own count)."""
    from agentic_jax.models.attention import CAUSAL_BLOCK, xla_attention

    assert CAUSAL_BLOCK <= 128
    q, k, v = _qkv(batch=1, q_len=384, kv_len=384, heads=4, kv_heads=2, dim=32)
    mask = build_mask(1, 384, 384, causal=True)

    def flops(fn):
        cost = jax.jit(fn).lower(q, k, v).compile().cost_analysis()
        return (cost[0] if isinstance(cost, list) else cost)["flops"]

    blocked = flops(lambda q, k, v: attention(q, k, v, impl="xla"))
    full = flops(lambda q, k, v: xla_attention(q, k, v, mask, 32 ** -0.5))
    assert blocked <= full * 2 / 3 + 1e6, (blocked, full)
