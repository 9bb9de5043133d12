"""Per-request sampling in one engine batch: each row samples with its own temperature / top-p
(and key) exactly as it would in a batch of its own; rows left at the engine's settings, or
given the same settings explicitly, sample exactly what they did before."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import Episode, SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request

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


def test_top_logprobs_are_the_policys_and_change_no_token(model):
    """Rows that ask for the k most likely tokens get them at every sampled position (the
    untempered policy's, as the full forward computes them); every row's tokens and log-probs
    are what they are when none asks."""
    plain = _run(model, [(i, SETTINGS[i % 3]) for i in range(len(PROMPTS))])
    asked = {i: dataclasses.replace(SETTINGS[i % 3], top_logprobs=3 + i % 2)
             for i in range(0, len(PROMPTS), 2)}
    tops = _run(model, [(i, asked.get(i, SETTINGS[i % 3])) for i in range(len(PROMPTS))])
    for i, event in tops.items():
        assert event.tokens == plain[i].tokens, i
        np.testing.assert_array_equal(event.logprobs, plain[i].logprobs)
        if i not in asked:
            assert event.top_logprobs is None
            continue
        assert len(event.top_logprobs) == len(event.tokens)
        logits = model(jnp.asarray([PROMPTS[i] + event.tokens[:-1]]))[0, len(PROMPTS[i]) - 1:]
        policy = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1))
        for t, (token, logprob, pairs) in enumerate(zip(event.tokens, event.logprobs,
                                                        event.top_logprobs)):
            ids, lps = zip(*pairs)
            assert len(pairs) == asked[i].top_logprobs and list(lps) == sorted(lps)[::-1]
            np.testing.assert_array_equal(ids, np.argsort(-policy[t])[:len(ids)])
            np.testing.assert_allclose(lps, policy[t][list(ids)], atol=1e-4)
            if token in ids:     # the same number as the sampled token's own log-prob
                assert lps[ids.index(token)] == pytest.approx(float(logprob), abs=1e-6)


def test_top_logprobs_are_bounded():
    for bad in (-1, 21):
        with pytest.raises(ValueError, match="top_logprobs"):
            SamplingParams(top_logprobs=bad)


def test_top_logprobs_follow_pauses_cuts_and_resumes(model):
    """A greedy row's top alternative is its own token at every position, through pause hooks
    that cut turns and resumes that append tokens."""
    engine = Engine(model, EngineConfig(num_slots=2, page_size=8, decode_steps=6,
                                        max_seq_len=64))
    turns = {0: 0, 1: 0}

    def pause(turn, rid):
        return 3 if turns[rid] < 2 and len(turn) >= 5 else None

    for rid in turns:
        engine.submit(Request(rid, tuple(PROMPTS[rid]), 30, jax.random.key(rid),
                              pause=lambda turn, rid=rid: pause(turn, rid),
                              sampling=SamplingParams(0.0, top_logprobs=2)))
    seen = 0
    while engine.has_work:
        for event in engine.step():
            seen += 1
            assert len(event.top_logprobs) == len(event.tokens) > 0
            assert [pairs[0][0] for pairs in event.top_logprobs] == event.tokens
            if event.kind == "paused":
                turns[event.request_id] += 1
                engine.resume(event.request_id, [7, 8])
    assert seen == 6 and turns == {0: 2, 1: 2}


def test_an_episode_keeps_top_logprobs_beside_its_tokens():
    episode = Episode(prompt_tokens=[1, 2])
    episode.add_model_tokens([5, 6], [-0.1, -0.2], [0.0, 0.0])
    assert episode.top_logprobs is None             # not asked: nothing kept
    episode.add_model_tokens([7], [-0.3], [0.0], top_logprobs=[[(7, -0.3), (9, -2.0)]])
    episode.add_tool_tokens([11, 12])
    episode.add_model_tokens([13], [-0.4], [0.0], top_logprobs=[[(13, -0.4)]])
    assert episode.top_logprobs == [None, None, [(7, -0.3), (9, -2.0)], None, None,
                                    [(13, -0.4)]]
    episode.truncate(4)
    assert len(episode.top_logprobs) == len(episode.response_tokens) == 4
