"""The warm start's examples and batches: what is trained on, masked and padded."""

import random

import numpy as np
import pytest

from agentic_jax.data import prompts as fmt
from agentic_jax.data.problem import draft
from agentic_jax.data.tokenizer import builtin_tokenizer
from agentic_jax.rl.warmstart import (_batches, build_example, build_examples,
                                      length_grouped_batches, pack_batch)


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


def test_tool_fraction_and_failed_code_fall_back_to_direct(tokenizer):
    problems = [_problem(10 + i, 20 + i) for i in range(200)]
    # The reference code "fails" for every third problem asked: those become direct examples.
    calls = []

    def run_code(codes):
        calls.extend(codes)
        return [None if i % 3 == 0 else "x" for i, _ in enumerate(codes)]

    examples = build_examples(problems, make_prompt=lambda p: _prompt(tokenizer, p),
                              tokenizer=tokenizer, run_code=run_code, tool_fraction=0.3,
                              max_length=400, seed=0)
    share = sum(e.uses_tool for e in examples) / len(examples)
    assert len(examples) == 200 and 0.1 < share < 0.3
    assert share == pytest.approx(len(calls) * 2 / 3 / 200, abs=0.01)
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
    batches = _batches(examples, 4, 7, seed=0)
    assert len(batches) == 7 and all(len(b) == 4 for b in batches)
    batches = _batches(examples, 16, 2, seed=0)
    assert all(len(b) == 16 for b in batches)
    assert {id(e) for b in batches for e in b} == {id(e) for e in examples}


def test_pack_batch_is_an_rl_batch_with_advantage_one_on_policy_tokens(tokenizer):
    problem = _problem(23, 45)
    ex = build_example(problem, _prompt(tokenizer, problem), tokenizer, tool_output="68",
                       max_length=400)
    batch = pack_batch([ex, ex], length=len(ex.tokens) + 5, pad_id=0)
    assert batch["tokens"].shape == (2, len(ex.tokens) + 5)
    np.testing.assert_array_equal(batch["advantages"], batch["loss_mask"])
    assert batch["loss_mask"][:, len(ex.tokens):].sum() == 0
    assert batch["loss_mask"][0].sum() == sum(ex.loss_mask)
