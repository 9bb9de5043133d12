"""The trainer's recomputed log-probs (and values) of sampled tokens equal the engine's.

PPO's importance ratio compares the two, so any drift between the KV-cache decode path and the
full-sequence training forward biases every update. Log-probs are always those of the untempered,
untruncated policy, whatever temperature / top-p / top-k the tokens were drawn with.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rl.forward import compute_logprobs
from agentic_jax.rollout import generate
from agentic_jax.rollout.engine import Engine, EngineConfig, Request

CFG = ModelConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=True, value_head=True)
PROMPTS = [[3, 14, 15, 92, 65], [35], [89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19,
                                          71, 69, 39], [93, 75, 10]]
NEW_TOKENS = 20
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model() -> Transformer:
    """A model with weights large enough for peaked next-token distributions: a log-prob off by
    one position, or taken under the tempered policy, is then far outside the tolerance."""
    model = Transformer(CFG, rngs=nnx.Rngs(0))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    rng = np.random.default_rng(1)
    for path, var in flat:
        if path[-1] != "scale":  # norm scales stay at one
            var.set_value(jnp.asarray(0.15 * rng.standard_normal(var.get_value().shape),
                                      jnp.float32))
    nnx.update(model, nnx.from_flat_state(flat))
    return model


def _padded_batch(prompts, outputs) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded tokens int32 [B, T] (prompt + output) and positions [B, T]."""
    width = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    tokens = np.zeros((len(prompts), width), np.int32)
    for b, (p, o) in enumerate(zip(prompts, outputs)):
        tokens[b, :len(p) + len(o)] = list(p) + list(o)
    positions = np.broadcast_to(np.arange(width, dtype=np.int32), tokens.shape)
    return tokens, positions


def _recomputed(model, prompts, outputs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The trainer's (log-probs, values) of each row's generated tokens."""
    graphdef, state = nnx.split(model)
    tokens, positions = _padded_batch(prompts, outputs)
    logprobs, values, _ = jax.device_get(
        compute_logprobs(graphdef, state, jnp.asarray(tokens), jnp.asarray(positions)))
    spans = [slice(len(p), len(p) + len(o)) for p, o in zip(prompts, outputs)]
    return [logprobs[b, s] for b, s in enumerate(spans)], [values[b, s] for b, s in enumerate(spans)]


@pytest.mark.parametrize("temperature, top_p, top_k", [
    (1.0, 1.0, 0),
    (1.0, 0.8, 0),
    (0.7, 0.9, 5),
])
def test_recomputed_logprobs_equal_the_engines(model, temperature, top_p, top_k):
    outputs, sampled = generate(model, PROMPTS, max_new_tokens=NEW_TOKENS,
                                temperature=temperature, top_p=top_p, top_k=top_k, seed=11,
                                stop_tokens=[7], return_logprobs=True)
    recomputed, _ = _recomputed(model, PROMPTS, outputs)
    flat = np.concatenate(sampled)
    # Peaked but not degenerate: the check can tell one position's log-prob from another's.
    assert flat.std() > 0.3 and flat.min() < -1.0
    for b, (got, want) in enumerate(zip(sampled, recomputed)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0, err_msg=f"row {b}")


def test_recomputed_values_equal_the_engines(model):
    engine = Engine(model, EngineConfig(num_slots=len(PROMPTS), page_size=8, max_seq_len=64))
    keys = jax.random.split(jax.random.key(5), len(PROMPTS))
    for b, prompt in enumerate(PROMPTS):
        engine.submit(Request(b, tuple(prompt), NEW_TOKENS, keys[b]))
    events = sorted(engine.run(), key=lambda e: e.request_id)
    logprobs, values = _recomputed(model, PROMPTS, [e.tokens for e in events])
    assert np.abs(np.concatenate(values)).max() > 0.1  # the value head is not the zero init
    for b, e in enumerate(events):
        np.testing.assert_allclose(e.logprobs, logprobs[b], atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(e.values, values[b], atol=TOLERANCE, rtol=0)
