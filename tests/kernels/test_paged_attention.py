"""Paged attention: the XLA gather path equals dense attention, and the Pallas decode kernel
(interpret mode on CPU) equals the XLA path, over shuffled pages and ragged lengths."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

from agentic_jax.kernels import paged_attention_xla, paged_decode_attention
from agentic_jax.models.attention import build_mask, xla_attention


def _pages(batch, width, page_size, hkv, dim, num_pages, seed=0):
    """Random pools [Hkv, P, ps, D] and block tables naming distinct shuffled pages."""
    keys = jax.random.split(jax.random.key(seed), 2)
    shape = (hkv, num_pages, page_size, dim)
    k, v = (jax.random.normal(key, shape, jnp.float32) for key in keys)
    perm = np.random.default_rng(seed).permutation(num_pages)[:batch * width]
    return k, v, jnp.asarray(perm.reshape(batch, width), jnp.int32)


def _dense(pages, tables):
    """[Hkv, P, ps, D] + tables [B, W] -> [B, W * ps, Hkv, D], slot == position."""
    hkv, _, ps, dim = pages.shape
    b, w = tables.shape
    return jnp.transpose(pages[:, tables].reshape(hkv, b, w * ps, dim), (1, 2, 0, 3))


def test_xla_path_equals_dense_attention_for_chunks():
    batch, width, ps, hkv, hq, dim = 3, 5, 4, 2, 8, 16
    k, v, tables = _pages(batch, width, ps, hkv, dim, num_pages=20)
    q = jax.random.normal(jax.random.key(5), (batch, 6, hq, dim))
    positions = jnp.asarray([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12], [14, 15, 16, 17, 18, 19]])
    out = paged_attention_xla(q, k, v, tables, positions)
    kd, vd = _dense(k, tables), _dense(v, tables)
    mask = build_mask(batch, 6, width * ps, causal=True, q_positions=positions,
                      kv_positions=jnp.arange(width * ps))
    np.testing.assert_allclose(out, xla_attention(q, kd, vd, mask, dim ** -0.5), atol=1e-5)


@pytest.mark.parametrize("hq,hkv,ps,width", [(8, 2, 8, 4), (4, 4, 4, 16), (16, 1, 16, 3)])
def test_pallas_decode_equals_xla_decode(hq, hkv, ps, width):
    batch, dim = 4, 32
    k, v, tables = _pages(batch, width, ps, hkv, dim, num_pages=batch * width + 3, seed=hq)
    q = jax.random.normal(jax.random.key(1), (batch, hq, dim))
    lengths = jnp.asarray([1, ps + 1, width * ps, max(1, width * ps // 2 - 1)], jnp.int32)
    ref = paged_decode_attention(q, k, v, tables, lengths, impl="xla")
    out = paged_decode_attention(q, k, v, tables, lengths, impl="pallas", interpret=True)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-5)
    # Only the first lengths[b] positions matter: scrambling later slots changes nothing.
    scrambled = k.at[:, tables[0, 1:]].set(1e3)
    again = paged_decode_attention(q, scrambled, v, tables, lengths, impl="pallas",
                                   interpret=True)
    np.testing.assert_allclose(again[0], out[0], atol=2e-5)


def test_bad_impl():
    k, v, tables = _pages(1, 1, 4, 1, 8, 2)
    with pytest.raises(ValueError, match="impl"):
        paged_decode_attention(jnp.zeros((1, 1, 8)), k, v, tables, jnp.ones(1, jnp.int32),
                               impl="cuda")
