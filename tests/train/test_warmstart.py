"""The warm start's examples and batches: what is trained on, masked and padded."""

import random

import numpy as np
import pytest

from agentic_jax.data import prompts as fmt
from agentic_jax.data.problem import draft
from agentic_jax.data.tokenizer import IM_END, builtin_tokenizer, encode_prompt
from agentic_jax.training.warmstart_data import (ExampleFormat, batches, build_example,
                                                 build_examples, length_grouped_batches,
                                                 pack_batch)
from agentic_jax.rollout.tool_text import TRUNCATION_MARKER, render_tool_result
from agentic_jax.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def tokenizer():
    return builtin_tokenizer()


def _problem(a: int, b: int):
    return draft("sum", 0.0, f"Compute {a} + {b}.", str(a + b), f"print({a} + {b})",
                 "", f"{a} + {b} = {a + b}.", f"+:{a},{b}")


def _prompt(tokenizer, problem):
    return list(tokenizer.encode(fmt.format_prompt(problem.question, template="short")))


def test_tool_example_masks_the_prompt_and_the_tool_output(tokenizer):
    problem = _problem(23, 45)
    prompt = _prompt(tokenizer, problem)
    ex = build_example(problem, prompt, tokenizer, tool_output="68", max_length=400)
    assert ex.uses_tool and len(ex.tokens) == len(ex.loss_mask)
    assert ex.loss_mask[:len(prompt)] == [0] * len(prompt)
    text = tokenizer.decode(ex.tokens[len(prompt):])
    assert text == fmt.tool_solution_text(problem, "68")
    # The unmasked tokens are exactly the policy's text: the output block is the masked run.
    masked = [t for t, m in zip(ex.tokens[len(prompt):], ex.loss_mask[len(prompt):]) if not m]
    assert tokenizer.decode(masked) == fmt.format_tool_output("68")


def test_direct_example_trains_on_every_response_token(tokenizer):
    problem = _problem(12, 30)
    prompt = _prompt(tokenizer, problem)
    ex = build_example(problem, prompt, tokenizer, tool_output=None, max_length=400)
    assert not ex.uses_tool
    assert ex.loss_mask == [0] * len(prompt) + [1] * (len(ex.tokens) - len(prompt))
    assert tokenizer.decode(ex.tokens[len(prompt):]) == fmt.direct_solution_text(problem)
    assert build_example(problem, prompt, tokenizer, tool_output=None, max_length=10) is None


def _chat_prompt(tokenizer, problem):
    return encode_prompt(tokenizer, fmt.format_prompt(problem.question, template="chat",
                                                      tokenizer=tokenizer))


def _model_and_tool_text(tokenizer, ex, start):
    """(decoded trained-on tokens, decoded masked tokens) of a response from ``start``."""
    pairs = list(zip(ex.tokens[start:], ex.loss_mask[start:]))
    return (tokenizer.decode([t for t, m in pairs if m]),
            tokenizer.decode([t for t, m in pairs if not m]))


def test_a_chat_example_is_a_rollout_that_ends_its_turn(tokenizer):
    """A pretrained chat model's example: the chat prompt, the response with the sandbox's real
    output rendered as the agent renders it (masked), and the end-of-turn token (trained on)."""
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    layout = ExampleFormat(output_tokens=32, end_ids=(im_end,))
    problem = _problem(23, 45)
    prompt = _chat_prompt(tokenizer, problem)
    with Sandbox(SandboxConfig(num_workers=1)) as sandbox:
        result = sandbox.run_batch([problem.solution_code])[0]
    assert result.ok and result.stdout == "68\n"
    ex = build_example(problem, prompt, tokenizer, tool_output=result.stdout, max_length=400,
                       layout=layout)
    assert ex.tokens[:len(prompt)] == prompt and not any(ex.loss_mask[:len(prompt)])
    assert ex.tokens[-1] == im_end and ex.loss_mask[-1] == 1
    assert tokenizer.decode(ex.tokens[len(prompt):]) == (
        fmt.tool_solution_text(problem, "68") + IM_END)
    model_text, tool_text = _model_and_tool_text(tokenizer, ex, len(prompt))
    assert tool_text == tokenizer.decode(render_tool_result(result, tokenizer, max_tokens=32))
    text = fmt.tool_solution_text(problem, "68")
    assert model_text == text.replace(fmt.format_tool_output("68"), "") + IM_END
    assert model_text.endswith(f"{fmt.code_block(problem.solution_code)}"
                               f"{fmt.final_answer('68')}{IM_END}")
    direct = build_example(problem, prompt, tokenizer, tool_output=None, max_length=400,
                           layout=layout)
    assert direct.tokens[-1] == im_end
    assert direct.loss_mask == [0] * len(prompt) + [1] * (len(direct.tokens) - len(prompt))


def test_a_chat_example_cuts_a_long_output_as_the_rollout_does(tokenizer):
    problem = _problem(23, 45)
    prompt = _chat_prompt(tokenizer, problem)
    stdout = "1234567890" * 20 + "\n"
    layout = ExampleFormat(output_tokens=8, end_ids=(0,))
    ex = build_example(problem, prompt, tokenizer, tool_output=stdout, max_length=400,
                       layout=layout)
    _, tool_text = _model_and_tool_text(tokenizer, ex, len(prompt))
    printed = type("Printed", (), {"ok": True, "stdout": stdout})()
    assert tool_text == tokenizer.decode(render_tool_result(printed, tokenizer, max_tokens=8))
    assert TRUNCATION_MARKER in tool_text
    # The built-in format (what the saved warm starts were trained on) keeps the whole block.
    plain = build_example(problem, prompt, tokenizer, tool_output=stdout, max_length=400)
    assert _model_and_tool_text(tokenizer, plain, len(prompt))[1] == fmt.format_tool_output(stdout)


def test_tool_fraction_and_failed_code_fall_back_to_direct(tokenizer):
    problems = [_problem(10 + i, 20 + i) for i in range(200)]
    printed = {p.solution_code: p.answer + "\n" for p in problems}
    # The reference code "fails" for every third problem asked and prints a wrong answer for
    # every third of the rest: both become direct examples.
    calls = []

    def run_code(codes):
        calls.extend(codes)
        return [None if i % 3 == 0 else "-1\n" if i % 3 == 1 else printed[c]
                for i, c in enumerate(codes)]

    examples = build_examples(problems, make_prompt=lambda p: _prompt(tokenizer, p),
                              tokenizer=tokenizer, run_code=run_code, tool_fraction=0.3,
                              max_length=400, seed=0)
    share = sum(e.uses_tool for e in examples) / len(examples)
    assert len(examples) == 200 and 0.05 < share < 0.15
    assert share == pytest.approx(len(calls) / 3 / 200, abs=0.01)
    with pytest.raises(ValueError, match="tool_fraction"):
        build_examples(problems, make_prompt=lambda p: [], tokenizer=tokenizer,
                       run_code=run_code, tool_fraction=1.5, max_length=400, seed=0)


def test_length_grouped_batches_cover_every_example_once_with_little_padding():
    rng = random.Random(0)
    lengths = [rng.choice((40, 60, 120)) + rng.randint(0, 8) for _ in range(1000)]
    batches = length_grouped_batches(lengths, 16, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert sum(len(b) < 16 for b in batches) <= -(-1000 // (16 * 64))
    assert batches == length_grouped_batches(lengths, 16, seed=3)
    assert batches != length_grouped_batches(lengths, 16, seed=4)

    def padded(groups):
        return sum(len(b) * max(lengths[i] for i in b) for b in groups)

    order = list(range(1000))
    random.Random(3).shuffle(order)
    plain = [order[i:i + 16] for i in range(0, 1000, 16)]
    assert padded(batches) < 0.75 * padded(plain)
    assert padded(batches) < 1.1 * sum(lengths)


def test_batches_are_full_and_repeat_a_small_set(tokenizer):
    problems = [_problem(10 + i, 20 + i) for i in range(5)]
    examples = [build_example(p, _prompt(tokenizer, p), tokenizer, tool_output=None,
                              max_length=400) for p in problems]
    out = batches(examples, 4, 7, seed=0)
    assert len(out) == 7 and all(len(b) == 4 for b in out)
    out = batches(examples, 16, 2, seed=0)
    assert all(len(b) == 16 for b in out)
    assert {id(e) for b in out for e in b} == {id(e) for e in examples}


def test_pack_batch_is_an_rl_batch_with_advantage_one_on_policy_tokens(tokenizer):
    problem = _problem(23, 45)
    ex = build_example(problem, _prompt(tokenizer, problem), tokenizer, tool_output="68",
                       max_length=400)
    batch = pack_batch([ex, ex], length=len(ex.tokens) + 5, pad_id=0)
    assert batch["tokens"].shape == (2, len(ex.tokens) + 5)
    np.testing.assert_array_equal(batch["advantages"], batch["loss_mask"])
    assert batch["loss_mask"][:, len(ex.tokens):].sum() == 0
    assert batch["loss_mask"][0].sum() == sum(ex.loss_mask)
