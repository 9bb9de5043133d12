"""The rollout engine: scheduling never changes a sequence's tokens; pages are accounted exactly;
a paused sequence resumed with appended tokens continues as if they had been in its prompt."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.sampling import sample_tokens

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8, value_head=True)
# Ragged, with repeats (a group of three and a pair share their prompts), lengths around the
# page sizes used below.
_RNG = np.random.default_rng(0)
_UNIQUE = [_RNG.integers(3, 64, n).tolist() for n in (1, 5, 8, 9, 17, 3, 30)]
PROMPTS = [_UNIQUE[0], _UNIQUE[1], _UNIQUE[3], _UNIQUE[1], _UNIQUE[2], _UNIQUE[4], _UNIQUE[1],
           _UNIQUE[5], _UNIQUE[3], _UNIQUE[6]]
STOPS = (0, 1)
NEW = 40


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(3))


def _run(model, cfg: EngineConfig, prompts=PROMPTS, *, order=None, new=NEW, temperature=1.0):
    """Engine run of `prompts` (submitted in `order`); returns (events by id, stats)."""
    cfg = dataclasses.replace(cfg, sampling=SamplingParams(temperature),
                              max_seq_len=max(map(len, prompts)) + new)
    engine = Engine(model, cfg)
    keys = jax.random.split(jax.random.key(7), len(prompts))
    for i in order if order is not None else range(len(prompts)):
        engine.submit(Request(i, tuple(prompts[i]), new, keys[i], stop_tokens=STOPS))
    events = {e.request_id: e for e in engine.run()}
    return events, engine


@pytest.fixture(scope="module")
def baseline(model):
    events, _ = _run(model, EngineConfig(num_slots=4, page_size=8))
    return events


def test_sampled_tokens_are_the_cache_free_forwards_draws(model, baseline):
    """The token at position p is `sample_tokens` of the cache-free forward's logits at p - 1
    with the request's key folded with p; log-probs and values are the forward's too."""
    keys = jax.random.split(jax.random.key(7), len(PROMPTS))
    assert len({len(e.tokens) for e in baseline.values()}) > 2, "lengths should be ragged"
    # All sequences in one compiled causal forward, padded at their ends (which no earlier
    # position sees).
    rows = [prompt + baseline[i].tokens for i, prompt in enumerate(PROMPTS)]
    width = max(map(len, rows))
    padded = jnp.asarray([row + [0] * (width - len(row)) for row in rows])
    out = nnx.jit(lambda m, t: m.forward(t))(model, padded)
    # The draw at every position p >= 1 of every row, from the logits at p - 1, in one call.
    positions = jnp.arange(1, width)
    row_keys = jax.vmap(lambda k: jax.vmap(jax.random.fold_in, (None, 0))(k, positions))(keys)
    draws, logprobs = jax.jit(functools.partial(sample_tokens, temperature=1.0))(
        out.logits[:, :-1].reshape(-1, CFG.vocab_size), row_keys.reshape(-1))
    draws, logprobs = np.asarray(draws).reshape(len(rows), -1), logprobs.reshape(len(rows), -1)
    for i, prompt in enumerate(PROMPTS):
        tokens = baseline[i].tokens
        at = np.arange(len(prompt), len(prompt) + len(tokens))
        assert tokens == draws[i, at - 1].tolist()
        np.testing.assert_allclose(baseline[i].logprobs, logprobs[i, at - 1], atol=1e-4)
        np.testing.assert_allclose(baseline[i].values, out.values[i, at - 1], atol=1e-4)


@pytest.mark.parametrize("cfg,order", [
    pytest.param(EngineConfig(num_slots=1, page_size=4), None, marks=pytest.mark.slow),
    pytest.param(EngineConfig(num_slots=3, page_size=16, decode_steps=5), None,
                 marks=pytest.mark.slow),
    pytest.param(EngineConfig(num_slots=10, page_size=2, decode_steps=64),
                 list(range(9, -1, -1)), marks=pytest.mark.slow),
    # A pool a little over one sequence: preemption on almost every step.
    (EngineConfig(num_slots=4, page_size=4, kv_pages=26, decode_steps=8), None),
    # A step budget of 7 beside 4 decoding slots: prefill chunks of 3 to 7 tokens, cut
    # mid-page, written while the others decode.
    (EngineConfig(num_slots=4, page_size=4, decode_steps=3, step_tokens=7), None),
])
def test_tokens_do_not_depend_on_scheduling(model, baseline, cfg, order):
    events, engine = _run(model, cfg, order=order)
    for i, e in baseline.items():
        assert events[i].tokens == e.tokens and events[i].reason == e.reason
        np.testing.assert_allclose(events[i].logprobs, e.logprobs, atol=1e-4)
    if cfg.kv_pages is not None:
        assert engine.stats.preemptions > 0
    assert engine.pages_held == 0


def test_prefix_sharing_equals_separate_prompts(model, baseline):
    events, engine = _run(model, EngineConfig(num_slots=4, page_size=8))
    # Groups: _UNIQUE[1] x3, _UNIQUE[3] x2 -> three forks read a prefix someone else started.
    assert engine.stats.prefix_hits == 3
    unshared, _ = _run(model, EngineConfig(num_slots=1, page_size=8))   # one sequence at a time
    for i in baseline:
        assert events[i].tokens == unshared[i].tokens == baseline[i].tokens


class _CheckedPool:
    """Wraps an engine's pool: after every allocation, in-use pages stay within the budget and
    every in-use page has a positive reference count."""

    def __init__(self, pool):
        self.pool, self.max_in_use = pool, 0
        alloc = pool.alloc

        def checked(n):
            pages = alloc(n)
            assert pool.in_use <= pool.num_pages
            assert (pool.refs >= 0).all() and (pool.refs > 0).sum() == pool.in_use
            self.max_in_use = max(self.max_in_use, pool.in_use)
            return pages

        pool.alloc = checked


@pytest.mark.slow  # a soak; the pause / release tests below check the page counts by default
def test_no_page_leak_after_1000_requests(model):
    rng = np.random.default_rng(1)
    engine = Engine(model, EngineConfig(num_slots=16, page_size=4, kv_pages=48, max_seq_len=48,
                                        decode_steps=8))
    checked = _CheckedPool(engine.pool)
    prompts = [rng.integers(3, 64, rng.integers(1, 20)).tolist() for _ in range(100)]
    finished = 0
    for i in range(1000):
        # Every prompt is requested ten times: forks, prefix reuse and preemption all happen.
        engine.submit(Request(i, tuple(prompts[i % 100]), int(rng.integers(1, 16)),
                              jax.random.key(i), stop_tokens=(5,)))
        if i % 250 == 249:
            finished += len(engine.run())
    assert finished == 1000
    assert engine.pages_held == 0 and not engine.prefixes
    # Every page is free or the prefix cache's own, and free once the cache lets go of them.
    pages = engine.scheduler.pages
    assert engine.pool.num_free + len(pages.cache.pages) == engine.pool.num_pages
    pages.clear_cache()
    assert engine.pool.num_free == engine.pool.num_pages
    assert 0 < checked.max_in_use <= 48
    assert engine.stats.prefix_hits > 0 and engine.stats.preemptions > 0


def _pause_after(n, times=1):
    """A pause hook that keeps the first n tokens of a turn, for the first `times` turns."""
    paused = []

    def hook(turn):
        if len(paused) < times and len(turn) >= n:
            paused.append(n)
            return n
        return None

    return hook


def test_resume_with_appended_tokens_equals_decoding_the_concatenation(model):
    prompt, tool_output, key = PROMPTS[4], [9, 8, 7, 6, 5, 4, 3], jax.random.key(11)
    engine = Engine(model, EngineConfig(num_slots=2, page_size=4, max_seq_len=80,
                                        sampling=SamplingParams(1.0)))
    engine.submit(Request("a", tuple(prompt), 60, key, pause=_pause_after(6)))
    (paused,) = engine.run()
    assert paused.kind == "paused" and len(paused.tokens) == 6
    pages_held = engine.pool.in_use
    assert pages_held > 0                     # a paused sequence keeps its pages
    engine.resume("a", tool_output)
    (done,) = engine.run()
    joined = tuple(prompt) + tuple(paused.tokens) + tuple(tool_output)
    engine.submit(Request("b", joined, 60 - 6 - len(tool_output), key))
    (fresh,) = engine.run()
    assert done.kind == fresh.kind == "finished"
    assert done.tokens == fresh.tokens and len(done.tokens) == 60 - 6 - len(tool_output)
    np.testing.assert_allclose(done.logprobs, fresh.logprobs, atol=1e-4)
    assert engine.pages_held == 0


def test_pause_release_and_budget_on_resume(model):
    engine = Engine(model, EngineConfig(num_slots=2, page_size=4, max_seq_len=40))
    engine.submit(Request(0, (3, 4, 5), 20, jax.random.key(0), pause=_pause_after(3)))
    engine.submit(Request(1, (3, 4, 5), 20, jax.random.key(1), pause=lambda turn: 0))
    events = {e.request_id: e for e in engine.run()}
    assert events[0].tokens and len(events[0].tokens) == 3 and events[1].tokens == []
    engine.release(1)
    engine.resume(0, list(range(30)))          # more than the 17 tokens left
    (end,) = engine.run()
    assert (end.request_id, end.kind, end.reason, end.tokens) == (0, "finished", "length", [])
    assert engine.pages_held == 0 and not engine.seqs


def test_stats(model):
    _, engine = _run(model, EngineConfig(num_slots=4, page_size=8))
    stats = engine.stats.as_dict()
    assert 0 < stats["slot_utilisation"] <= 1
    assert stats["pages_peak"] <= stats["pool_pages"]
    # Only the prefix cache's pages stay in use once every request has ended.
    assert stats["pages_in_use"] == engine.pool.in_use and engine.pages_held == 0
    assert stats["prefill_s"] > 0 and stats["decode_s"] > 0 and stats["prefill_tokens"] > 0


def test_bad_requests(model):
    engine = Engine(model, EngineConfig(num_slots=2, max_seq_len=16))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="empty"):
        engine.submit(Request(0, (), 4, key))
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.submit(Request(0, (1,) * 10, 10, key))
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.submit(Request(0, (1,), 0, key))
    engine.submit(Request(0, (1,), 4, key))
    with pytest.raises(ValueError, match="already live"):
        engine.submit(Request(0, (1,), 4, key))
    with pytest.raises(ValueError, match="not paused"):
        engine.resume(0, [1])
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        Engine(model, EngineConfig(kv_pages=2, max_seq_len=64))
    with pytest.raises(ValueError, match="not both"):
        EngineConfig(kv_pages=8, kv_cache_mb=1.0)
    with pytest.raises(ValueError, match="num_slots"):
        EngineConfig(num_slots=0)


def test_sleep_frees_the_pool_and_a_woken_engine_samples_as_before(model, baseline):
    cfg = dataclasses.replace(EngineConfig(num_slots=4, page_size=8),
                              sampling=SamplingParams(1.0),
                              max_seq_len=max(map(len, PROMPTS)) + NEW)
    engine = Engine(model, cfg)
    keys = jax.random.split(jax.random.key(7), len(PROMPTS))
    # A first rollout writes K/V into pages that the second one reuses after the sleep.
    for i, prompt in enumerate(PROMPTS):
        engine.submit(Request(i, tuple(prompt), NEW, keys[i], stop_tokens=STOPS))
    engine.run()
    engine.submit(Request("held", tuple(PROMPTS[0]), NEW, keys[0], stop_tokens=STOPS))
    with pytest.raises(RuntimeError, match="cannot sleep while it holds 1 sequence"):
        engine.sleep()
    engine.abort("held")
    engine.sleep()
    assert engine.asleep and engine.kv is None and engine.params is None
    engine.submit(Request(0, tuple(PROMPTS[0]), NEW, keys[0], stop_tokens=STOPS))
    with pytest.raises(RuntimeError, match="asleep"):
        engine.run()
    engine.abort(0)
    engine.update_params(model)
    assert not engine.asleep
    _assert_samples(_rerun(engine, PROMPTS), baseline, atol=1e-4)
    assert engine.pages_held == 0


def _rerun(engine, prompts):
    """Submits `prompts` as `_run` does to an engine that already ran; events by id."""
    keys = jax.random.split(jax.random.key(7), len(prompts))
    for i, prompt in enumerate(prompts):
        engine.submit(Request(i, tuple(prompt), NEW, keys[i], stop_tokens=STOPS))
    return {e.request_id: e for e in engine.run()}


def _assert_samples(events, expected, atol):
    """The same tokens as ``expected``'s events, log-probs within ``atol``."""
    assert events.keys() == expected.keys()
    for i, e in expected.items():
        assert events[i].tokens == e.tokens
        np.testing.assert_allclose(events[i].logprobs, e.logprobs, atol=atol)


@pytest.mark.parametrize("pairs", [False, True], ids=["chunk", "decode-pairs"])
def test_layers_split_one_array_each_compute_what_the_stacked_scan_does(model, pairs):
    # On CPU the engine's programs read `engine_weights(...).layers` unrolled; on GPU / TPU the
    # stacked blocks in a scan. Both must give the same hidden states and write the same pool.
    import jax.numpy as jnp

    from agentic_jax.kernels.paged_attention import PagePairs
    from agentic_jax.rollout.engine import paged_kv, paged_model as pm

    graphdef, state = nnx.split(model)
    weights = pm.engine_weights(state, CFG, layer_arrays=True)
    assert pm.engine_weights(state, CFG).layers is None          # off unless asked for
    if jax.default_backend() == "cpu":
        assert len(weights.layers) == CFG.num_layers
        assert all(leaf.size == 0 for leaf in jax.tree.leaves(weights.state["blocks"]))
    layers = weights.layers or tuple(
        tuple(leaf[i] for leaf in jax.tree.leaves(state["blocks"])) for i in range(CFG.num_layers))
    kv = paged_kv.init_paged_kv(CFG, num_pages=8, page_size=4)
    tables = jnp.asarray([[0, 1, 2, 3], [4, 5, 6, 7]], jnp.int32)
    if pairs:   # one token a row after a 10- and a 5-token history already in the pool
        rng = np.random.default_rng(0)
        kv = paged_kv.PagedKV(k=jnp.asarray(rng.standard_normal(kv.k.shape), kv.k.dtype),
                        v=jnp.asarray(rng.standard_normal(kv.v.shape), kv.v.dtype))
        tokens, positions = jnp.asarray([[7], [9]]), jnp.asarray([[10], [5]])
        page_pairs = PagePairs(rows=jnp.asarray([0, 0, 0, 1, 1, 2]),
                               pages=jnp.asarray([0, 1, 2, 4, 5, 0]),
                               starts=jnp.asarray([0, 4, 8, 0, 4, 0]))
    else:
        tokens = jnp.asarray(_RNG.integers(3, 64, (2, 6)))
        positions, page_pairs = jnp.broadcast_to(jnp.arange(6), (2, 6)), None
    valid = jnp.ones(tokens.shape, bool)

    @jax.jit
    def run(kv, layers):
        m = nnx.merge(graphdef, state) if layers is None else pm._merge(graphdef, weights)
        return paged_kv.forward_paged(m, tokens, positions, valid, kv, tables, pairs=page_pairs,
                                layers=layers)

    stacked_hidden, stacked_kv = run(kv, None)
    split_hidden, split_kv = run(kv, layers)
    np.testing.assert_allclose(split_hidden, stacked_hidden, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(split_kv.k, stacked_kv.k, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(split_kv.v, stacked_kv.v, rtol=1e-5, atol=1e-5)
    assert float(jnp.abs(split_kv.k - kv.k).max()) > 0        # the tokens' K/V were written


def test_an_engine_with_layer_arrays_samples_what_the_default_one_does(model, baseline,
                                                                       monkeypatch):
    from agentic_jax.rollout.engine import runner

    released = []
    monkeypatch.setattr(runner, "release_host_memory", lambda: released.append(1) or True)
    events, engine = _run(model, EngineConfig(num_slots=4, page_size=8, layer_arrays=True))
    assert (engine.runner._weights.layers is not None) == (jax.default_backend() == "cpu")
    assert events.keys() == baseline.keys()
    for i, e in baseline.items():
        assert events[i].tokens == e.tokens
        np.testing.assert_allclose(events[i].logprobs, e.logprobs, atol=1e-5)
    engine.sleep()
    assert engine.runner._weights is None                 # the per-layer copies go with sleep
    assert released == [1]                                # and their memory back to the system


def test_layer_arrays_is_on_off_or_auto_and_auto_is_the_default():
    with pytest.raises(ValueError, match="layer_arrays"):
        EngineConfig(layer_arrays="yes")
    assert EngineConfig().layer_arrays == "auto" and EngineConfig().prefix_caching is True


def test_auto_layer_arrays_are_on_for_large_blocks_that_fit_in_memory():
    from agentic_jax.models import get_preset
    from agentic_jax.rollout.engine.runner import choose_layer_arrays

    gib = 1 << 30
    small, large = get_preset("tiny-0.2m"), get_preset("qwen2.5-0.5b")  # blocks 0.6 MB, 1.4 GB
    assert choose_layer_arrays("auto", small, 16 * gib, "cpu")[0] is False
    on, why = choose_layer_arrays("auto", large, 16 * gib, "cpu")
    assert on and "fits in 16.0 GiB" in why
    off, why = choose_layer_arrays("auto", large, 8 * gib, "cpu")  # a copy > 1/8 of 8 GiB
    assert not off and "more than 1/8 of the memory available (8.0 GiB)" in why
    assert choose_layer_arrays(True, small, 16 * gib, "cpu") == (True, "set in the config")
    assert choose_layer_arrays(True, large, 16 * gib, "gpu")[0] is False  # always scanned


# Prompts that start alike (two full pages of 8, then their own tails): what a shared system
# prompt does to a rollout's prompts.
_START = _RNG.integers(3, 64, 19).tolist()
SHARED_START = [_START + _RNG.integers(3, 64, n).tolist() for n in (1, 4, 9, 2, 6, 3)]


def test_prefix_caching_samples_what_the_engine_without_it_does(model):
    cfg = EngineConfig(num_slots=2, page_size=8)
    plain, _ = _run(model, cfg, SHARED_START)
    events, engine = _run(model, dataclasses.replace(cfg, prefix_caching=True), SHARED_START)
    # The first prompt prefills the start; the second, admitted beside it, waits for that
    # prefill and reads its two pages, as do the other four.
    assert engine.stats.cached_tokens == 5 * 16
    assert engine.stats.prefill_tokens == sum(map(len, SHARED_START)) - 6 - 5 * 16
    for i, e in plain.items():
        assert events[i].tokens == e.tokens
        np.testing.assert_allclose(events[i].logprobs, e.logprobs, atol=1e-5)
    cache = engine.scheduler.pages.cache
    assert len(cache) > 2 and engine.pool.in_use == len(cache)
    engine.sleep()                                   # the cache gives its pages back first
    assert engine.pool.in_use == 0 and len(cache) == 0


def test_prefix_caching_reads_nothing_the_old_weights_wrote(model):
    other = Transformer(CFG, rngs=nnx.Rngs(4))
    cfg = EngineConfig(num_slots=2, page_size=8, prefix_caching=True)
    expected, _ = _run(other, cfg, SHARED_START)
    _, engine = _run(model, cfg, SHARED_START)
    assert len(engine.scheduler.pages.cache) > 2
    engine.update_params(other)
    assert engine.pages_held == 0
    _assert_samples(_rerun(engine, SHARED_START), expected, atol=1e-5)


def test_prefix_caching_must_be_a_bool():
    with pytest.raises(ValueError, match="prefix_caching"):
        EngineConfig(prefix_caching=1)


def test_a_round_trip_ends_when_the_running_rows_fit_a_smaller_batch(model, baseline):
    from agentic_jax.rollout.engine.runner import _row_buckets

    assert _row_buckets(32) == [8, 12, 16, 24, 32] and _row_buckets(20) == [8, 12, 16, 20]
    assert _row_buckets(4) == [4] and _row_buckets(9) == [8, 9]
    # 16 slots, nothing queued: 6 requests end after 4 tokens. The first round trip (16
    # rows) stops there, when the 10 left fit 12 rows; the second runs them to the end.
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 64, 3 + i % 7).tolist() for i in range(16)]   # none shared
    new = [4 if i % 3 == 0 else 60 for i in range(16)]
    # The batch sizes themselves: no round trip on a larger program already compiled.
    cfg = EngineConfig(num_slots=16, page_size=8, decode_steps=64,
                       max_seq_len=max(map(len, prompts)) + 60, reuse_programs=False)
    keys = jax.random.split(jax.random.key(7), 16)
    events = {}
    for slots in (16, 1):
        engine = Engine(model, dataclasses.replace(cfg, num_slots=slots))
        for i, prompt in enumerate(prompts):
            engine.submit(Request(i, tuple(prompt), new[i], keys[i]))
        events[slots] = {e.request_id: e for e in engine.run()}
        if slots == 16:
            assert engine.stats.decode_calls == 2
            assert engine.stats.row_steps == 4 * 16 + 56 * 12
    for i in range(16):
        assert len(events[16][i].tokens) == new[i]
        assert events[16][i].tokens == events[1][i].tokens
        np.testing.assert_allclose(events[16][i].logprobs, events[1][i].logprobs, atol=1e-5)
