"""Engine.warmup compiles what requests will run: afterwards none waits on a compilation."""

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine import paged_model as pm
from agentic_jax.rollout.engine import runner

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(3))


def _compiled():
    return pm.decode_jit._cache_size(), pm.prefill_jit._cache_size()


@pytest.mark.parametrize("prefix_caching, step_tokens, top_p, mixed",
                         [(True, 2048, 1.0, 0), (False, 2048, 1.0, 0), (True, 19, 1.0, 0),
                          (True, 2048, 0.9, 0), (True, 19, 1.0, 16)],
                         ids=["prefix-cache", "no-cache", "chunks-cut-mid-page", "top-p",
                              "mixed-prefill"])
def test_after_warmup_requests_of_any_length_and_batch_compile_nothing(model, prefix_caching,
                                                                       step_tokens, top_p,
                                                                       mixed, monkeypatch):
    # step_tokens 19 beside 12 slots: prefill chunks cut to what decode leaves start mid-page.
    # top_p < 1: the default sampling's programs filter the logits (warm-up compiles those).
    # mixed: chunks ride with decode round trips (each decode program's mixed twin).
    cfg = EngineConfig(num_slots=12, page_size=8, max_seq_len=64, decode_steps=4,
                       prefill_chunk=24, prefill_rows=2, prefix_caching=prefix_caching,
                       step_tokens=step_tokens, mixed_prefill=mixed,
                       sampling=SamplingParams(temperature=1.0, top_p=top_p))
    monkeypatch.setattr(runner, "memory_maps", lambda: None)   # no drop between the counts
    engine = Engine(model, cfg)
    programs, seconds = engine.warmup()
    # A decode program a row count (and a page-pair width on the XLA path), prefill's shapes.
    assert programs > len(engine.runner.row_buckets) and seconds > 0
    before = _compiled()
    rng = np.random.default_rng(0)
    shared = rng.integers(3, 64, 17).tolist()   # two full pages a later prompt finds cached
    keys = jax.random.split(jax.random.key(0), 40)
    for wave, count in enumerate((1, 12, 5, 9)):  # batches of different sizes, one after another
        for i in range(count):
            length = int(rng.integers(1, 40))
            prompt = (shared + rng.integers(3, 64, length).tolist())[:50] if i % 2 else \
                rng.integers(3, 64, length).tolist()
            stops = tuple(range(int(rng.integers(1, 4))))  # 1 to 3 stop ids
            engine.submit(Request((wave, i), tuple(prompt), int(rng.integers(1, 14)),
                                  keys[wave * 12 + i], stop_tokens=stops))
        events = engine.run()
        assert len(events) == count
    assert _compiled() == before
    assert (engine.stats.mixed_calls > 0) == bool(mixed)


def test_warmup_refuses_an_engine_with_requests(model):
    engine = Engine(model, EngineConfig(num_slots=2, page_size=8, max_seq_len=32))
    engine.submit(Request(0, (3, 4), 4, jax.random.key(0)))
    with pytest.raises(RuntimeError, match="warm up before"):
        engine.warmup()


def test_warmup_stops_short_of_the_memory_map_limit(model, monkeypatch, caplog):
    """Each compiled program holds memory mappings (about 300 for XLA:CPU's engine programs);
    past vm.max_map_count LLVM cannot map the next and the process dies, so the warm-up stops
    while a quarter of the limit is left and says so."""
    calls = []

    def maps():   # 1,500 more mappings after each program, limit 10,000
        calls.append(1)   # the first call is the warm-up's start, the second before program 1
        return 1000 + 1500 * max(0, len(calls) - 2), 10_000

    monkeypatch.setattr(runner, "memory_maps", maps)
    # The XLA path: seven programs (a decode program a page-pair width too), more than four.
    engine = Engine(model, EngineConfig(num_slots=12, page_size=8, max_seq_len=64,
                                        decode_steps=4, prefill_chunk=24, prefill_rows=2,
                                        attention_impl="xla"))
    with caplog.at_level("WARNING"):
        programs, _ = engine.warmup()
    # 1,000 + 1,500 k + 1,500 <= 7,500 while k <= 3: four programs, then it stops.
    assert programs == 4
    assert "warm-up stopped after 4 programs" in caplog.text
    assert "vm.max_map_count=10000" in caplog.text
    monkeypatch.setattr(runner, "memory_maps", lambda: None)   # not Linux: no limit known
    assert engine.warmup()[0] > 5


def _sample(engine, count=3):
    keys = jax.random.split(jax.random.key(1), count)
    for i in range(count):
        engine.submit(Request(i, tuple(range(3, 3 + 9 * i + 2)), 5 + i, keys[i]))
    return {e.request_id: (e.tokens, e.logprobs) for e in engine.run()}


def test_programs_are_dropped_near_the_memory_map_limit_and_serving_goes_on(model, monkeypatch,
                                                                             caplog):
    """Past the warm-up, a program compiled on demand adds its mappings too: near the limit the
    engine's compiled programs are dropped (and compile again when next needed) instead of the
    process dying at LLVM's next mapping; what it samples does not change."""
    cfg = EngineConfig(num_slots=4, page_size=8, max_seq_len=64, decode_steps=4,
                       prefill_chunk=16, prefill_rows=2, sampling=SamplingParams(temperature=1.0))
    monkeypatch.setattr(runner, "memory_maps", lambda: None)
    baseline = _sample(Engine(model, cfg))
    for program in (pm.decode_jit, pm.prefill_jit, pm.copy_pages_jit):
        program.clear_cache()   # the engine below compiles its programs again
    watch = runner._MapWatch()
    monkeypatch.setattr(runner, "MAP_WATCH", watch)
    # 1,500 mappings a compiled program over 6,000 of the rest, limit 10,000: the second
    # program takes the process past 85%, and a drop brings it back to 60%.
    monkeypatch.setattr(runner, "memory_maps",
                        lambda: (6000 + 1500 * runner._compiled_programs(), 10_000))
    engine = Engine(model, cfg)
    with caplog.at_level("WARNING"):
        near = _sample(engine)
    assert watch.drops >= 1 and watch.armed
    assert "dropped the compiled engine programs" in caplog.text
    assert "vm.max_map_count=10000" in caplog.text and "did not bring" not in caplog.text
    assert near.keys() == baseline.keys()
    for rid, (tokens, logprobs) in baseline.items():
        assert near[rid][0] == tokens
        np.testing.assert_allclose(near[rid][1], logprobs, rtol=1e-5, atol=1e-6)


def test_a_drop_that_does_not_help_is_not_repeated(monkeypatch, caplog):
    """Mappings that are not the engine's stay after a drop: dropping again would recompile
    every call, so the watch stops until the process is below 75% of the limit again."""
    compiled = iter(range(1000))
    maps = {"now": (9000, 10_000)}
    monkeypatch.setattr(runner, "_compiled_programs", lambda: next(compiled))  # always growing
    monkeypatch.setattr(runner, "memory_maps", lambda: maps["now"])
    watch = runner._MapWatch()
    with caplog.at_level("WARNING"):
        for _ in range(5):
            watch.after_call(None)
    assert watch.drops == 1 and not watch.armed
    assert caplog.text.count("dropped the compiled engine programs") == 1
    assert "did not bring the process below 75%" in caplog.text
    maps["now"] = (8000, 10_000)      # still above 75%: waits
    watch.after_call(None)
    assert not watch.armed
    maps["now"] = (7000, 10_000)      # below: armed again, nothing to drop
    watch.after_call(None)
    assert watch.armed and watch.drops == 1
    maps["now"] = (9000, 10_000)
    watch.after_call(None)
    assert watch.drops == 2


def test_without_a_program_count_the_mappings_are_read_on_a_clock(monkeypatch):
    reads = []
    monkeypatch.setattr(runner, "_compiled_programs", lambda: None)
    monkeypatch.setattr(runner, "memory_maps", lambda: reads.append(1) or (9000, 10_000))
    watch = runner._MapWatch()
    watch.after_call(None)                 # within EVERY_S of the start: not read
    assert not reads and watch.drops == 0
    watch.checked -= watch.EVERY_S
    watch.after_call(None)
    assert watch.drops == 1


def test_short_prefill_chunks_share_one_program_a_width(model):
    """GRPO's samples of a prompt each prefill the prompt's last page after the first sample's
    cached pages: chunks of a few tokens, in calls of 1-4 rows, ending anywhere in the
    context. Each short width takes one program whatever the rows and the table; a long
    chunk keeps its own rows and a table up to its end."""
    engine = Engine(model, EngineConfig(num_slots=8, page_size=8, max_seq_len=1024,
                                        prefill_rows=4, prefill_chunk=256))
    shape, max_pages = engine.runner.prefill_shape, engine.runner.max_pages
    assert max_pages > runner.SHORT_TABLE_POSITIONS // 8
    short = {shape(rows, k, pages) for rows in range(1, 5) for k in range(1, 17)
             for pages in range(1, runner.SHORT_TABLE_POSITIONS // 8 + 1)}
    assert short == {(4, 16, runner.SHORT_TABLE_POSITIONS // 8)}
    assert {shape(rows, k, 30) for rows in range(1, 5) for k in range(25, 33)} == {(4, 32, 64)}
    # past the short table: power-of-two tables, as for long chunks
    assert shape(1, 5, 70) == (4, 16, 128)
    assert shape(1, 100, 13) == (1, 128, 16)
    assert shape(3, 33, 5) == (4, 48, 8)
    assert shape(2, 200, 100) == (2, 256, 128)


def test_the_stats_count_the_calls_that_compiled(model, monkeypatch):
    """`EngineStats.compiles` / `compile_s` (the training metrics' time_engine_compiles and
    time_engine_compile_s): a program compiled on demand is counted once, in the call that
    compiled it; the same shapes again compile nothing."""
    monkeypatch.setattr(runner, "memory_maps", lambda: None)   # no drop between the counts
    for program in (pm.decode_jit, pm.prefill_jit, pm.copy_pages_jit):
        program.clear_cache()
    engine = Engine(model, EngineConfig(num_slots=4, page_size=8, max_seq_len=64,
                                        decode_steps=4, prefill_chunk=16, prefill_rows=2,
                                        sampling=SamplingParams(temperature=1.0)))
    _sample(engine)
    stats = engine.reset_stats()
    assert stats.compiles == runner._compiled_programs() >= 2
    assert 0 < stats.compile_s <= stats.prefill_s + stats.decode_s
    metrics = stats.as_metrics()
    assert metrics["time_engine_compiles"] == stats.compiles
    assert metrics["time_engine_compile_s"] == stats.compile_s
    _sample(engine)
    assert engine.stats.compiles == 0 and engine.stats.compile_s == 0.0
