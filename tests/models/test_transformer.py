"""Transformer forward: shapes, causality, packing, dtypes, remat, value head, jit boundaries."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer

CFG = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, qkv_bias=True, rope_theta=500.0)


def _tokens(shape, seed=0):
    return jax.random.randint(jax.random.key(seed), shape, 0, CFG.vocab_size, dtype=jnp.int32)


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(0))


def test_call_returns_float32_logits(model):
    logits = model(_tokens((2, 7)))
    assert logits.shape == (2, 7, CFG.vocab_size) and logits.dtype == jnp.float32
    out = model.forward(_tokens((2, 7)))
    assert out.values is None


def test_layers_are_initialised_independently(model):
    q = model.blocks.attn.q_kernel[...]
    assert q.shape[0] == CFG.num_layers and not np.allclose(q[0], q[1])


def test_future_tokens_do_not_change_past_logits(model):
    tokens = _tokens((1, 8))
    changed = tokens.at[0, 5].set((tokens[0, 5] + 1) % CFG.vocab_size)
    a, b = model(tokens), model(changed)
    np.testing.assert_array_equal(a[:, :5], b[:, :5])
    assert not np.allclose(a[:, 5:], b[:, 5:])


def test_packed_segments_equal_separate_sequences(model):
    first, second = _tokens((1, 3), seed=1), _tokens((1, 4), seed=2)
    packed = jnp.concatenate([first, second], axis=1)
    positions = jnp.array([[0, 1, 2, 0, 1, 2, 3]])
    segments = jnp.array([[0, 0, 0, 1, 1, 1, 1]])
    logits = model.forward(packed, positions=positions, segment_ids=segments).logits
    np.testing.assert_allclose(logits[:, :3], model(first), atol=1e-5)
    np.testing.assert_allclose(logits[:, 3:], model(second), atol=1e-5)


def test_bfloat16_compute_keeps_float32_params_and_logits(model):
    cfg = dataclasses.replace(CFG, dtype="bfloat16")
    low = Transformer(cfg, rngs=nnx.Rngs(0))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(low, nnx.Param)))
    tokens = _tokens((2, 6))
    logits = low(tokens)
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(logits, model(tokens), atol=0.05)
    bf16_cfg = dataclasses.replace(cfg, param_dtype="bfloat16")
    bf16_params = nnx.eval_shape(lambda: Transformer(bf16_cfg, rngs=nnx.Rngs(0)))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(nnx.state(bf16_params)))


@nnx.jit
def _loss_and_grads(model, tokens):
    return nnx.value_and_grad(lambda m: jnp.mean(m(tokens) ** 2))(model)


@pytest.mark.parametrize("remat", ["full", "dots"])
def test_remat_changes_neither_loss_nor_gradients(model, remat):
    tokens = _tokens((2, 6))
    remat_model = Transformer(dataclasses.replace(CFG, remat=remat), rngs=nnx.Rngs(0))
    loss, grads = _loss_and_grads(model, tokens)
    remat_loss, remat_grads = _loss_and_grads(remat_model, tokens)
    np.testing.assert_allclose(remat_loss, loss, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), remat_grads, grads)


def test_value_head_gives_float32_values_per_token():
    cfg = dataclasses.replace(CFG, value_head=True)
    critic = Transformer(cfg, rngs=nnx.Rngs(0))
    tokens = _tokens((2, 5))
    out = critic.forward(tokens)
    assert out.values.shape == (2, 5) and out.values.dtype == jnp.float32
    np.testing.assert_array_equal(out.values, 0.0)  # zero init: the critic starts neutral
    critic.value_kernel[...] = jnp.ones((cfg.hidden_size, 1))
    critic.value_bias[...] = jnp.array([0.5])
    values = critic.forward(tokens).values
    assert np.all(np.abs(values - 0.5) > 1e-3)
    np.testing.assert_allclose(critic(tokens), out.logits, atol=1e-6)


def test_every_parameter_has_logical_axes_per_dimension(model):
    known = {"vocab", "embed", "heads", "kv_heads", "head_dim", "mlp", "layers"}
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        axes = var.get_metadata()["out_sharding"]
        assert len(axes) == var[...].ndim and set(axes) <= known, path


def test_jit_through_split_merge_and_nnx_jit(model):
    tokens = _tokens((2, 6))
    graphdef, state = nnx.split(model)

    @jax.jit
    def apply(state, tokens):
        return nnx.merge(graphdef, state)(tokens)

    expected = model(tokens)
    np.testing.assert_allclose(apply(state, tokens), expected, atol=1e-6)
    np.testing.assert_allclose(nnx.jit(lambda m, t: m(t))(model, tokens), expected, atol=1e-6)


@pytest.mark.slow
def test_pallas_attention_model_matches_xla(model):
    # same seed, same weights: only the attention implementation differs
    pallas = Transformer(dataclasses.replace(CFG, attention_impl="pallas"), rngs=nnx.Rngs(0))
    tokens = _tokens((2, 16))
    forward = nnx.jit(lambda m, t: m(t))
    np.testing.assert_allclose(forward(pallas, tokens), forward(model, tokens), atol=1e-5)
