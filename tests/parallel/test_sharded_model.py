"""Sharded init and forward on 8 simulated devices (data=2, fsdp=2, tensor=2) match unsharded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.parallel import (
    create_sharded_model,
    make_mesh,
    param_shardings,
    shard_batch,
)

CFG = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, qkv_bias=True, tie_word_embeddings=False,
                  value_head=True)


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(data=2, fsdp=2, tensor=2)


@pytest.fixture(scope="module")
def models(mesh):
    return Transformer(CFG, rngs=nnx.Rngs(3)), create_sharded_model(CFG, mesh, seed=3)


def test_parameters_are_created_in_their_shards(models, mesh):
    _, sharded = models
    assert sharded.embed[...].sharding.spec == P("tensor", "fsdp")
    assert sharded.lm_head[...].sharding.spec == P("fsdp", "tensor")
    q = sharded.blocks.attn.q_kernel[...]
    assert q.sharding.spec == P(None, "fsdp", "tensor", None)
    assert q.addressable_shards[0].data.shape == (2, 16, 2, 8)
    expected = param_shardings(sharded, mesh)
    for (path, var), (_, want) in zip(nnx.to_flat_state(nnx.state(sharded)),
                                      nnx.to_flat_state(expected)):
        assert var[...].sharding.is_equivalent_to(want.get_value(), var[...].ndim), path


def test_sharded_init_equals_unsharded_init(models):
    plain, sharded = models
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-7),
                 nnx.state(plain), nnx.state(sharded))


def test_sharded_forward_equals_unsharded(models, mesh):
    plain, sharded = models
    # a trained-looking value head, so values are compared on non-trivial numbers
    for model in models:
        model.value_kernel[...] = jnp.linspace(-1.0, 1.0, CFG.hidden_size)[:, None]
    # 80 tokens: attention in two causal blocks (`models.attention.CAUSAL_BLOCK`).
    tokens = jax.random.randint(jax.random.key(0), (8, 80), 0, CFG.vocab_size, dtype=jnp.int32)
    forward = nnx.jit(lambda m, t: m.forward(t))
    expected = forward(plain, tokens)
    out = forward(sharded, shard_batch(tokens, mesh))
    np.testing.assert_allclose(out.logits, expected.logits, atol=1e-5)
    np.testing.assert_allclose(out.values, expected.values, atol=1e-5)


def test_shard_batch_splits_the_leading_axis(mesh):
    batch = {"tokens": np.zeros((8, 3), np.int32), "step": np.int32(0)}
    placed = shard_batch(batch, mesh)
    assert placed["tokens"].sharding.spec == P(("data", "fsdp"))
    assert placed["tokens"].addressable_shards[0].data.shape == (2, 3)
    assert placed["step"].sharding.spec == P()
    with pytest.raises(ValueError, match="mesh.data \\* mesh.fsdp = 4"):
        shard_batch(np.zeros((6, 3)), mesh)
