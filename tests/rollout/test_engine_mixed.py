"""`EngineConfig.mixed_prefill`: a prefill chunk written in the same forward as a decode round
trip's first step samples what separate prefill calls do, whatever the scheduling."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine import paged_model as pm
from agentic_jax.rollout.engine.paged_kv import ChunkRows, forward_paged, init_paged_kv
from agentic_jax.rollout.engine.runner import ModelRunner
from tests.rollout.test_engine import (  # noqa: F401  (the model and baseline fixtures)
    CFG,
    PROMPTS,
    SHARED_START,
    _pause_after,
    _run,
    baseline,
    model,
)


def _assert_same(events, expected):
    assert events.keys() == expected.keys()
    for i, e in expected.items():
        assert events[i].tokens == e.tokens and events[i].reason == e.reason
        np.testing.assert_allclose(events[i].logprobs, e.logprobs, atol=1e-5)
        np.testing.assert_allclose(events[i].values, e.values, atol=1e-5)


@pytest.mark.parametrize("cfg", [
    # Chunks of up to 5 tokens cut mid-page beside 4 decoding slots.
    EngineConfig(num_slots=4, page_size=4, decode_steps=3, mixed_prefill=5),
    # A pool a little over one sequence: preemption while chunks ride with decode.
    EngineConfig(num_slots=4, page_size=4, kv_pages=26, decode_steps=8, mixed_prefill=8),
    # The step's budget (7 beside 2 running rows) cuts the chunk below mixed_prefill.
    EngineConfig(num_slots=2, page_size=8, step_tokens=7, mixed_prefill=16),
    pytest.param(EngineConfig(num_slots=3, page_size=8, mixed_prefill=8, layer_arrays=True),
                 id="layer-arrays"),
], ids=["cut-mid-page", "preempting", "budget-cut", "layer-arrays"])
def test_mixed_prefill_samples_what_separate_prefill_calls_do(model, baseline, cfg):
    events, engine = _run(model, cfg)
    _assert_same(events, baseline)
    stats = engine.stats
    assert stats.mixed_calls > 0
    # Every distinct prompt's context was written once (a preempted one may be again), by
    # prefill calls and mixed round trips together.
    context = sum(len(p) - 1 for p in set(map(tuple, PROMPTS)))
    if cfg.kv_pages is not None:
        assert stats.preemptions > 0 and stats.prefill_tokens >= context
    else:
        assert stats.prefill_tokens == context
    assert engine.pages_held == 0


def test_several_contexts_ride_in_one_round_trip(model, baseline, monkeypatch):
    """Requests admitted beside running rows prefill together, up to prefill_rows of them."""
    cfg = EngineConfig(num_slots=4, page_size=4, decode_steps=2, mixed_prefill=6,
                       prefill_rows=2)
    seen = []
    decode = ModelRunner.decode

    def spy(self, running, **kwargs):
        chunks = kwargs.get("chunks") or []
        seen.append(chunks)
        return decode(self, running, **kwargs)

    monkeypatch.setattr(ModelRunner, "decode", spy)
    events, engine = _run(model, cfg)
    _assert_same(events, baseline)
    assert max(map(len, seen)) == 2
    assert engine.stats.mixed_calls == sum(1 for chunks in seen if chunks)


def test_mixed_prefill_with_the_prefix_cache(model):
    cfg = EngineConfig(num_slots=2, page_size=8, prefix_caching=False)
    plain, _ = _run(model, cfg, SHARED_START)
    events, engine = _run(model, dataclasses.replace(cfg, prefix_caching=True, mixed_prefill=8),
                          SHARED_START)
    _assert_same(events, plain)
    assert engine.stats.mixed_calls > 0 and engine.stats.cached_tokens > 0


def test_the_chunk_writes_the_kv_a_prefill_call_writes(model):
    """One forward of decode rows and a chunk: the chunk's K/V equal the prefill program's,
    the decode rows' hidden states equal a decode step's alone."""
    graphdef, params = nnx.split(model)
    weights = pm.engine_weights(params, CFG)
    m = pm._merge(graphdef, weights)
    ps, pages = 4, 16
    rng = np.random.default_rng(1)
    # Two decode rows with 6 and 9 positions written by a prefill call of their own.
    kv = init_paged_kv(CFG, pages, ps)
    tables = jnp.asarray([[0, 1, 2, 3], [4, 5, 6, 7]], jnp.int32)
    context = jnp.asarray(rng.integers(2, 64, (2, 9)), jnp.int32)
    lens = jnp.asarray([6, 9], jnp.int32)
    kv = pm._prefill(graphdef, weights, kv, context, jnp.zeros(2, jnp.int32), lens, tables)
    # A chunk of 5 tokens (4 valid) from position 3 of a third sequence, its first 3 written.
    chunk_tokens = jnp.asarray(rng.integers(2, 64, (1, 8)), jnp.int32)
    chunk_table = jnp.asarray([[8, 9, 10, 11]], jnp.int32)
    kv = pm._prefill(graphdef, weights, kv, chunk_tokens[:, :3], jnp.zeros(1, jnp.int32),
                     jnp.asarray([3], jnp.int32), chunk_table)
    step = (context[jnp.arange(2), lens - 1][:, None], lens[:, None],
            jnp.ones((2, 1), bool))
    rows = ChunkRows(chunk_tokens[:, 3:], 3 + jnp.arange(5)[None], jnp.arange(5)[None] < 4,
                     chunk_table)
    mixed_hidden, mixed_kv = forward_paged(m, *step, kv, tables, chunk=rows)
    alone_hidden, alone_kv = forward_paged(m, *step, kv, tables)
    alone_kv = pm._prefill(graphdef, weights, alone_kv, rows.tokens, jnp.asarray([3]),
                           jnp.asarray([4]), chunk_table)
    np.testing.assert_allclose(mixed_hidden, alone_hidden, atol=1e-5)
    np.testing.assert_allclose(mixed_kv.k, alone_kv.k, atol=1e-5)
    np.testing.assert_allclose(mixed_kv.v, alone_kv.v, atol=1e-5)
    # The chunk's invalid fifth token wrote nothing: page 9's last position (3 + 4 = 7).
    assert not np.any(np.asarray(mixed_kv.k[:, :, 9, 3]))


@pytest.mark.parametrize("kwargs, match", [
    (dict(mixed_prefill=-1), "mixed_prefill must be >= 0"),
    (dict(mixed_prefill=8, speculative_tokens=2), "not both"),
])
def test_bad_mixed_prefill_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig(**kwargs)


def test_a_chunk_rides_only_with_one_token_decode_steps(model):
    """Three tokens a row (a speculative verify step's shape) with a chunk: refused."""
    graphdef, params = nnx.split(model)
    with pytest.raises(ValueError, match="one token a row"):
        jax.eval_shape(lambda: forward_paged(
            nnx.merge(graphdef, params), jnp.zeros((2, 3), jnp.int32),
            jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3), bool), init_paged_kv(CFG, 4, 4),
            jnp.zeros((2, 1), jnp.int32),
            chunk=ChunkRows(*(jnp.zeros((1, 2), t) for t in (jnp.int32, jnp.int32, bool)),
                            jnp.zeros((1, 1), jnp.int32))))


def test_a_tool_output_rides_with_running_rows(model):
    """A paused request resumed with a tool's output prefills it beside a running row: the
    same tokens as without mixing."""
    tool_output = [9, 8, 7, 6, 5, 4, 3]

    def run(mixed: int):
        engine = Engine(model, EngineConfig(num_slots=2, page_size=4, max_seq_len=120,
                                            mixed_prefill=mixed, sampling=SamplingParams(1.0)))
        engine.submit(Request("a", tuple(PROMPTS[4]), 60, jax.random.key(11),
                              pause=_pause_after(6)))
        engine.submit(Request("r", tuple(PROMPTS[6]), 80, jax.random.key(12)))
        events = {}
        while engine.has_work:
            for event in engine.step():
                if event.kind == "paused":
                    engine.resume(event.request_id, tool_output)
                else:
                    events[event.request_id] = event
        assert engine.pages_held == 0
        return events, engine.stats

    plain, _ = run(0)
    mixed, stats = run(8)
    _assert_same(mixed, plain)
    assert stats.mixed_calls > 0
