"""The native CPU decode kernel (`kernels.cpu_native.paged_decode`) against the XLA path, and
its build switch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.kernels import cpu_native
from agentic_jax.kernels.paged_attention import paged_attention_xla
from agentic_jax.rollout.engine import paged_model as pm

pytestmark = pytest.mark.skipif(not cpu_native.available()[0],
                                reason=f"native kernel: {cpu_native.available()[1]}")


def _case(seed, *, layers=2, kv_heads=3, group=3, pages=40, page_size=16, dim=64, batch=5,
          width=6):
    rng = np.random.default_rng(seed)
    shape = (layers, kv_heads, pages, page_size, dim)
    k, v = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    q = jnp.asarray(rng.standard_normal((batch, kv_heads * group, dim)), jnp.float32)
    tables = jnp.asarray(rng.permutation(pages)[:batch * width].reshape(batch, width),
                         jnp.int32)
    return q, k, v, tables


def _reference(q, k_layer, v_layer, tables, lengths):
    out = paged_attention_xla(q[:, None], k_layer, v_layer, tables,
                              (jnp.maximum(lengths, 1) - 1)[:, None])[:, 0]
    return jnp.where((lengths > 0)[:, None, None], out, 0.0)


@pytest.mark.parametrize("group,page_size", [(1, 16), (3, 16), (3, 4), (2, 1)])
def test_matches_the_xla_path_at_every_length_and_layer(group, page_size):
    width = 96 // page_size if page_size > 1 else 24
    q, k, v, tables = _case(0, group=group, page_size=page_size, width=width,
                            pages=max(40, 5 * width))
    full = width * page_size
    # Dead, one key, a page exactly, one past it, mid-table, the whole table.
    lengths = jnp.asarray([0, 1, page_size, page_size + 1, full], jnp.int32)
    for layer in range(k.shape[0]):
        got = jax.jit(cpu_native.paged_decode)(q, k, v, layer, tables, lengths)
        want = _reference(q, k[layer], v[layer], tables, lengths)
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    assert not np.any(np.asarray(got[0]))   # a dead row: zeros


def test_reads_no_page_past_a_rows_length():
    """Table entries past a row's length are never read: out-of-range ids there change
    nothing, and the pool's other pages (NaN) are never touched."""
    q, k, v, tables = _case(1)
    lengths = jnp.asarray([3, 17, 32, 40, 96], jnp.int32)
    used = np.zeros(k.shape[2], bool)
    np_tables = np.asarray(tables)
    for row, n in enumerate(np.asarray(lengths)):
        used[np_tables[row, :-(-n // 16)]] = True
    poison = jnp.where(jnp.asarray(used)[None, None, :, None, None], k, jnp.nan)
    garbage = np.array(np_tables)
    for row, n in enumerate(np.asarray(lengths)):
        garbage[row, -(-n // 16):] = [10**6, -7][row % 2]
    got = cpu_native.paged_decode(q, poison, jnp.where(jnp.isnan(poison), jnp.nan, v), 1,
                                  jnp.asarray(garbage), lengths)
    want = _reference(q, k[1], v[1], tables, lengths)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)


def test_bfloat16_pool_and_one_layer_pool():
    q, k, v, tables = _case(2)
    lengths = jnp.asarray([5, 16, 33, 64, 90], jnp.int32)
    kb, vb = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
    want = _reference(q, kb[0].astype(jnp.float32), vb[0].astype(jnp.float32), tables, lengths)
    got = cpu_native.paged_decode(q, kb, vb, 0, tables, lengths)          # bfloat16 pools
    bits = cpu_native.paged_decode(q, jax.lax.bitcast_convert_type(kb, jnp.uint16),
                                   jax.lax.bitcast_convert_type(vb, jnp.uint16), 0, tables,
                                   lengths)                                 # as_bits patterns
    one_layer = cpu_native.paged_decode(q, k[0], v[0], 0, tables, lengths)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    np.testing.assert_array_equal(got, bits)
    np.testing.assert_allclose(one_layer, _reference(q, k[0], v[0], tables, lengths),
                               atol=2e-6, rtol=1e-5)
    assert cpu_native.paged_decode(q.astype(jnp.bfloat16), kb, vb, 0, tables,
                                   lengths).dtype == jnp.bfloat16


def test_in_a_scan_over_layers_with_a_traced_layer():
    q, k, v, tables = _case(3, layers=4)
    lengths = jnp.asarray([7, 0, 48, 96, 50], jnp.int32)

    @jax.jit
    def run(q):
        def body(x, layer):
            return x, cpu_native.paged_decode(x, k, v, layer, tables, lengths)
        return jax.lax.scan(body, q, jnp.arange(4))[1]

    got = run(q)
    for layer in range(4):
        np.testing.assert_allclose(got[layer], _reference(q, k[layer], v[layer], tables, lengths),
                                   atol=2e-6, rtol=1e-5)


def test_bad_inputs_are_refused():
    q, k, v, tables = _case(4)
    lengths = jnp.ones(5, jnp.int32)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        cpu_native.paged_decode(q, k.astype(jnp.float16), v.astype(jnp.float16), 0, tables,
                                lengths)
    with pytest.raises(Exception, match="layer out of range"):
        jax.block_until_ready(cpu_native.paged_decode(q, k, v, 2, tables, lengths))
    with pytest.raises(Exception, match="shapes do not match"):
        jax.block_until_ready(cpu_native.paged_decode(q[:, :4], k, v, 0, tables, lengths))


def test_switched_off_or_without_a_compiler_the_engine_keeps_xla(monkeypatch, tmp_path):
    try:
        monkeypatch.setenv(cpu_native.ENV_SWITCH, "0")
        cpu_native._load.cache_clear()
        ok, why = cpu_native.available()
        assert not ok and cpu_native.ENV_SWITCH in why
        assert pm.resolve_decode_impl("auto")[0] == "xla"
        with pytest.raises(ValueError, match="cannot run here"):
            pm.resolve_decode_impl("native")
        monkeypatch.delenv(cpu_native.ENV_SWITCH)
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        cpu_native._load.cache_clear()
        ok, why = cpu_native.available()
        assert not ok and "no C++ compiler" in why
    finally:
        monkeypatch.undo()
        cpu_native._load.cache_clear()
    assert cpu_native.available()[0]
    assert pm.resolve_decode_impl("auto") == ("native", cpu_native.available()[1])
    assert pm.resolve_decode_impl("auto", devices=8)[0] == "xla"   # no sharding rule
    assert pm.resolve_decode_impl("xla")[0] == "xla"


def test_a_build_lands_whole_in_the_cache_keyed_by_source(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTIC_JAX_CACHE", str(tmp_path))
    try:
        cpu_native._load.cache_clear()
        ok, why = cpu_native.available()
        assert ok, why
        built = sorted(p.name for p in (tmp_path / "kernels").iterdir())
        assert [n for n in built if n.endswith(".so")] == [
            cpu_native.library_path(cpu_native._compiler()).name]   # no temporary left
    finally:
        monkeypatch.undo()
        cpu_native._load.cache_clear()
