"""The LM head in pieces along the sequence: a large vocabulary's [B, T, V] logits are never
whole in an update, and the log-probs, entropies, loss and gradients equal the whole-logits
computation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.rl import LossConfig, forward

VOCAB, B, T = 96, 3, 37  # T - 1 = 36 is not a multiple of the piece length: padding is used


@pytest.fixture(scope="module")
def model_and_tokens():
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=2, value_head=True)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    tokens = np.random.default_rng(0).integers(0, VOCAB, (B, T)).astype(np.int32)
    return model, jnp.asarray(tokens)


def _outputs(model, tokens, monkeypatch, chunked: bool):
    if chunked:  # pieces of 8 positions: 5 pieces, the last one padded
        monkeypatch.setattr(forward, "FULL_LOGITS_MAX_ELEMENTS", 0)
        monkeypatch.setattr(forward, "LOGITS_CHUNK_ELEMENTS", 8 * B * VOCAB)
    else:
        monkeypatch.setattr(forward, "FULL_LOGITS_MAX_ELEMENTS", 1 << 40)
    graphdef, state = nnx.split(model)

    def loss(state):
        m = nnx.merge(graphdef, state)
        logprobs, values, entropy = forward.policy_outputs(m, tokens, None, None, 0.7)
        return (logprobs * jnp.arange(T)).sum() + entropy.sum() + values.sum(), (
            logprobs, entropy)

    (value, (logprobs, entropy)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(state)
    return value, logprobs, entropy, grads


def test_pieces_equal_the_whole_logits(model_and_tokens, monkeypatch):
    model, tokens = model_and_tokens
    whole = _outputs(model, tokens, monkeypatch, chunked=False)
    pieces = _outputs(model, tokens, monkeypatch, chunked=True)
    np.testing.assert_allclose(pieces[1], whole[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pieces[2], whole[2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pieces[0], whole[0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(pieces[3]), jax.tree.leaves(whole[3])):
        # float sums in another order: errors relative to the leaf's scale
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    # index 0 has no prefix; every other position is a real log-probability
    assert float(pieces[1][0, 0]) == 0.0 and bool((pieces[1][:, 1:] < 0).all())


def test_an_update_never_holds_the_whole_logits(model_and_tokens, monkeypatch):
    """No [B, T-1, V] (or larger) float array appears in the compiled gradient once the
    batch's logits pass the threshold."""
    model, tokens = model_and_tokens
    monkeypatch.setattr(forward, "FULL_LOGITS_MAX_ELEMENTS", 0)
    monkeypatch.setattr(forward, "LOGITS_CHUNK_ELEMENTS", 8 * B * VOCAB)
    graphdef, state = nnx.split(model)
    cfg = LossConfig()

    def loss(state):
        m = nnx.merge(graphdef, state)
        return forward.policy_outputs(m, tokens, None, None, cfg.temperature)[0].sum()

    hlo = jax.jit(jax.grad(loss)).lower(state).as_text()
    assert f"<{B}x{T - 1}x{VOCAB}xf32>" not in hlo and f"<{B}x{T}x{VOCAB}xf32>" not in hlo
    assert f"<{B}x8x{VOCAB}xf32>" in hlo  # one piece's logits
