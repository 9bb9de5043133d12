"""The tool loop with a scripted policy: code runs in the real sandbox, outputs are fed back as
masked tokens, budgets and stops hold, and what the engine holds matches the episode."""

import jax
import numpy as np
import pytest

from agentic_jax.data import prompts
from agentic_jax.rollout import (
    AgentConfig, AgentLoop, RowSpec, SamplingParams, ToolController, build_service)
from agentic_jax.rollout.engine import EngineConfig, EngineStats, Event
from agentic_jax.sandbox import Sandbox, SandboxConfig


class _Seq:
    def __init__(self, request, script):
        self.request, self.script = request, script
        self.cache = list(request.prompt)  # every token the engine's pages would hold
        self.budget, self.turn_start, self.paused = request.max_new_tokens, len(self.cache), False


class ScriptedEngine:
    """Stands in for `Engine` under its contract: request b emits the tokens of scripts[b] in
    order, up to ``decode_steps`` per step, stopping its step at a stop or pause token; the
    pause hook is read after each step (tokens past its cut are discarded); `resume` appends
    into the sequence's own cache.

    Keeps each request's cache contents so tests can check that cuts and appends leave it equal
    to prompt + response; ``caches`` keeps them after a sequence ends.
    """

    def __init__(self, scripts, max_seq_len=512, decode_steps=8):
        self.scripts = [list(s) for s in scripts]
        self.cfg = EngineConfig(max_seq_len=max_seq_len, decode_steps=decode_steps)
        self.seqs, self.caches, self.step_calls = {}, {}, 0
        self.stats = EngineStats(pool_pages=1, page_bytes=1)

    def set_sampling(self, sampling):
        assert not self.seqs
        self.sampling = sampling

    def reset_stats(self):
        self.stats = EngineStats(pool_pages=1, page_bytes=1)

    def submit(self, request):
        assert request.request_id not in self.seqs
        self.seqs[request.request_id] = _Seq(request, self.scripts[request.request_id])

    @property
    def has_work(self):
        return any(not s.paused for s in self.seqs.values())

    def step(self):
        self.step_calls += 1
        events = []
        for rid, seq in list(self.seqs.items()):
            if seq.paused:
                continue
            req, new = seq.request, []
            while len(new) < self.cfg.decode_steps and seq.budget > 0 and seq.script:
                new.append(seq.script.pop(0))
                seq.budget -= 1
                if new[-1] in req.stop_tokens + req.pause_tokens:
                    break
            seq.cache.extend(new)
            turn = seq.cache[seq.turn_start:]
            cut = req.pause(turn) if req.pause else None
            if cut is not None:
                drop = len(turn) - cut
                if drop:
                    del seq.cache[-drop:]
                seq.budget += drop
                seq.paused = True
                events.append(self._event(rid, seq, "paused", "pause"))
            elif new and new[-1] in req.stop_tokens:
                events.append(self._end(rid, seq, "stop"))
            elif seq.budget <= 0 or not seq.script:
                events.append(self._end(rid, seq, "length"))
        return events

    def resume(self, rid, tokens):
        seq = self.seqs[rid]
        assert seq.paused and len(tokens) < seq.budget
        seq.cache.extend(tokens)
        seq.budget -= len(tokens)
        seq.turn_start, seq.paused = len(seq.cache), False

    def release(self, rid):
        assert self.seqs[rid].paused
        self.caches[rid] = self.seqs.pop(rid).cache

    def abort(self, rid):
        if rid in self.seqs:
            self.caches[rid] = self.seqs.pop(rid).cache

    def _event(self, rid, seq, kind, reason):
        turn = seq.cache[seq.turn_start:]
        return Event(rid, kind, reason, turn, np.full(len(turn), -0.5, np.float32),
                     np.zeros(len(turn), np.float32))

    def _end(self, rid, seq, reason):
        event = self._event(rid, seq, "finished", reason)
        self.caches[rid] = self.seqs.pop(rid).cache
        return event


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_ms=2000, num_workers=2)) as sb:
        yield sb


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def run(tok, sandbox, scripts, prompts_text, *, budget=4, max_length=256, chunk=8,
        mode="fixed"):
    engine = ScriptedEngine([enc(tok, s) for s in scripts], decode_steps=chunk)
    controller = ToolController(max_tool_calls=budget, timeout_ms=2000, mode=mode)
    cfg = AgentConfig(max_length=max_length, max_output_tokens=32,
                      sampling=SamplingParams(temperature=1.0))
    agent = AgentLoop(build_service(engine, tok, cfg, sandbox=sandbox), controller, cfg, sandbox)
    prompt_tokens = [enc(tok, p) for p in prompts_text]
    episodes, timing = agent.run([RowSpec(p) for p in prompt_tokens], jax.random.key(0))
    assert not engine.seqs, "every sequence left the engine"
    return episodes, timing, engine


def test_code_is_run_and_output_fed_back_masked(tok, sandbox):
    script = ("Let me compute.\n" + prompts.code_block("print(3847 * 2913)")
              + "The answer is \\boxed{11206311}.")
    eps, timing, engine = run(tok, sandbox, [script], ["Compute 3847 * 2913.\n"])
    ep = eps[0]
    assert ep.num_tool_calls == 1 and ep.num_tool_failures == 0
    assert "```output\n11206311\n```" in ep.text
    assert ep.finish_reason == "answer"
    # Nothing past the token that closes the answer ("}." may be one token).
    assert ep.text.rstrip(".").endswith("\\boxed{11206311}")
    # Token-in/token-out: the text is the decode of the tokens; the mask marks the model's
    # tokens exactly (the output block is the only unmasked span).
    assert ep.text == tok.decode(ep.response_tokens, skip_special_tokens=True)
    masked = [t for t, m in zip(ep.response_tokens, ep.loss_mask) if m == 0]
    assert tok.decode(masked) == prompts.format_tool_output("11206311\n")
    model = [t for t, m in zip(ep.response_tokens, ep.loss_mask) if m == 1]
    assert model == enc(tok, script)[:len(model)]
    assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.loss_mask) if m == 0)
    assert all(lp == -0.5 for lp, m in zip(ep.logprobs, ep.loss_mask) if m == 1)
    # The cache holds exactly prompt + response.
    assert engine.caches[0] == ep.prompt_tokens + ep.response_tokens
    assert 0.0 <= timing["accelerator_idle_frac"] <= 1.0


def test_errors_are_one_line_with_hint_and_counted(tok, sandbox):
    script = (prompts.code_block("import os\nprint(os.getcwd())") + "\n"
              + prompts.code_block("print(1/0)") + "The answer is \\boxed{1}.")
    eps, _, _ = run(tok, sandbox, [script], ["Q\n"])
    ep = eps[0]
    assert ep.num_tool_calls == 2 and ep.num_tool_failures == 2
    assert ep.tool_errors == ["ImportError", "ZeroDivisionError"]
    assert "ImportError:" in ep.text and "ZeroDivisionError:" in ep.text
    assert "environment.whitelist" in ep.text  # the taxonomy hint


def test_tool_budget_stops_execution(tok, sandbox):
    block = prompts.code_block("print(7)")
    script = block + block + block + "The answer is \\boxed{7}."
    eps, _, _ = run(tok, sandbox, [script], ["Q\n"], budget=2)
    ep = eps[0]
    assert ep.num_tool_calls == 2
    assert ep.text.count("```output\n7\n```") == 2
    assert "Tool budget exhausted" in ep.text
    assert ep.finish_reason == "answer"


def test_forbidden_mode_runs_nothing(tok, sandbox):
    script = prompts.code_block("print(7)") + "The answer is \\boxed{7}."
    eps, _, _ = run(tok, sandbox, [script], ["Q\n"], mode="forbidden")
    assert eps[0].num_tool_calls == 0
    assert "```output\n7" not in eps[0].text
    assert "Tools are disabled" in eps[0].text


def test_tokens_after_the_answer_are_cut_and_cache_rolled_back(tok, sandbox):
    script = "The answer is \\boxed{5}. And then some more words that must be dropped."
    eps, _, engine = run(tok, sandbox, [script], ["Q\n"], chunk=64)
    ep = eps[0]
    assert ep.text.rstrip(".") == "The answer is \\boxed{5}"
    assert ep.finish_reason == "answer"
    assert engine.caches[0] == ep.prompt_tokens + ep.response_tokens


def test_eos_length_and_void_turns(tok, sandbox):
    eos = tok.eos_token
    scripts = ["I do not know." + eos, "word " * 200]
    eps, _, _ = run(tok, sandbox, scripts, ["Q\n", "Q\n"], max_length=40)
    assert eps[0].finish_reason == "eos" and eps[0].void_turn
    assert eps[1].finish_reason == "length" and eps[1].void_turn and eps[1].truncated
    assert len(eps[1].prompt_tokens) + len(eps[1].response_tokens) == 40


def test_rows_keep_decoding_while_a_tool_runs(tok, sandbox):
    slow = prompts.code_block("import math\ns = 0\nfor i in range(300000):\n    s += i\nprint(s)")
    scripts = [slow + "The answer is \\boxed{1}.", "a " * 60 + "The answer is \\boxed{2}."]
    eps, _, engine = run(tok, sandbox, scripts, ["Q\n", "Q\n"], chunk=4)
    assert eps[0].num_tool_calls == 1 and eps[0].num_tool_failures == 0
    assert eps[1].finish_reason == "answer"
    # Row 1 needed many chunks; they ran while row 0's snippet was in the sandbox.
    assert engine.step_calls > 10


def test_unclosed_and_reopened_blocks(tok, sandbox):
    reopened = "```python\nprint(1)\n```python\nprint(2)\n```\nThe answer is \\boxed{2}."
    unclosed = "```python\nprint(3)\n" + "x " * 100
    eps, _, _ = run(tok, sandbox, [reopened, unclosed], ["Q\n", "Q\n"], max_length=80)
    assert "```output\n2\n```" in eps[0].text and eps[0].num_tool_calls == 1
    assert eps[1].num_tool_calls == 0 and eps[1].finish_reason == "length"


def test_controller_update_counts_budgets_and_observes_in_order():
    controller = ToolController(max_tool_calls=3)
    episodes = [("arithmetic", 0.1, 2, 1), ("algebra", 0.9, 1, 1), ("arithmetic", 0.5, 3, 0)]
    budgets = [controller.decide(difficulty=d, stage=s).tool_budget for s, d, _, _ in episodes]
    assert controller.state_dict()["decisions"] == {}  # deciding changes nothing
    controller.update(budgets, [(s, c, f) for s, _, c, f in episodes])
    state = controller.state_dict()
    assert sum(state["decisions"].values()) == 3 and state["episodes_seen"] == 3
    assert controller.success_rate["algebra"] == 0.0
    # The EMA in batch order: 0.5 first, then 0.9 * 0.5 + 0.1 * 1.0.
    assert controller.success_rate["arithmetic"] == pytest.approx(0.55)
    # A failing stage gets one more call in the next decision.
    assert controller.decide(difficulty=0.9, stage="algebra").tool_budget == 4


@pytest.mark.parametrize("stateful", [False, True])
def test_stateful_episodes_share_a_namespace(tok, sandbox, stateful):
    script = (prompts.code_block("x = 41\nprint('set')") + prompts.code_block("print(x + 1)")
              + "The answer is \\boxed{42}.")
    engine = ScriptedEngine([enc(tok, script), enc(tok, script)])
    controller = ToolController(max_tool_calls=4, timeout_ms=2000, mode="fixed")
    cfg = AgentConfig(max_length=256, max_output_tokens=32, stateful=stateful)
    agent = AgentLoop(build_service(engine, tok, cfg, sandbox=sandbox), controller, cfg, sandbox)
    eps, _ = agent.run([RowSpec(enc(tok, "Q\n")), RowSpec(enc(tok, "Q\n"))], jax.random.key(0))
    for ep in eps:  # each episode has its own namespace: row 1 never sees row 0's x
        assert ep.num_tool_calls == 2
        if stateful:
            assert "```output\n42\n```" in ep.text and ep.num_tool_failures == 0
        else:
            assert "NameError" in ep.text and ep.num_tool_failures == 1


def test_updates_follow_the_episode_as_it_grows(tok, sandbox):
    script = prompts.code_block("print(6 * 7)") + "The answer is \\boxed{42}."
    engine = ScriptedEngine([enc(tok, script), enc(tok, "no idea" + tok.eos_token)])
    cfg = AgentConfig(max_length=256)
    agent = AgentLoop(build_service(engine, tok, cfg, sandbox=sandbox),
                      ToolController(timeout_ms=2000, mode="fixed"), cfg, sandbox)
    seen = []
    eps, _ = agent.run([RowSpec(enc(tok, "Q\n"))] * 2, jax.random.key(0),
                       on_update=lambda b, ep, kind: seen.append(
                           (b, kind, len(ep.response_tokens), ep.finish_reason)))
    row0 = [s for s in seen if s[0] == 0]
    # The final turn's tokens arrive with "done".
    assert [k for _, k, _, _ in row0] == ["model", "tool", "done"]
    assert [n for _, _, n, _ in row0] == sorted(n for _, _, n, _ in row0)  # only grows
    assert row0[-1][2:] == (len(eps[0].response_tokens), "answer")
    assert [(k, r) for b, k, _, r in seen if b == 1] == [("done", "eos")]
