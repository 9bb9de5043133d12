"""The engine's scheduler alone, on a scripted runner (no model, no JAX calls): admission order,
prefix sharing and copy-on-write forks, preemption in a small pool, pause / resume / release /
abort freeing pages, statistics. The runner keeps a host copy of what the K/V pool would hold
and checks, before every decode, that each sequence's pages hold its context and that it
writes only pages of its own."""

import os
import subprocess
import sys

import numpy as np
import pytest

from agentic_jax.rollout.engine.pages import PagePool
from agentic_jax.rollout.engine.runner_api import DecodeResult
from agentic_jax.rollout.engine.scheduler import Scheduler
from agentic_jax.rollout.engine.types import EngineConfig, Request, SamplingParams

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STOP = 1


def _token(rid, position):
    """The scripted model: the token at a position depends only on the request and position."""
    return 10 + (rid * 7 + position * 3) % 40


class ScriptedRunner:
    """A `Runner` whose "model" is ``token_at(request_id, position)``; its pool is a dict
    (page, offset) -> the token whose K/V sits there."""

    def __init__(self, cfg: EngineConfig, token_at=_token):
        self.page_size, self.steps, self.token_at = cfg.page_size, cfg.decode_steps, token_at
        self.pool = None      # the scheduler's PagePool, to check that writes hit owned pages
        self.kv: dict[tuple[int, int], int] = {}
        self.prefilled: list[list[int]] = []      # the tokens of each prefill chunk
        self.copies: list[tuple[int, int]] = []
        self.decode_batches: list[list] = []      # request ids of each decode call
        self.mixed: list[list[list[int]]] = []   # the chunks that rode with each decode call

    def key_data(self, key):
        return np.asarray(key, np.uint32)

    def copy_pages(self, copies):
        self.copies += copies
        for src, dst in copies:
            for off in range(self.page_size):
                if (src, off) in self.kv:
                    self.kv[dst, off] = self.kv[src, off]

    def _write(self, pages, position, token, *, own=True):
        page = pages[position // self.page_size]
        if own:
            assert self.pool.refs[page] == 1, f"write into shared page {page}"
        self.kv[page, position % self.page_size] = token

    def prefill(self, chunks):
        for chunk in chunks:
            self.prefilled.append(list(chunk.tokens))
            for j, token in enumerate(chunk.tokens):
                self._write(chunk.pages, chunk.start + j, token)

    def decode(self, running, *, stop_width, return_early, sampling, chunks=None):
        if chunks:   # `EngineConfig.mixed_prefill`: written in the first step's forward
            self.mixed.append([list(c.tokens) for c in chunks])
            self.prefill(chunks)
        ps, rows = self.page_size, len(running)
        self.decode_batches.append([s.request.request_id for s in running])
        toks = np.zeros((rows, self.steps), np.int32)
        count, stopped = np.zeros(rows, np.int32), np.zeros(rows, bool)
        for i, seq in enumerate(running):
            context = [self.kv.get((seq.pages[p // ps], p % ps)) for p in range(seq.length)]
            assert context == seq.tokens[:seq.length], f"{seq.request.request_id}: stale K/V"
            ends = seq.request.stop_tokens + seq.request.pause_tokens
            assert stop_width >= len(ends)
            current, position = seq.tokens[-1], seq.length
            for k in range(min(self.steps, seq.budget)):
                self._write(seq.pages, position, current)
                current = self.token_at(seq.request.request_id, position + 1)
                toks[i, k], count[i], position = current, k + 1, position + 1
                if current in ends:
                    stopped[i] = True
                    break
        steps = int(count.max())
        logprobs = -np.ones((rows, self.steps), np.float32)
        return DecodeResult(toks, logprobs, np.zeros_like(logprobs), count, stopped, steps, rows)


def _scheduler(pages=64, token_at=_token, **kw):
    # Page counts below are exact without the prefix cache; its cases turn it on.
    cfg = EngineConfig(**{"num_slots": 2, "page_size": 4, "max_seq_len": 48,
                          "decode_steps": 4, "prefill_chunk": 8, "prefix_caching": False,
                          **kw})
    runner = ScriptedRunner(cfg, token_at)
    scheduler = Scheduler(cfg, PagePool(pages), runner, page_bytes=128)
    runner.pool = scheduler.pages.pool
    return scheduler, runner


def _request(rid, prompt, new=12, **kw):
    return Request(rid, tuple(prompt), new, np.array([0, rid], np.uint32), **kw)


def _run(scheduler, max_steps=1000):
    events = []
    for _ in range(max_steps):
        if not scheduler.has_work:
            return events
        events += scheduler.step()
    raise AssertionError("the scheduler did not finish")


def _expected(rid, prompt, new, stop=None):
    out = [_token(rid, p) for p in range(len(prompt), len(prompt) + new)]
    return out[:out.index(stop) + 1] if stop in out else out


def _assert_empty(scheduler):
    pool = scheduler.pages.pool
    assert not scheduler.seqs and not scheduler.pages.prefixes and not scheduler.waiting
    assert pool.in_use == 0 and (pool.refs == 0).all()


def test_the_scheduler_imports_no_jax():
    # The package __init__ files import the runner (and JAX); stand-ins for them show that
    # the scheduler's own imports do not.
    code = ("import sys, types\n"
            "for name in ('agentic_jax', 'agentic_jax.rollout', 'agentic_jax.rollout.engine'):\n"
            "    module = types.ModuleType(name)\n"
            f"    module.__path__ = [{ROOT!r} + '/' + name.replace('.', '/')]\n"
            "    sys.modules[name] = module\n"
            "import agentic_jax.rollout.engine.scheduler\n"
            "import agentic_jax.rollout.engine.slot_table\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax')]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_admission_in_queue_order_and_tokens_by_position():
    scheduler, runner = _scheduler(num_slots=2)
    prompts = {0: [3, 4, 5], 1: [6, 7], 2: [8, 9, 2, 3, 4], 3: [5]}
    for rid, prompt in prompts.items():
        scheduler.submit(_request(rid, prompt, new=6))
    scheduler.step()
    assert [s.request.request_id for s in scheduler.slots] == [0, 1]
    assert [s.request.request_id for s in scheduler.waiting] == [2, 3]
    events = _run(scheduler)
    assert [e.request_id for e in events] == [0, 1, 2, 3]
    assert runner.decode_batches[0] == [0, 1] and [2, 3] in runner.decode_batches
    for e in events:
        assert (e.kind, e.reason) == ("finished", "length")
        assert e.tokens == _expected(e.request_id, prompts[e.request_id], 6)
    _assert_empty(scheduler)


def test_stop_token_finishes_and_frees_the_slot_for_the_queue():
    def token_at(rid, position):
        return STOP if (rid, position) == (0, 5) else _token(rid, position)

    scheduler, _ = _scheduler(num_slots=1, token_at=token_at)
    scheduler.submit(_request(0, [3, 4, 5], new=20, stop_tokens=(STOP,)))
    scheduler.submit(_request(1, [6, 7], new=10))
    first = scheduler.step()
    assert [(e.request_id, e.reason, e.tokens) for e in first] == [(0, "stop", [_token(0, 3),
                                                                             _token(0, 4), STOP])]
    scheduler.step()
    assert scheduler.slots[0].request.request_id == 1
    _run(scheduler)
    _assert_empty(scheduler)


def test_equal_prompts_share_one_prefill_and_fork_with_a_copied_last_page():
    scheduler, runner = _scheduler(num_slots=4)
    prompt = [3, 4, 5, 6, 7, 8]            # prefix of 5 tokens: one full page of 4 and one more
    for rid in range(3):
        scheduler.submit(_request(rid, prompt, new=12))
    scheduler.submit(_request(3, [9, 9, 9], new=12))     # sampled once: no shared prefix
    assert scheduler.pages.prefixes[tuple(prompt[:-1])].refs == 3
    scheduler.step()        # the prefix is written once; its first member forks
    assert runner.prefilled.count(prompt[:-1]) == 1 and [9, 9] in runner.prefilled
    assert len(runner.copies) == 1 and [s.request.request_id for s in scheduler.waiting] == [1, 2]
    scheduler.step()        # the others fork from the prefix without prefilling it
    assert runner.prefilled.count(prompt[:-1]) == 1
    assert len(runner.copies) == 3                       # the partial page, once per fork
    assert scheduler.stats.prefix_hits == 2              # two forks read a prefix already used
    shared_page = scheduler.seqs[0].pages[0]
    assert all(scheduler.seqs[r].pages[0] == shared_page for r in range(3))
    assert not scheduler.pages.prefixes                  # every member forked: prefix freed
    assert scheduler.pages.pool.refs[shared_page] == 3
    events = {e.request_id: e for e in _run(scheduler)}
    for rid in range(3):
        assert events[rid].tokens == _expected(rid, prompt, 12)
    _assert_empty(scheduler)


def test_preemption_in_a_small_pool_changes_no_token():
    prompts = [[3 + i, 4, 5, 6, 7][: 2 + i % 4] for i in range(6)] + [[3, 4, 5, 6]] * 2
    results = {}
    for pages in (64, 11):   # 11: one whole sequence (max_seq_len 36 + a round trip) and one
        scheduler, _ = _scheduler(pages=pages, num_slots=4, max_seq_len=36)
        for rid, prompt in enumerate(prompts):
            scheduler.submit(_request(rid, prompt, new=30))
        results[pages] = {e.request_id: e.tokens for e in _run(scheduler)}
        assert (scheduler.stats.preemptions > 0) == (pages == 11)
        assert scheduler.stats.pages_peak <= pages
        _assert_empty(scheduler)
    assert results[11] == results[64]
    assert results[64] == {rid: _expected(rid, p, 30) for rid, p in enumerate(prompts)}


def _pause_after(n):
    """Pauses a turn once it has n tokens (keeping them), every turn."""
    return lambda turn: n if len(turn) >= n else None


def test_pause_keeps_pages_and_resume_continues_after_the_appended_tokens():
    scheduler, _ = _scheduler()
    prompt = [3, 4, 5]
    scheduler.submit(_request(0, prompt, new=20, pause=_pause_after(3)))
    (paused,) = _run(scheduler)
    assert (paused.kind, paused.reason) == ("paused", "pause")
    assert paused.tokens == _expected(0, prompt, 3)     # the 4th token of the round trip cut
    held = scheduler.pages.pool.in_use
    assert held > 0 and scheduler.seqs[0].state == "paused" and not scheduler.has_work
    tool = [40, 41, 42, 43, 44]
    scheduler.resume(0, tool)
    assert scheduler.waiting[0].request.request_id == 0
    (second,) = _run(scheduler)
    start = len(prompt) + 3 + len(tool)
    assert second.tokens == [_token(0, p) for p in range(start, start + 3)]
    assert scheduler.seqs[0].tokens == prompt + paused.tokens + tool + second.tokens
    scheduler.resume(0, list(range(50, 80)))            # more than the budget left
    (end,) = _run(scheduler)
    assert (end.kind, end.reason, end.tokens) == ("finished", "length", [])
    _assert_empty(scheduler)


def test_release_and_abort_free_pages_in_every_state():
    scheduler, _ = _scheduler(num_slots=2)
    scheduler.submit(_request(0, [3, 4, 5], pause=_pause_after(2)))
    scheduler.submit(_request(1, [6, 7, 8], pause=_pause_after(2)))
    scheduler.submit(_request(2, [9, 8, 7]))
    scheduler.submit(_request(3, [2, 8, 7]))
    assert [e.kind for e in scheduler.step()] == ["paused", "paused"]
    scheduler.step()                                    # 2 and 3 decode in the slots
    scheduler.submit(_request(4, [5, 5, 5]))            # queued behind them
    states = {rid: seq.state for rid, seq in scheduler.seqs.items()}
    assert states == {0: "paused", 1: "paused", 2: "running", 3: "running", 4: "waiting"}
    with pytest.raises(ValueError, match="not paused"):
        scheduler.release(2)
    scheduler.release(0)
    assert scheduler.abort(1) and scheduler.abort(2) and scheduler.abort(4)
    assert not scheduler.abort(4) and not scheduler.abort("nobody")
    assert list(scheduler.seqs) == [3] and scheduler.pages.pool.in_use == len(
        scheduler.seqs[3].pages)
    assert scheduler.abort(3)
    assert scheduler.step() == []
    _assert_empty(scheduler)
    assert all(s is None for s in scheduler.slots) and not scheduler.has_work


def test_events_record_the_policy_version():
    scheduler, _ = _scheduler()
    scheduler.submit(_request(0, [3, 4], new=8))
    scheduler.step()
    scheduler.version = 7
    (event,) = _run(scheduler)
    assert event.versions.tolist() == [0] * 4 + [7] * 4
    assert event.logprobs.dtype == np.float32 and len(event.values) == 8


def test_stats_count_what_ran_and_reset():
    scheduler, _ = _scheduler(num_slots=4, decode_steps=4)
    for rid in range(3):
        scheduler.submit(_request(rid, [3, 4, 5, 6, 7][: rid + 2], new=8))
    _run(scheduler)
    stats = scheduler.stats
    assert stats.token_steps == 24 and stats.decode_calls == 2
    assert stats.slot_steps == 8 * 4 and stats.row_steps == 8 * 3
    assert stats.slot_utilisation == 24 / 32
    assert stats.prefill_tokens == 1 + 2 + 3 and stats.prefill_calls == 1
    assert stats.steps == 2 and 0 < stats.pages_peak <= 12 and stats.pages_in_use == 0
    assert stats.as_dict()["kv_peak_bytes"] == stats.pages_peak * 128
    old = scheduler.reset_stats()
    assert old is stats and scheduler.stats.token_steps == 0
    assert scheduler.stats.pool_pages == 64 and scheduler.pages.pool.peak == 0


def test_submit_rejects_what_the_engine_cannot_take():
    scheduler, _ = _scheduler(max_seq_len=16)
    scheduler.submit(_request(0, [3]))
    with pytest.raises(ValueError, match="already live"):
        scheduler.submit(_request(0, [3]))
    with pytest.raises(ValueError, match="empty"):
        scheduler.submit(_request(1, []))
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        scheduler.submit(_request(1, [3] * 10, new=7))
    with pytest.raises(ValueError, match="top_k"):
        scheduler.submit(_request(1, [3], sampling=SamplingParams(top_k=5)))
    with pytest.raises(RuntimeError, match="live sequences"):
        scheduler.set_sampling(SamplingParams(0.0))
    assert list(scheduler.seqs) == [0] and scheduler.pages.prefixes[()].refs == 1


def _assert_only_cached(scheduler):
    """Nothing live; the pool's pages in use are exactly the prefix cache's, one reference
    each."""
    pool, cache = scheduler.pages.pool, scheduler.pages.cache
    assert not scheduler.seqs and not scheduler.pages.prefixes and not scheduler.waiting
    assert pool.in_use == len(cache) and sorted(np.flatnonzero(pool.refs)) == sorted(cache.pages)
    assert (pool.refs[cache.pages] == 1).all()


SHARED = [3, 4, 5, 6, 7, 8, 9, 2, 3]     # two full pages of 4, then one more position


def test_prefix_cache_prefills_a_shared_start_once_and_changes_no_token():
    # One slot: each request runs after the previous one ended, so only the cache can share.
    prompts = {rid: SHARED + [10 + rid] * (1 + rid % 3) + [20 + rid] for rid in range(4)}
    results, prefilled = {}, {}
    for caching in (False, True):
        scheduler, runner = _scheduler(num_slots=1, prefix_caching=caching)
        for rid, prompt in prompts.items():
            scheduler.submit(_request(rid, prompt, new=6))
        results[caching] = {e.request_id: e.tokens for e in _run(scheduler)}
        prefilled[caching] = sum(map(len, runner.prefilled))
        if caching:
            # The first request prefills its 10 context positions; the others start after
            # the two cached pages (the runner checks, before each decode, that every page
            # holds its sequence's context, and that nothing writes into a shared page).
            assert scheduler.stats.cached_tokens == 3 * 8
            assert runner.prefilled == [prompts[0][:8], prompts[0][8:-1]] + [
                prompts[rid][8:-1] for rid in (1, 2, 3)]
            _assert_only_cached(scheduler)
        else:
            assert scheduler.pages.cache is None and scheduler.stats.cached_tokens == 0
            _assert_empty(scheduler)
    assert prefilled[False] - prefilled[True] == 3 * 8
    assert results[True] == results[False] == {
        rid: _expected(rid, p, 6) for rid, p in prompts.items()}


def test_requests_arriving_together_prefill_their_common_start_once():
    # Both admitted in the same step: the second waits for the first one's prefill, then
    # starts from its cached pages, and both decode in the step's round trip.
    scheduler, runner = _scheduler(num_slots=3, prefix_caching=True)
    prompts = {0: SHARED + [11, 12], 1: SHARED + [13], 2: [9, 9, 9, 9, 9, 9]}
    for rid, prompt in prompts.items():
        scheduler.submit(_request(rid, prompt, new=6))
    scheduler.step()
    assert runner.decode_batches == [[0, 2, 1]]          # slot order: 1 was admitted last
    assert sorted(runner.prefilled) == sorted([prompts[0][:8], prompts[0][8:-1],
                                               prompts[2][:-1], prompts[1][8:-1]])
    assert scheduler.stats.cached_tokens == 8
    events = {e.request_id: e.tokens for e in _run(scheduler)}
    assert events == {rid: _expected(rid, p, 6) for rid, p in prompts.items()}


def test_prefix_cache_serves_shared_prompt_prefixes_and_keeps_their_pages():
    # Three samples of one prompt: the shared `Prefix` itself starts from the cache.
    scheduler, runner = _scheduler(num_slots=1, prefix_caching=True)
    scheduler.submit(_request(0, SHARED + [11, 12], new=4))
    _run(scheduler)
    for rid in range(1, 4):
        scheduler.submit(_request(rid, SHARED + [13, 14, 15, 16], new=4))
    events = {e.request_id: e.tokens for e in _run(scheduler)}
    assert events == {rid: _expected(rid, SHARED + [13, 14, 15, 16], 4) for rid in range(1, 4)}
    assert runner.prefilled.count(SHARED[8:] + [13, 14, 15]) == 1   # after the cached 8
    assert scheduler.stats.cached_tokens == 8
    _assert_only_cached(scheduler)
    # Cached now: the first prompt's 2 pages and the group's third (SHARED[8:] + 13, 14, 15).
    assert len(scheduler.pages.cache) == 3


def test_prefix_cache_keeps_no_decoded_pages_and_nothing_from_old_weights():
    scheduler, _ = _scheduler(num_slots=1, prefix_caching=True, prefill_chunk=4,
                              step_tokens=4)
    long_prompt = SHARED + [15, 16, 17, 18]
    scheduler.submit(_request(0, long_prompt, new=12, pause=_pause_after(3)))
    _run(scheduler)
    # Its 12 context positions were prefilled: 3 pages; the decoded tokens are not cached,
    # nor is the tool output prefilled after them (the context was decoded into).
    assert len(scheduler.pages.cache) == 3
    scheduler.resume(0, [40, 41, 42, 43, 44, 45])
    _run(scheduler)
    assert len(scheduler.pages.cache) == 3
    scheduler.release(0)
    _assert_only_cached(scheduler)
    # New weights: the cache is dropped, and a context whose prefill began before them is not
    # cached when it completes.
    scheduler.pages.clear_cache()
    assert scheduler.pages.pool.in_use == 0
    scheduler.submit(_request(1, long_prompt, new=4))
    scheduler.step()                    # one chunk of 4 of its 12 positions
    assert scheduler.seqs[1].length == 4 and scheduler.stats.cached_tokens == 0
    scheduler.pages.clear_cache()
    events = _run(scheduler)
    assert events[0].tokens == _expected(1, long_prompt, 4)
    assert len(scheduler.pages.cache) == 0
    _assert_empty(scheduler)


def test_prefix_cache_gives_way_when_the_pool_is_short_and_changes_no_token():
    # 14 pages: about one sequence's worth beside the cache; 12 prompts of 3 families.
    prompts = [SHARED[: 5 + f] + [20 + i] * (1 + i % 4) for i in range(12) for f in [i % 3]]
    results = {}
    for pages, caching in ((64, False), (14, True), (64, True)):
        scheduler, _ = _scheduler(pages=pages, num_slots=3, max_seq_len=36,
                                  prefix_caching=caching)
        for rid, prompt in enumerate(prompts):
            scheduler.submit(_request(rid, prompt, new=20))
        results[pages, caching] = {e.request_id: e.tokens for e in _run(scheduler)}
        assert scheduler.stats.pages_peak <= pages
        if caching:
            assert scheduler.stats.cached_tokens > 0
            _assert_only_cached(scheduler)
    assert results[14, True] == results[64, True] == results[64, False] == {
        rid: _expected(rid, p, 20) for rid, p in enumerate(prompts)}


def test_prefix_cache_evicts_least_recently_used_leaves_only():
    from agentic_jax.rollout.engine.prefix_cache import PrefixCache

    pool = PagePool(8)
    cache = PrefixCache(pool, page_size=2)
    a = pool.alloc(3)
    cache.insert([1, 2, 3, 4, 5, 6, 7], a, 7)           # three full pages: a chain
    b = pool.alloc(2)
    cache.insert([1, 2, 9, 9], [a[0], b[1]], 4)          # shares the first page, then branches
    pool.release(a + b)                                  # the writers ended
    assert len(cache) == 4 and pool.num_free == 8 - 4
    assert cache.match([1, 2, 3, 4, 5, 6, 7, 8], 7) == a  # touches the long chain last
    pool.release(a)
    assert cache.evict(5) == 1 and len(cache) == 3       # the older leaf: [1, 2] -> [9, 9]
    assert cache.match([1, 2, 9, 9], 4) == [a[0]]
    pool.release([a[0]])
    assert cache.evict(8) == 3 and len(cache) == 0 and pool.num_free == 8
    # A page that a sequence still reads stays, and so does its parent (not a leaf).
    c = pool.alloc(2)
    cache.insert([5, 5, 6, 6], c, 4)
    assert cache.evict(8) == 0 and len(cache) == 2        # the writer holds both pages
    pool.release(c)
    cache.clear()
    assert pool.num_free == 8 and cache.match([5, 5, 6, 6], 4) == [] and cache.epoch == 1


def test_decode_first_a_long_prompt_is_written_in_what_the_running_rows_leave():
    # step_tokens 8 with 2 slots: a running row takes 1 token of each step, prefill the rest.
    scheduler, runner = _scheduler(num_slots=2, step_tokens=8, decode_steps=1)
    scheduler.submit(_request(0, [3, 4], new=30))
    scheduler.step()                  # nothing running: its context (all but the last token)
    assert runner.prefilled == [[3]]
    long_prompt = list(range(11, 35))                 # 24 tokens
    scheduler.submit(_request(1, long_prompt, new=4))
    decoded_before = len(scheduler.seqs[0].tokens)
    writes = []
    while scheduler.seqs[1].length < scheduler.seqs[1].context_len:
        before = len(runner.prefilled)
        scheduler.step()
        writes.append(sum(len(c) for c in runner.prefilled[before:]))
    # 23 context tokens, 7 a step (8 less the running row's 1), the last chunk what is left;
    # the running row decoded once in every one of those steps.
    assert writes == [7, 7, 7, 2]
    assert len(scheduler.seqs[0].tokens) == decoded_before + len(writes)
    events = {e.request_id: e.tokens for e in _run(scheduler)}
    assert events == {0: _expected(0, [3, 4], 30), 1: _expected(1, long_prompt, 4)}
    _assert_empty(scheduler)


def test_prefill_chunks_hold_at_most_the_budget():
    from agentic_jax.rollout.engine.page_manager import prefill_chunks

    scheduler, _ = _scheduler(num_slots=3, prefill_chunk=8, prefill_rows=3)
    for rid in range(3):
        scheduler.submit(_request(rid, list(range(20 + rid, 40 + rid)), new=2))
    scheduler._admit()
    jobs = prefill_chunks(scheduler.slots, 8, 3, budget=11)
    assert [len(chunk.tokens) for _, chunk in jobs] == [8, 3]
    assert [len(chunk.tokens) for _, chunk in prefill_chunks(scheduler.slots, 8, 3)] == [8] * 3


def test_step_tokens_must_leave_prefill_room():
    with pytest.raises(ValueError, match=r"step_tokens must exceed .* = 40"):
        EngineConfig(num_slots=8, speculative_tokens=4, step_tokens=40)
    EngineConfig(num_slots=8, speculative_tokens=4, step_tokens=41)


def test_mixed_prefill_chunks_ride_with_decode_first_admitted_first():
    # Slot 1 frees and takes a later request while slot 2 still prefills an earlier one: the
    # earlier one's chunks ride first, one context a round trip (prefill_rows=1), 3 tokens.
    scheduler, runner = _scheduler(num_slots=3, mixed_prefill=3, prefill_rows=1)
    long_prompt = list(range(20, 30))
    scheduler.submit(_request(0, [5], new=40))          # decodes from the first step
    scheduler.submit(_request(1, [6, 7], new=1))        # one token, then its slot frees
    scheduler.submit(_request(2, long_prompt, new=2))
    scheduler.step()
    assert runner.mixed == [[[6]]]
    scheduler.step()                                    # request 1 finishes
    assert runner.mixed[-1] == [long_prompt[:3]]
    scheduler.submit(_request(3, [40, 41, 42, 43], new=2))
    scheduler.step()                                    # 3 takes slot 1, 2 prefills first
    assert scheduler.slots[1].request.request_id == 3
    assert runner.mixed[-1] == [long_prompt[3:6]]
    events = _run(scheduler)
    assert [m[0] for m in runner.mixed[3:]] == [long_prompt[6:9], [40, 41, 42]]
    assert scheduler.stats.mixed_calls == len(runner.mixed) and scheduler.stats.prefill_calls == 0
    assert {e.request_id: e.tokens for e in events} == {
        0: _expected(0, [5], 40), 2: _expected(2, long_prompt, 2),
        3: _expected(3, [40, 41, 42, 43], 2)}
    _assert_empty(scheduler)


def test_a_fork_admitted_after_the_budget_is_spent_copies_its_page_before_decoding():
    # With the prefix cache, the step's second admission forks a request from a complete
    # prefix (a copy of its last, partial page) after prefill has spent the budget (9 beside
    # 3 slots): the copy runs before the round trip reads the page (the scripted runner checks
    # each decoding row's K/V).
    scheduler, runner = _scheduler(num_slots=3, prefix_caching=True, prefill_rows=2,
                                   step_tokens=9)
    shared = [44, 43, 16, 17, 32, 25, 10, 18]
    prompts = {0: shared, 1: shared, 2: shared + [46, 19, 46], 3: [24, 35, 18], 4: shared,
               5: shared + [33, 10, 14, 14]}
    budgets = {0: 6, 1: 6, 2: 5, 3: 1, 4: 4, 5: 1}
    for rid, prompt in prompts.items():
        scheduler.submit(_request(rid, prompt, new=budgets[rid]))
    events = _run(scheduler)
    assert runner.copies
    assert {e.request_id: e.tokens for e in events} == {
        rid: _expected(rid, prompts[rid], budgets[rid]) for rid in prompts}
    _assert_only_cached(scheduler)
