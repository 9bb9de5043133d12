"""Speculative decoding with prompt-lookup drafts (`EngineConfig.speculative_tokens`): greedy
output identical to plain decoding, the same token distribution when sampling, log-probs the
target model's, stop ids and budgets respected, pages returned."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine.speculative import context_window, draft_tokens

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)
SMALL = ModelConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_layers=1,
                    num_heads=2, num_kv_heads=1, head_dim=8)
_RNG = np.random.default_rng(3)
# Prompts that repeat themselves, so drafts exist.
PROMPTS = [(_RNG.integers(3, 64, n).tolist() * 4)[:m] for n, m in
           ((4, 14), (5, 20), (3, 9), (6, 24), (2, 7), (7, 21))]


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(5))


def _run(model, k, *, temperature=0.0, new=24, stop=(0,), prompts=PROMPTS, key=11,
         top_logprobs=0, num_slots=4):
    engine = Engine(model, EngineConfig(
        num_slots=num_slots, page_size=8, decode_steps=5, max_seq_len=96,
        speculative_tokens=k,
        sampling=SamplingParams(temperature, top_logprobs=top_logprobs)))
    keys = jax.random.split(jax.random.key(key), len(prompts))
    for i, prompt in enumerate(prompts):
        budget = new if isinstance(new, int) else new[i % len(new)]
        engine.submit(Request(i, tuple(prompt), budget, keys[i], stop_tokens=stop))
    events = {e.request_id: e for e in engine.run()}
    assert engine.pages_held == 0 and not engine.seqs
    return events, engine.stats


def test_drafts_follow_the_latest_earlier_occurrence():
    window = jnp.asarray(context_window([[1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3],
                                         [4, 5, 6], [6, 1, 2, 6]], 4, width=12))
    drafts, num = draft_tokens(window, ngram=3, k=3)
    assert num.tolist() == [3, 0, 3, 0]
    assert drafts[0].tolist() == [7, 5, 1]      # after the later "1 2 3", not the first
    assert drafts[2].tolist() == [1, 2, 6]      # a one-token suffix when no longer one matches


def test_greedy_output_is_plain_decodings(model):
    plain, _ = _run(model, 0)
    for k in (1, 4):
        spec, stats = _run(model, k)
        assert stats.drafted_tokens > 0 and stats.accepted_tokens > 0, k
        assert 0 < stats.acceptance_rate <= 1
        for i, event in plain.items():
            assert spec[i].tokens == event.tokens, (k, i)
            assert (spec[i].kind, spec[i].reason) == (event.kind, event.reason)
            np.testing.assert_allclose(spec[i].logprobs, event.logprobs, atol=1e-5)
            np.testing.assert_allclose(spec[i].values, event.values, atol=1e-5)


def test_stop_ids_budgets_and_top_logprobs_as_plain(model):
    """Stop ids that occur in the drafted runs and budgets shorter than a step's run cut the
    emitted tokens where plain decoding stops; the top log-probs are plain decoding's."""
    plain, _ = _run(model, 0, new=24)
    common = collections.Counter(t for e in plain.values() for t in e.tokens).most_common(2)
    stop = tuple(t for t, _ in common)
    budgets = (1, 2, 3, 7, 11, 24)
    plain, _ = _run(model, 0, new=budgets, stop=stop, top_logprobs=3)
    spec, stats = _run(model, 3, new=budgets, stop=stop, top_logprobs=3)
    assert stats.accepted_tokens > 0
    assert any(e.reason == "stop" for e in plain.values())
    for i, event in plain.items():
        assert spec[i].tokens == event.tokens and spec[i].reason == event.reason, i
        assert len(spec[i].tokens) <= budgets[i % len(budgets)]
        assert not set(spec[i].tokens[:-1]) & set(stop)
        assert [[t for t, _ in top] for top in spec[i].top_logprobs] == \
            [[t for t, _ in top] for top in event.top_logprobs]


def test_logprobs_are_the_target_models(model):
    """At T=1 each emitted token's log-prob is the model's log-softmax at its position,
    recomputed over the whole sequence at once."""
    events, stats = _run(model, 4, temperature=1.0)
    assert stats.drafted_tokens > 0
    for i, event in events.items():
        seq = PROMPTS[i] + event.tokens
        logits = model(jnp.asarray([seq[:-1]]))[0]
        ref = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        n = len(PROMPTS[i])
        want = ref[jnp.arange(n - 1, len(seq) - 1), jnp.asarray(event.tokens)]
        np.testing.assert_allclose(event.logprobs, want, atol=1e-4)


def test_sampled_distribution_is_plain_decodings():
    """T=1 over 1200 seeds of an 8-token vocabulary: the first three emitted tokens' marginals
    with drafts (k=3) and without, from different seeds, are within a total-variation distance
    that sampling noise stays far below (about 0.03 expected), while always accepting the
    drafts moves them by far more. Fixed seeds: the test is deterministic."""
    small = Transformer(SMALL, rngs=nnx.Rngs(2))
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2]] * 1200
    plain, _ = _run(small, 0, temperature=1.0, new=3, stop=(), prompts=prompts, key=1,
                    num_slots=32)
    spec, stats = _run(small, 3, temperature=1.0, new=3, stop=(), prompts=prompts, key=2,
                       num_slots=32)
    assert stats.accepted_tokens > 100 and stats.acceptance_rate < 0.9
    for pos in range(3):
        p = np.bincount([e.tokens[pos] for e in plain.values()], minlength=8) / len(prompts)
        q = np.bincount([e.tokens[pos] for e in spec.values()], minlength=8) / len(prompts)
        assert 0.5 * np.abs(p - q).sum() < 0.08, (pos, p, q)


def test_multi_query_pair_attention_is_block_table_attention():
    """Several queries a row over the page pairs give the block-table attention's output."""
    from agentic_jax.kernels.paged_attention import (PagePairs, paged_attention_xla,
                                                     ragged_multi_query_attention_xla)
    rng = np.random.default_rng(0)
    hkv, pages, ps, dim, rows, t = 2, 12, 4, 8, 3, 3
    k_pool = jnp.asarray(rng.normal(size=(hkv, pages, ps, dim)), jnp.float32)
    v_pool = jnp.asarray(rng.normal(size=(hkv, pages, ps, dim)), jnp.float32)
    tables = np.array([[3, 5, 0], [7, 1, 2], [4, 0, 0]], np.int32)
    used = [3, 3, 1]
    lengths = np.array([6, 9, 1])                       # first query's position
    positions = jnp.asarray(lengths[:, None] + np.arange(t), jnp.int32)
    positions = jnp.minimum(positions, jnp.asarray([[11], [11], [3]]))
    q = jnp.asarray(rng.normal(size=(rows, t, 4, dim)), jnp.float32)
    pair_rows = np.concatenate([[r] * n for r, n in enumerate(used)] + [[rows] * 3])
    pair_pages = np.concatenate([tables[r, :n] for r, n in enumerate(used)] + [[0] * 3])
    starts = np.concatenate([np.arange(n) * ps for n in used] + [[0] * 3])
    pairs = PagePairs(*(jnp.asarray(x, jnp.int32) for x in (pair_rows, pair_pages, starts)))
    got = ragged_multi_query_attention_xla(q, k_pool, v_pool, pairs, positions)
    want = paged_attention_xla(q, k_pool, v_pool, jnp.asarray(tables), positions)
    np.testing.assert_allclose(got, want, atol=1e-5)
