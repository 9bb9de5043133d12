"""Rent-or-buy over the compiled decode programs (`program_reuse`): the rule on its own, and an
engine that runs its round trips on larger programs sampling what one compiling every shape
samples, bit for bit."""

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine import paged_model as pm
from agentic_jax.rollout.engine import runner
from agentic_jax.rollout.engine.program_reuse import ATTENTION_WEIGHT, ProgramReuse, step_cost

KEY = ("stops", 32)


def _reuse() -> ProgramReuse:
    # A row costs what 10 pairs do.
    return ProgramReuse(row_flops=10 * ATTENTION_WEIGHT, pair_flops=1.0)


def test_step_cost_weights_pairs():
    assert step_cost(3, 5, row_flops=7.0, pair_flops=2.0) == 3 * 7.0 + 5 * 2.0 * ATTENTION_WEIGHT


def test_nothing_compiled_compiles_the_exact_shape():
    reuse = _reuse()
    assert reuse.choose(KEY, 8, 64) == (8, 64)
    reuse.ran(KEY, (32, 512), (32, 512), steps=32, seconds=5.0, compile_s=4.0)
    # Nothing covers more rows or pairs than the compiled program.
    assert reuse.choose(KEY, 32, 768) == (32, 768)
    assert reuse.choose(("other", 1), 8, 64) == (8, 64)      # another program's key


def test_rents_the_cheapest_cover_until_the_rent_pays_a_compilation():
    reuse = _reuse()
    reuse.ran(KEY, (32, 512), (32, 512), steps=32, seconds=5.0, compile_s=4.0)
    reuse.ran(KEY, (32, 384), (32, 384), steps=32, seconds=5.0, compile_s=4.0)
    reuse.ran(KEY, (24, 1024), (24, 1024), steps=32, seconds=5.0, compile_s=4.0)
    assert reuse.compile_estimate() == pytest.approx(4.0)
    # (24, 256) is covered by all three: (32, 384) is the cheapest (320 + 384 against 240 +
    # 1024 and 320 + 512, in pair units).
    assert reuse.choose(KEY, 24, 256) == (32, 384)
    # A round trip of 32 steps at 0.1 s a step: the padding's share of (32, 384) for (24, 256)
    # is 1 - (240 + 256) / (320 + 384) = 0.295..., 0.946 s of rent a round trip.
    share = 1 - (240 + 256) / (320 + 384)
    for trip in range(4):
        assert reuse.choose(KEY, 24, 256) == (32, 384)
        reuse.ran(KEY, (24, 256), (32, 384), steps=32, seconds=3.2)
    assert 4 * 3.2 * share < 4.0 < 5 * 3.2 * share
    reuse.ran(KEY, (24, 256), (32, 384), steps=32, seconds=3.2)
    # The rent reached a compilation's cost: buy.
    assert reuse.choose(KEY, 24, 256) == (24, 256)
    reuse.ran(KEY, (24, 256), (24, 256), steps=32, seconds=6.0, compile_s=4.4)
    assert reuse.choose(KEY, 24, 256) == (24, 256)
    assert reuse.compile_estimate() == pytest.approx(4.1)


def test_a_compiling_call_rents_no_seconds_for_its_compilation():
    reuse = _reuse()
    reuse.ran(KEY, (32, 384), (32, 384), steps=32, seconds=5.0, compile_s=4.0)
    # The used program compiled inside this call (another engine's shape of the same key was
    # not known here): only the 1 s of steps counts, at the padding's share.
    reuse.ran(KEY, (24, 256), (32, 384), steps=10, seconds=5.0, compile_s=4.0)
    share = 1 - (240 + 256) / (320 + 384)
    assert reuse._rented[(KEY, 24, 256)] == pytest.approx(1.0 * share)


def test_warmed_up_programs_are_covers_and_forget_drops_them():
    reuse = _reuse()
    reuse.ran(KEY, (8, 64), (8, 64), steps=4, seconds=2.0, compile_s=1.5)
    reuse.add_compiled(KEY, (32, 512))
    assert reuse.choose(KEY, 16, 128) == (32, 512)
    reuse.forget()
    assert reuse.choose(KEY, 16, 128) == (16, 128)
    assert reuse.compile_estimate() == pytest.approx(1.5)


CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)
# SmolLM2-135M's widths (two layers): XLA:CPU may multiply matrices of these sizes another way.
WIDE = ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=2,
                   num_heads=9, num_kv_heads=3, head_dim=64, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(5))


@pytest.fixture(scope="module")
def wide_model():
    return Transformer(WIDE, rngs=nnx.Rngs(6))


def _clear_programs():
    for program in (pm.decode_jit, pm.prefill_jit, pm.copy_pages_jit):
        program.clear_cache()


def _sample(model, cfg: EngineConfig, waves=(16, 5, 11, 3), mixed=False):
    """Waves of requests of ragged lengths (the tail of each leaves fewer rows running):
    {id: (tokens, logprobs, values, top log-probs)} and the engine. ``mixed``: requests of
    their own sampling (top-p, top log-probs) and some with six stop ids."""
    engine = Engine(model, cfg)
    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.key(1), 64)
    kinds = [None, SamplingParams(temperature=0.7, top_p=0.9),
             SamplingParams(temperature=1.0, top_logprobs=2)]
    out = {}
    for wave, count in enumerate(waves):
        for i in range(count):
            prompt = rng.integers(3, 64, int(rng.integers(2, 30))).tolist()
            extra = {}
            if mixed:
                extra = dict(sampling=kinds[i % 3],
                             stop_tokens=(1, 2, 70, 71, 72, 73) if i % 4 == 1 else (1,))
            engine.submit(Request((wave, i), tuple(prompt), int(rng.integers(2, 40)),
                                  keys[wave * 16 + i], **{"stop_tokens": (1,), **extra}))
        for event in engine.run():
            out[event.request_id] = (event.tokens, event.logprobs, event.values,
                                     event.top_logprobs)
    return out, engine


def _same_bits(model, base: dict, mixed=False):
    """The reusing engine against one compiling every shape, each from no program compiled:
    (the reusing engine's stats, the exact one's)."""
    _clear_programs()
    reused, engine = _sample(model, EngineConfig(**base, reuse_programs=True), mixed=mixed)
    _clear_programs()
    exact, exact_engine = _sample(model, EngineConfig(**base, reuse_programs=False),
                                  mixed=mixed)
    assert exact_engine.stats.rented_calls == 0 and exact_engine.runner.reuse is None
    assert exact.keys() == reused.keys() and len(exact) == 35
    for rid, (tokens, logprobs, values, tops) in exact.items():
        assert reused[rid][0] == tokens, rid
        np.testing.assert_array_equal(reused[rid][1], logprobs)
        np.testing.assert_array_equal(reused[rid][2], values)
        assert reused[rid][3] == tops
    return engine, exact_engine.stats


@pytest.mark.parametrize("layer_arrays, dtype, spec, sampling", [
    (False, "auto", 0, SamplingParams(temperature=1.0)),
    (True, "auto", 0, SamplingParams(temperature=1.0)),
    (False, "bfloat16", 0, SamplingParams(temperature=1.0)),
    (False, "auto", 0, SamplingParams(temperature=0.8, top_p=0.9, top_logprobs=3))],
    ids=["scan", "layer-arrays", "bfloat16", "top-p-top-logprobs"])
def test_larger_programs_sample_the_same_bits(model, layer_arrays, dtype, spec, sampling):
    base = dict(num_slots=16, page_size=4, max_seq_len=80, decode_steps=4, prefill_chunk=16,
                layer_arrays=layer_arrays, dtype=dtype, speculative_tokens=spec,
                sampling=sampling)
    engine, exact_stats = _same_bits(model, base)
    stats = engine.stats
    # Compiling a tiny model's program takes far longer than the steps its padding costs: the
    # tail shapes run on the first programs compiled, and no rented program compiled again
    # (its key is the program's).
    assert stats.rented_calls > 5
    assert stats.row_steps > exact_stats.row_steps
    assert stats.compiles < exact_stats.compiles
    assert engine.runner.reuse.rented_compiles == 0


def test_speculative_steps_run_their_own_shapes(model):
    # Their padded rows moved a log-prob by an ulp: they never rent.
    cfg = EngineConfig(num_slots=16, page_size=4, max_seq_len=80, decode_steps=4,
                       prefill_chunk=16, speculative_tokens=2, reuse_programs=True,
                       sampling=SamplingParams(temperature=1.0))
    _clear_programs()
    _, engine = _sample(model, cfg, waves=(16,))
    assert engine.stats.decode_calls > 3 and engine.stats.rented_calls == 0


@pytest.mark.parametrize("layer_arrays", [False, True], ids=["scan", "layer-arrays"])
def test_larger_programs_sample_the_same_bits_at_smollm2_widths(wide_model, layer_arrays):
    base = dict(num_slots=16, page_size=4, max_seq_len=80, decode_steps=4, prefill_chunk=16,
                layer_arrays=layer_arrays, sampling=SamplingParams(temperature=1.0))
    engine, _ = _same_bits(wide_model, base)
    assert engine.stats.rented_calls > 5 and engine.runner.reuse.rented_compiles == 0


def test_requests_of_their_own_sampling_and_stops_rent_only_their_programs(model):
    """Rows of their own top-p, top log-probs and six stop ids in one batch: each round trip's
    key names its program, so a rented cover is never another program (none compiles)."""
    base = dict(num_slots=16, page_size=4, max_seq_len=80, decode_steps=4, prefill_chunk=16,
                sampling=SamplingParams(temperature=1.0))
    engine, _ = _same_bits(model, base, mixed=True)
    assert engine.stats.rented_calls > 5 and engine.runner.reuse.rented_compiles == 0


def test_programs_dropped_by_the_map_watch_are_forgotten(model, monkeypatch):
    cfg = EngineConfig(num_slots=16, page_size=4, max_seq_len=80, decode_steps=4,
                       prefill_chunk=16, sampling=SamplingParams(temperature=1.0),
                       reuse_programs=True)
    _clear_programs()
    engine = Engine(model, cfg)
    rng = np.random.default_rng(3)

    def wave(n, first):
        for i in range(n):
            engine.submit(Request(first + i, tuple(rng.integers(3, 64, 9).tolist()),
                                  int(rng.integers(2, 30)), jax.random.key(first + i)))
        engine.run()

    wave(16, 0)     # its tail (8 rows and fewer) ran on the 16-row programs
    rented = engine.stats.rented_calls
    assert rented > 0 and engine.runner.reuse.rented_compiles == 0
    (shapes,) = engine.runner.reuse._compiled.values()
    assert {rows for rows, _ in shapes} == {16}     # no 8-row program was compiled
    # The watch dropped every engine program: none is compiled any more, so none is a cover:
    # a lone request compiles its own 8-row program, not a 16-row one it would rent.
    pm.decode_jit.clear_cache()
    monkeypatch.setattr(runner.MAP_WATCH, "drops", runner.MAP_WATCH.drops + 1)
    wave(1, 100)
    assert engine.runner.reuse.rented_compiles == 0
    assert engine.stats.rented_calls == rented


def test_auto_reuses_on_cpu_only(model, monkeypatch):
    assert Engine(model, EngineConfig(num_slots=2, max_seq_len=32)).runner.reuse is not None
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    engine = Engine(model, EngineConfig(num_slots=2, max_seq_len=32, attention_impl="xla"))
    assert engine.runner.reuse is None
    engine = Engine(model, EngineConfig(num_slots=2, max_seq_len=32, attention_impl="xla",
                                        reuse_programs=True))
    assert engine.runner.reuse is not None


def test_reuse_programs_is_checked():
    with pytest.raises(ValueError, match="reuse_programs must be True, False or 'auto'"):
        EngineConfig(reuse_programs="yes")
