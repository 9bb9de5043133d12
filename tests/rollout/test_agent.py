"""The tool loop with a scripted policy: code runs in the real sandbox, outputs are fed back as
masked tokens, budgets and stops hold, and the KV-cache bookkeeping matches the episode."""

import dataclasses

import jax
import numpy as np
import pytest

from agentic_jax.data import prompts
from agentic_jax.data.tokenizer import builtin_tokenizer
from agentic_jax.rollout import (
    AgentConfig, AgentLoop, DecodeOut, RowSpec, SamplingParams, ToolController)
from agentic_jax.sandbox import Sandbox, SandboxConfig


@dataclasses.dataclass
class _State:
    rows: list  # the tokens each row's cache holds


class ScriptedSampler:
    """Stands in for `Sampler`: row b emits the tokens of scripts[b] in order.

    Keeps each row's cache contents so tests can check that rollbacks and appends leave the
    cache equal to prompt + response.
    """

    def __init__(self, scripts, max_len=512):
        self.scripts = [list(s) for s in scripts]
        self.max_len = max_len
        self.decode_calls = 0

    def prefill(self, prompts_):
        return _State([list(p) for p in prompts_])

    def append(self, state, chunks):
        for row, chunk in zip(state.rows, chunks):
            row.extend(chunk)
        return state

    @staticmethod
    def set_lengths(state, lengths):
        for row, n in zip(state.rows, lengths):
            assert n <= len(row), "set_lengths may only roll back"
            del row[n:]
        return state

    def decode(self, state, row_keys, *, active, budget, stop_ids, params, num_steps):
        self.decode_calls += 1
        b = len(state.rows)
        toks = np.zeros((b, num_steps), np.int32)
        count = np.zeros(b, np.int32)
        for i in np.flatnonzero(active):
            for k in range(min(num_steps, int(budget[i]))):
                if not self.scripts[i]:
                    break
                tok = self.scripts[i].pop(0)
                toks[i, k] = tok
                state.rows[i].append(tok)
                count[i] = k + 1
                if tok in stop_ids:
                    break
        zeros = np.zeros((b, num_steps), np.float32)
        return DecodeOut(state, toks, zeros - 0.5, zeros, count, np.zeros(b, bool))


@pytest.fixture(scope="module")
def tok():
    return builtin_tokenizer()


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_ms=2000, num_workers=2)) as sb:
        yield sb


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def run(tok, sandbox, scripts, prompts_text, *, budget=4, max_length=256, chunk=8,
        mode="fixed"):
    sampler = ScriptedSampler([enc(tok, s) for s in scripts])
    controller = ToolController(max_tool_calls=budget, timeout_ms=2000, mode=mode)
    cfg = AgentConfig(max_length=max_length, max_output_tokens=32, decode_chunk=chunk,
                      sampling=SamplingParams(temperature=1.0))
    agent = AgentLoop(sampler, tok, sandbox, controller, cfg)
    prompt_tokens = [enc(tok, p) for p in prompts_text]
    state_holder = {}
    original_prefill = sampler.prefill

    def prefill(p):
        state_holder["state"] = original_prefill(p)
        return state_holder["state"]

    sampler.prefill = prefill
    episodes, timing = agent.run([RowSpec(p) for p in prompt_tokens], jax.random.key(0))
    return episodes, timing, state_holder["state"], sampler


def test_code_is_run_and_output_fed_back_masked(tok, sandbox):
    script = ("Let me compute.\n" + prompts.code_block("print(3847 * 2913)")
              + "The answer is \\boxed{11206311}.")
    eps, timing, state, _ = run(tok, sandbox, [script], ["Compute 3847 * 2913.\n"])
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
    assert state.rows[0] == ep.prompt_tokens + ep.response_tokens
    assert 0.0 <= timing["accelerator_idle_frac"] <= 1.0


def test_errors_are_one_line_with_hint_and_counted(tok, sandbox):
    script = (prompts.code_block("import os\nprint(os.getcwd())") + "\n"
              + prompts.code_block("print(1/0)") + "The answer is \\boxed{1}.")
    eps, _, _, _ = run(tok, sandbox, [script], ["Q\n"])
    ep = eps[0]
    assert ep.num_tool_calls == 2 and ep.num_tool_failures == 2
    assert ep.tool_errors == ["ImportError", "ZeroDivisionError"]
    assert "ImportError:" in ep.text and "ZeroDivisionError:" in ep.text
    assert "environment.whitelist" in ep.text  # the taxonomy hint


def test_tool_budget_stops_execution(tok, sandbox):
    block = prompts.code_block("print(7)")
    script = block + block + block + "The answer is \\boxed{7}."
    eps, _, _, _ = run(tok, sandbox, [script], ["Q\n"], budget=2)
    ep = eps[0]
    assert ep.num_tool_calls == 2
    assert ep.text.count("```output\n7\n```") == 2
    assert "Tool budget exhausted" in ep.text
    assert ep.finish_reason == "answer"


def test_forbidden_mode_runs_nothing(tok, sandbox):
    script = prompts.code_block("print(7)") + "The answer is \\boxed{7}."
    eps, _, _, _ = run(tok, sandbox, [script], ["Q\n"], mode="forbidden")
    assert eps[0].num_tool_calls == 0
    assert "```output\n7" not in eps[0].text
    assert "Tools are disabled" in eps[0].text


def test_tokens_after_the_answer_are_cut_and_cache_rolled_back(tok, sandbox):
    script = "The answer is \\boxed{5}. And then some more words that must be dropped."
    eps, _, state, _ = run(tok, sandbox, [script], ["Q\n"], chunk=64)
    ep = eps[0]
    assert ep.text.rstrip(".") == "The answer is \\boxed{5}"
    assert ep.finish_reason == "answer"
    assert state.rows[0] == ep.prompt_tokens + ep.response_tokens


def test_eos_length_and_void_turns(tok, sandbox):
    eos = tok.eos_token
    scripts = ["I do not know." + eos, "word " * 200]
    eps, _, _, _ = run(tok, sandbox, scripts, ["Q\n", "Q\n"], max_length=40)
    assert eps[0].finish_reason == "eos" and eps[0].void_turn
    assert eps[1].finish_reason == "length" and eps[1].void_turn and eps[1].truncated
    assert len(eps[1].prompt_tokens) + len(eps[1].response_tokens) == 40


def test_rows_keep_decoding_while_a_tool_runs(tok, sandbox):
    slow = prompts.code_block("import math\ns = 0\nfor i in range(300000):\n    s += i\nprint(s)")
    scripts = [slow + "The answer is \\boxed{1}.", "a " * 60 + "The answer is \\boxed{2}."]
    eps, _, states, sampler = run(tok, sandbox, scripts, ["Q\n", "Q\n"], chunk=4)
    assert eps[0].num_tool_calls == 1 and eps[0].num_tool_failures == 0
    assert eps[1].finish_reason == "answer"
    # Row 1 needed many chunks; they ran while row 0's snippet was in the sandbox.
    assert sampler.decode_calls > 10


def test_unclosed_and_reopened_blocks(tok, sandbox):
    reopened = "```python\nprint(1)\n```python\nprint(2)\n```\nThe answer is \\boxed{2}."
    unclosed = "```python\nprint(3)\n" + "x " * 100
    eps, _, _, _ = run(tok, sandbox, [reopened, unclosed], ["Q\n", "Q\n"], max_length=80)
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
    sampler = ScriptedSampler([enc(tok, script), enc(tok, script)])
    controller = ToolController(max_tool_calls=4, timeout_ms=2000, mode="fixed")
    cfg = AgentConfig(max_length=256, max_output_tokens=32, decode_chunk=8, stateful=stateful)
    agent = AgentLoop(sampler, tok, sandbox, controller, cfg)
    eps, _ = agent.run([RowSpec(enc(tok, "Q\n")), RowSpec(enc(tok, "Q\n"))], jax.random.key(0))
    for ep in eps:  # each episode has its own namespace: row 1 never sees row 0's x
        assert ep.num_tool_calls == 2
        if stateful:
            assert "```output\n42\n```" in ep.text and ep.num_tool_failures == 0
        else:
            assert "NameError" in ep.text and ep.num_tool_failures == 1
