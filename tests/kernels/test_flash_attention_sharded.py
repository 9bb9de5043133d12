"""flash_attention under jit with batch and heads sharded over simulated devices (shard_map)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from agentic_jax.kernels import flash_attention, reference_attention
from attention_cases import Case, make_inputs, rel_error


@pytest.mark.slow  # compiles for 8 devices; test_flash_attention.py checks the kernel
def test_sharded_batch_and_heads_match_reference():
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    # 8 query heads over 4 kv heads: each shard keeps a GQA group of 2 on one kv head.
    case = Case(4, 24, 40, 8, 4, 64, segments="pair")
    host = make_inputs(case)
    heads = P("data", None, "model", None)
    rows = P("data", None)
    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))  # noqa: E731
    q, k, v = (put(x, heads) for x in host[:3])
    q_ids, kv_ids = (put(x, rows) for x in host[3])

    def local(q, k, v, q_ids, kv_ids):
        return flash_attention(q, k, v, causal=True, segment_ids=(q_ids, kv_ids), interpret=True,
                               block_q=16, block_kv=16)

    sharded = jax.shard_map(
        local, mesh=mesh, in_specs=(heads, heads, heads, rows, rows), out_specs=heads
    )

    def loss(attention, q, k, v, q_ids, kv_ids, cotangent):
        out = attention(q, k, v, q_ids, kv_ids)
        return jnp.sum(out * cotangent), out

    grad_fn = jax.value_and_grad(loss, argnums=(1, 2, 3), has_aux=True)
    (_, out), grads = jax.jit(grad_fn, static_argnums=0)(
        sharded, q, k, v, q_ids, kv_ids, put(host[4], heads)
    )
    reference = lambda q, k, v, qi, ki: reference_attention(q, k, v, True, (qi, ki))  # noqa: E731
    (_, ref_out), ref_grads = grad_fn(reference, *host[:3], *host[3], host[4])

    assert out.sharding.is_equivalent_to(NamedSharding(mesh, heads), out.ndim)
    assert rel_error(out, ref_out) <= 1e-5
    for grad, ref_grad in zip(grads, ref_grads):
        assert rel_error(grad, ref_grad) <= 1e-4


def test_context_mesh_runs_the_kernel_per_shard():
    """Under a context mesh (the train step's) the kernel runs in a shard_map, rows over data x
    fsdp and kv heads over tensor, and matches the reference forward and backward."""
    from agentic_jax.parallel import make_mesh

    case = Case(4, 16, 16, 4, 2, 16, segments="packed")
    q, k, v, ids, cotangent = make_inputs(case)

    def loss(attention, q, k, v):
        return jnp.sum(attention(q, k, v, True, ids) * cotangent)

    grad_fn = jax.jit(jax.grad(loss, argnums=(1, 2, 3)), static_argnums=0)
    with jax.set_mesh(make_mesh(2, 2, 2)):
        text = grad_fn.trace(flash_attention, q, k, v).lower().as_text()
        grads = grad_fn(flash_attention, q, k, v)
    assert "sdy.manual_computation" in text
    for grad, ref_grad in zip(grads, grad_fn(reference_attention, q, k, v)):
        assert rel_error(grad, ref_grad) <= 1e-4
