"""Per-request sampling in one engine batch: each row samples with its own temperature / top-p
(and key) exactly as it would in a batch of its own; rows left at the engine's settings, or
given the same settings explicitly, sample exactly what they did before."""

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.sampler import SamplingParams

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)
_RNG = np.random.default_rng(1)
PROMPTS = [_RNG.integers(3, 64, n).tolist() for n in (3, 7, 12, 5, 9, 4)]
SETTINGS = [SamplingParams(0.7, 0.9), SamplingParams(0.0), SamplingParams(1.3, 1.0)]
NEW = 24


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(5))


def _run(model, rows, engine_sampling=SamplingParams()):
    """rows: [(prompt index, SamplingParams | None)] -> {prompt index: Event}."""
    engine = Engine(model, EngineConfig(num_slots=8, page_size=8, decode_steps=6,
                                        max_seq_len=64, sampling=engine_sampling))
    keys = jax.random.split(jax.random.key(11), len(PROMPTS))
    for i, sampling in rows:
        engine.submit(Request(i, tuple(PROMPTS[i]), NEW, keys[i], stop_tokens=(0,),
                              sampling=sampling))
    return {e.request_id: e for e in engine.run()}


def test_mixed_settings_in_one_batch_equal_separate_batches(model):
    mixed = _run(model, [(i, SETTINGS[i % 3]) for i in range(len(PROMPTS))])
    for k, sampling in enumerate(SETTINGS):
        alone = _run(model, [(i, None) for i in range(k, len(PROMPTS), 3)],
                     engine_sampling=sampling)
        for i, event in alone.items():
            assert mixed[i].tokens == event.tokens, (i, sampling)
            np.testing.assert_allclose(mixed[i].logprobs, event.logprobs, atol=1e-5)
    assert len({tuple(mixed[i].tokens) for i in (0, 1, 2)}) == 3


def test_explicit_engine_settings_change_nothing(model):
    rows = range(len(PROMPTS))
    default = _run(model, [(i, None) for i in rows], engine_sampling=SETTINGS[0])
    explicit = _run(model, [(i, SETTINGS[0]) for i in rows], engine_sampling=SETTINGS[0])
    for i in rows:
        assert explicit[i].tokens == default[i].tokens
        np.testing.assert_array_equal(explicit[i].logprobs, default[i].logprobs)


def test_top_k_must_match_the_engine(model):
    engine = Engine(model, EngineConfig(num_slots=2, max_seq_len=32))
    with pytest.raises(ValueError, match="top_k"):
        engine.submit(Request(0, (3, 4), 4, jax.random.key(0),
                              sampling=SamplingParams(1.0, top_k=5)))
