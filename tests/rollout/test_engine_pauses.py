"""The rollout engine under tool-call pauses with a tight page pool: whatever the order in which
paused sequences come back, every sequence finishes (no livelock between preemption and
re-admission) with the tokens it has with room to spare."""

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                  num_heads=2, num_kv_heads=1, head_dim=16)
MAX_LEN = 64
MAX_STEPS = 3000


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(5))


def _tool_output(rid: int, call: int) -> list[int]:
    return [10 + (rid * 7 + call * 3 + j) % 50 for j in range(2 + (rid + call) % 5)]


def _drive(model, cfg: EngineConfig, seed: int) -> dict[int, list[int]]:
    """Six requests (three prompts sampled twice); each pauses after a few tokens of a turn, at
    most twice, and is resumed with a tool output after a random number of engine steps."""
    rng = np.random.default_rng(seed)
    engine = Engine(model, cfg)
    prompts = [rng.integers(2, 64, int(rng.integers(4, 14))).tolist() for _ in range(3)]
    keys = jax.random.split(jax.random.key(seed), 6)
    calls, full = {}, {}
    for rid in range(6):
        prompt = prompts[rid // 2]
        calls[rid], full[rid] = 0, list(prompt)
        at = 3 + rid % 4

        def pause(turn, rid=rid, at=at):
            return at if calls[rid] < 2 and len(turn) >= at else None

        engine.submit(Request(rid, tuple(prompt), MAX_LEN - len(prompt), keys[rid],
                              stop_tokens=(0,), pause=pause))
    due: dict[int, int] = {}
    for step in range(MAX_STEPS):
        for rid in [r for r, t in due.items() if t <= step]:
            out = _tool_output(rid, calls[rid])
            calls[rid] += 1
            del due[rid]
            full[rid] += out
            engine.resume(rid, out)
        if not engine.has_work and not due:
            break
        for event in engine.step():
            full[event.request_id] += event.tokens
            if event.kind == "paused":
                due[event.request_id] = step + int(rng.integers(0, 6))
    else:
        pytest.fail(f"seed {seed}: not finished after {MAX_STEPS} engine steps "
                    f"({len(engine.seqs)} live, {engine.stats.preemptions} preemptions)")
    assert not engine.seqs and engine.pages_held == 0 and not engine.prefixes
    return full


@pytest.mark.parametrize("seed", range(12))
def test_tight_pool_with_pauses_finishes_with_the_same_tokens(model, seed):
    roomy = EngineConfig(num_slots=6, page_size=4, max_seq_len=MAX_LEN, decode_steps=4,
                         sampling=SamplingParams(1.0))
    # 20 pages of 4: one full sequence (17 pages with lookahead) and a little more.
    tight = EngineConfig(num_slots=6, page_size=4, max_seq_len=MAX_LEN, decode_steps=4,
                         kv_pages=20, sampling=SamplingParams(1.0))
    assert _drive(model, tight, seed) == _drive(model, roomy, seed)
