"""The tool loop on the real rollout engine: tool outputs are written into the sequence's own
pages at the right positions (the sampled log-probs equal the trainer's over the whole
episode), episodes do not depend on slot count or page size, and no page outlives a rollout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.rl.forward import compute_logprobs
from agentic_jax.rollout import (
    AgentConfig, AgentLoop, RowSpec, SamplingParams, ToolController, build_service)
from agentic_jax.rollout.environment import Call, PythonTool, ToolSet
from agentic_jax.rollout.engine import Engine, EngineConfig
from agentic_jax.sandbox import Sandbox, SandboxConfig

MAX_LENGTH = 72


class EveryTurnCalls(ToolSet):
    """A policy stand-in: a random model never writes code, so every turn that reaches a few
    tokens counts as closing a block that prints a number depending on the turn's first token
    (the sandbox really runs it); the budget message answers the calls past the budget."""

    def first_event(self, turn, decode):
        if len(turn) < 5:
            return None
        return Call(cut=4 + turn[0] % 3, tool=self.tools[0], payload=f"print({turn[0]} * 7)")


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_ms=3000, num_workers=2)) as sb:
        yield sb


def _specs(tok):
    questions = ["What is 3 + 4?\n", "Solve x - 2 = 5.\n", "Compute 12 * 12.\n"]
    # Groups of two samples per prompt, as in training: the pair shares the prompt's pages.
    return [RowSpec(tok.encode(q, add_special_tokens=False), group_id=i)
            for i, q in enumerate(questions) for _ in range(2)]


def _rollout(model, tok, sandbox, **engine_args):
    engine = Engine(model, EngineConfig(max_seq_len=MAX_LENGTH, **engine_args))
    controller = ToolController(max_tool_calls=2, timeout_ms=3000, mode="fixed")
    cfg = AgentConfig(max_length=MAX_LENGTH, max_output_tokens=16,
                      sampling=SamplingParams(temperature=1.0))
    service = build_service(engine, tok, cfg)
    service.toolset = EveryTurnCalls([PythonTool(sandbox)])
    agent = AgentLoop(service, controller, cfg, sandbox)
    result = agent.run(_specs(tok), jax.random.key(3))
    return result, engine


@pytest.fixture(scope="module")
def reference(model, tok, sandbox):
    return _rollout(model, tok, sandbox, num_slots=4, page_size=8, decode_steps=8)


def test_tool_outputs_sit_in_the_pages_the_model_reads(model, tok, reference):
    result, engine = reference
    episodes = result.episodes
    assert all(ep.num_tool_calls == 2 for ep in episodes)
    assert all("```output\n" in ep.text for ep in episodes)
    graphdef, state = nnx.split(model)
    for b, ep in enumerate(episodes):
        seq = ep.prompt_tokens + ep.response_tokens
        assert len(seq) <= MAX_LENGTH
        tokens = jnp.asarray([seq], jnp.int32)
        positions = jnp.arange(len(seq), dtype=jnp.int32)[None]
        logprobs, values, _ = jax.device_get(compute_logprobs(graphdef, state, tokens,
                                                              positions))
        span = slice(len(ep.prompt_tokens), len(seq))
        mask = np.asarray(ep.loss_mask, bool)
        assert 0 < mask.sum() < len(mask), "model and tool tokens both present"
        # Model tokens: the engine's log-probs and values are the full-sequence forward's,
        # whose context includes the tool outputs; tool tokens carry none.
        np.testing.assert_allclose(np.asarray(ep.logprobs)[mask], logprobs[0, span][mask],
                                   atol=1e-4, err_msg=f"episode {b}")
        np.testing.assert_allclose(np.asarray(ep.values)[mask], values[0, span][mask],
                                   atol=1e-4, err_msg=f"episode {b}")
        assert not np.asarray(ep.logprobs)[~mask].any()
    assert engine.pages_held == 0 and not engine.seqs and not engine.prefixes


def test_rollout_reports_engine_statistics(reference):
    timing = reference[0].timing
    assert 0.0 < timing["engine_slot_utilisation"] <= 1.0
    assert timing["engine_prefix_hits"] == 3  # the second sample of each pair
    assert 0 < timing["engine_pages_peak"] <= timing["engine_pages_pool"]
    assert 0 < timing["engine_pages_in_use_mean"] <= timing["engine_pages_peak"]
    assert timing["time_engine_decode_s"] > 0 and 0.0 <= timing["accelerator_idle_frac"] <= 1.0


@pytest.mark.parametrize("engine_args", [
    dict(num_slots=1, page_size=4, decode_steps=3),
    dict(num_slots=6, page_size=16, decode_steps=32),
    # A pool of 12 pages of 8 for six episodes of up to 72 tokens: preemption under tools.
    dict(num_slots=6, page_size=8, decode_steps=8, kv_pages=12),
])
def test_episodes_do_not_depend_on_scheduling(model, tok, sandbox, reference, engine_args):
    result, engine = _rollout(model, tok, sandbox, **engine_args)
    for got, want in zip(result.episodes, reference[0].episodes):
        assert got.response_tokens == want.response_tokens
        assert got.loss_mask == want.loss_mask and got.finish_reason == want.finish_reason
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5)
    if engine_args.get("kv_pages"):
        assert result.timing["engine_preemptions"] > 0
    assert engine.pages_held == 0


@pytest.mark.parametrize("partial", ["continue", "abort"])
def test_new_weights_mid_rollout_follow_the_partial_mode(model, tok, sandbox, reference,
                                                         partial):
    """The same weights published as version 1 after the first engine step: "continue" decodes
    on (earlier tokens keep version 0), "abort" starts every unfinished episode again with its
    key, so it samples what it did before, all of it version 1."""
    engine = Engine(model, EngineConfig(max_seq_len=MAX_LENGTH, num_slots=4, page_size=8,
                                        decode_steps=8))
    cfg = AgentConfig(max_length=MAX_LENGTH, max_output_tokens=16,
                      sampling=SamplingParams(temperature=1.0), partial=partial)
    service = build_service(engine, tok, cfg)
    service.toolset = EveryTurnCalls([PythonTool(sandbox)])
    feed = iter([None, (model, 1)])
    loop = AgentLoop(service, ToolController(max_tool_calls=2, timeout_ms=3000, mode="fixed"),
                     cfg, sandbox)
    result = loop.run(_specs(tok), jax.random.key(3), weights=lambda: next(feed, None))
    versions = {v for ep in result.episodes for v in ep.versions if v >= 0}
    if partial == "abort":
        assert result.timing["aborted_tokens"] > 0 and versions == {1}
        assert ([ep.response_tokens for ep in result.episodes]
                == [ep.response_tokens for ep in reference[0].episodes])
    else:
        assert result.timing["aborted_tokens"] == 0 and versions == {0, 1}
    assert engine.pages_held == 0 and not engine.seqs


def test_an_engine_shorter_than_the_episodes_is_refused(model, tok, sandbox):
    engine = Engine(model, EngineConfig(max_seq_len=MAX_LENGTH - 1))
    with pytest.raises(ValueError, match="max_seq_len"):
        cfg = AgentConfig(max_length=MAX_LENGTH)
        AgentLoop(build_service(engine, tok, cfg, sandbox=sandbox), ToolController(), cfg)


def test_a_failed_rollout_leaves_no_sequence_behind(model, tok, sandbox):
    class Broken(EveryTurnCalls):
        def first_event(self, turn, decode):
            if len(turn) >= 5:
                raise RuntimeError("grader exploded")
            return None

    engine = Engine(model, EngineConfig(max_seq_len=MAX_LENGTH, num_slots=2, page_size=8))
    cfg = AgentConfig(max_length=MAX_LENGTH)
    service = build_service(engine, tok, cfg)
    service.toolset = Broken([PythonTool(sandbox)])
    loop = AgentLoop(service, ToolController(mode="fixed"), cfg, sandbox)
    with pytest.raises(RuntimeError, match="grader exploded"):
        loop.run(_specs(tok), jax.random.key(0))
    assert not engine.seqs and engine.pages_held == 0 and not engine.prefixes
    # The engine is usable again.
    service.toolset = EveryTurnCalls([PythonTool(sandbox)])
    result = loop.run(_specs(tok)[:2], jax.random.key(0))
    assert len(result.episodes) == 2
