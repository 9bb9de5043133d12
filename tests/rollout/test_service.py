"""The open rollout loop: episodes enter while others decode (a short one is not held behind a
long one) and sample what they would alone, an abort frees the episode's pages and its pending
tool call at once, and a tool is a small protocol (the calculator, fed back masked)."""

import concurrent.futures as cf
import fractions

import jax
import numpy as np
import pytest

from agentic_jax.rollout import (
    AgentConfig, AgentLoop, Episode, RowSpec, ToolController, build_service)
from agentic_jax.rollout.engine import Engine, EngineConfig
from agentic_jax.rollout.environment import (Calculator, CalculatorError, Feedback, PythonTool,
                                             ToolSet, build_tools)
from agentic_jax.rollout.service import RolloutService
from tests.rollout.test_agent import ScriptedEngine, enc

MAX_SEQ = 96


def _service(model, tok, tools=(), **engine_args):
    engine = Engine(model, EngineConfig(max_seq_len=MAX_SEQ, page_size=8, decode_steps=4,
                                        **engine_args))
    # No end ids: a random model's episodes end at their token limit, which the test sets.
    return RolloutService(engine, tok, list(tools), end_ids=(), stop_on_answer=False), engine


def _key(i):
    return np.asarray(jax.random.key_data(jax.random.key(i)))


def _prompt(tok, text="What is 3 + 4?\n"):
    return Episode(prompt_tokens=enc(tok, text))


def _drain(service, limit=500):
    done = {}
    for _ in range(limit):
        for handle, episode in service.step():
            done[handle] = episode
        if not service.busy:
            return done
    raise AssertionError("the loop did not finish")


def test_a_short_request_is_not_held_behind_a_long_one(model, tok):
    service, engine = _service(model, tok, num_slots=4)
    prompt = _prompt(tok)
    long = service.submit(prompt, _key(0), max_length=len(prompt.prompt_tokens) + 64)
    service.step()
    service.step()
    short_prompt = _prompt(tok, "Compute 12 * 12.\n")
    short = service.submit(short_prompt, _key(1),
                           max_length=len(short_prompt.prompt_tokens) + 6)
    order = []
    while service.busy:
        order += [h for h, _ in service.step()]
    assert order == [short, long]
    assert engine.pages_held == 0 and not engine.seqs


def test_an_episode_started_mid_run_samples_what_it_would_alone(model, tok):
    busy, _ = _service(model, tok, num_slots=4)
    other = _prompt(tok)
    busy.submit(other, _key(0), max_length=len(other.prompt_tokens) + 40)
    busy.step()
    late = _prompt(tok, "Solve x - 2 = 5.\n")
    handle = busy.submit(late, _key(5), max_length=len(late.prompt_tokens) + 20)
    shared = _drain(busy)[handle]

    alone, _ = _service(model, tok, num_slots=4)
    solo = _prompt(tok, "Solve x - 2 = 5.\n")
    solo_handle = alone.submit(solo, _key(5), max_length=len(solo.prompt_tokens) + 20)
    assert _drain(alone)[solo_handle].response_tokens == shared.response_tokens
    assert len(shared.response_tokens) == 20


def test_abort_frees_pages_and_is_not_reported(model, tok):
    service, engine = _service(model, tok, num_slots=2)
    a = service.submit(_prompt(tok), _key(0), max_length=80)
    b = service.submit(_prompt(tok, "Compute 12 * 12.\n"), _key(1), max_length=40)
    service.step()
    in_use = engine.pool.in_use
    service.abort(a)
    finished = _drain(service)
    assert list(finished) == [b]
    assert engine.pages_held == 0 and not engine.seqs and in_use > 0
    # An abort of an episode that is still in the inbox: it never reaches the engine.
    c = service.submit(_prompt(tok), _key(2), max_length=40)
    service.abort(c)
    assert service.step() == [] and not engine.seqs and not service.busy


class _Pending:
    """A tool whose calls never finish by themselves: every turn of 3 tokens calls it."""

    name, pause_text = "pending", None

    def __init__(self):
        self.futures = []

    def find_call(self, text):
        return "call" if len(text) >= 3 else None

    def start(self, call, *, timeout_ms, state):
        self.futures.append(cf.Future())
        return self.futures[-1]

    def feedback(self, call, result, *, tokenizer, max_tokens, state):
        return Feedback([1, 2])


def test_abort_cancels_a_pending_tool_call_and_frees_the_paused_pages(model, tok):
    tool = _Pending()
    service, engine = _service(model, tok, tools=[tool], num_slots=2)
    episode = _prompt(tok)
    episode.tool_budget, episode.timeout_ms = 2, 1000
    handle = service.submit(episode, _key(0), max_length=60)
    for _ in range(20):
        service.step()
        if tool.futures:
            break
    assert tool.futures and engine.pool.in_use > 0     # paused in the engine, pages kept
    service.abort(handle)
    service.interrupt()
    assert service.step() == []
    assert tool.futures[0].cancelled()
    assert engine.pages_held == 0 and not engine.seqs and not service.busy


def test_interrupt_returns_a_step_that_waits_for_a_tool(model, tok):
    tool = _Pending()
    service, _ = _service(model, tok, tools=[tool], num_slots=2)
    episode = _prompt(tok)
    episode.tool_budget, episode.timeout_ms = 2, 1000
    service.submit(episode, _key(0), max_length=60)
    while not tool.futures:
        service.step()
    pool = cf.ThreadPoolExecutor(1)
    waiting = pool.submit(service.step)       # nothing to decode: waits for the call
    with pytest.raises(cf.TimeoutError):
        waiting.result(timeout=0.3)
    service.interrupt()
    assert waiting.result(timeout=5) == []
    service.close()
    pool.shutdown()


# ------------------------------------------------------------------ the calculator tool


def test_a_calculator_call_is_answered_and_masked(tok):
    script = enc(tok, "Let me compute <calc>12345 * 6789</calc>") + enc(
        tok, " so the answer is \\boxed{83810205}.") + [tok.eos_token_id]
    engine = ScriptedEngine([script], decode_steps=1)  # no tokens past the call are dropped
    cfg = AgentConfig(max_length=200, max_output_tokens=32)
    agent = AgentLoop(build_service(engine, tok, cfg, [Calculator()]),
                      ToolController(max_tool_calls=2, mode="fixed"), cfg)
    (episode,), _ = agent.run([RowSpec(enc(tok, "What is 12345 * 6789?\n"))], jax.random.key(0))
    assert episode.num_tool_calls == 1 and episode.num_tool_failures == 0
    assert episode.finish_reason == "answer"
    tool_tokens = [t for t, m in zip(episode.response_tokens, episode.loss_mask) if m == 0]
    assert "83810205" in tok.decode(tool_tokens) and "```output" in tok.decode(tool_tokens)
    assert "83810205" not in tok.decode(episode.response_tokens[:episode.loss_mask.index(0)])


@pytest.mark.parametrize("expression, value", [
    ("2 + 3 * 4", 14), ("(2 + 3) * 4", 20), ("7 / 2", fractions.Fraction(7, 2)),
    ("2^10", 1024), ("-3 ** 2", -9), ("0.1 + 0.2", fractions.Fraction(3, 10)),
    ("17 // 5 + 17 % 5", 5), ("2 ** -2", fractions.Fraction(1, 4)),
])
def test_calculator_values_are_exact(expression, value):
    assert Calculator().evaluate(expression) == value


@pytest.mark.parametrize("expression, message", [
    ("1 / 0", "division by zero"), ("0 ** -1", "division by zero"),
    ("9 ** 9 ** 9", "exponents are limited"), ("10 ** 999", "more than 400 digits"),
    ("__import__('os').system('x')", "only numbers"), ("x + 1", "only numbers"),
    ("2 ** 0.5", "whole exponents"), ("1 +", "not an arithmetic expression"),
    ("1" * 300, "1 to 200 characters"), ("True + 1", "only numbers"),
])
def test_calculator_refuses_what_is_not_bounded_arithmetic(expression, message):
    with pytest.raises(CalculatorError, match=message):
        Calculator().evaluate(expression)


def test_a_refused_expression_is_fed_back_as_a_failed_call(tok):
    calc = Calculator()
    result = calc.start("1/0", timeout_ms=100, state={}).result()
    feedback = calc.feedback("1/0", result, tokenizer=tok, max_tokens=32, state={})
    assert not feedback.ok and feedback.error == "CalculatorError"
    assert "division by zero" in tok.decode(feedback.tokens)


def test_the_first_completed_call_wins(tok):
    tools = ToolSet([Calculator()])
    turn = enc(tok, "a <calc>1+1</calc> b <calc>2+2</calc>")
    call = tools.first_event(turn, lambda t: tok.decode(t))
    assert call.payload == "1+1" and tok.decode(turn[:call.cut]).endswith("</calc>")
    assert tools.first_event(enc(tok, "no call here"), lambda t: tok.decode(t)) is None
    with pytest.raises(ValueError, match="distinct"):
        ToolSet([Calculator(), Calculator()])


def test_build_tools_reads_names_and_import_paths():
    sandbox = object()
    python, calc = build_tools(["python", "calculator"], sandbox=sandbox, stateful=True)
    assert isinstance(python, PythonTool) and python.sandbox is sandbox and python.stateful
    assert isinstance(calc, Calculator)
    (tool,) = build_tools(["agentic_jax.rollout.environment:Calculator"])
    assert isinstance(tool, Calculator)
    for names, message in [(["abacus"], "unknown tool 'abacus'"),
                           (["calculator", "calculator"], "distinct"),
                           (["agentic_jax.nope:X"], "cannot import"),
                           (["json:dumps"], "without arguments"),
                           (["json:__name__"], "not a tool"),
                           ("python", "non-empty list"), ([], "non-empty list")]:
        with pytest.raises(ValueError, match=message):
            build_tools(names)
