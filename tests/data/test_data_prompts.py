"""The tool format: prompts, output blocks, and the warm-start response texts."""

from __future__ import annotations

import pytest

from agentic_jax.data import (CODE_CLOSE, CODE_OPEN, OUTPUT_OPEN, builtin_tokenizer,
                              direct_solution_text, format_prompt, format_tool_output,
                              generate_curriculum, tool_solution_text)
from agentic_jax.data.prompts import DIRECT_REASONING, TRUNCATED


def _extract_answer(text: str):
    try:
        from agentic_jax.reward import extract_answer
    except ImportError:  # the package's exports are still being assembled
        from agentic_jax.reward.extract import extract_answer
    return extract_answer(text)


@pytest.fixture(scope="module")
def problems():
    return generate_curriculum(seed=0, sizes={"arithmetic": 20, "algebra": 20, "calculus": 20,
                                              "proof": 20})


def test_zero_template_with_and_without_tools():
    with_tools = format_prompt("What is 2 + 2?")
    assert with_tools.endswith("Problem: What is 2 + 2?\nSolution:\n")
    assert "```python" in with_tools and "```output" in with_tools and "\\boxed{}" in with_tools
    without = format_prompt("What is 2 + 2?", allow_tools=False)
    assert "```" not in without and "\\boxed{}" in without


def test_short_template_says_only_whether_the_tool_is_available():
    tokenizer = builtin_tokenizer()
    with_tools = format_prompt("What is 2 + 2?", template="short")
    assert with_tools == "Problem: What is 2 + 2?\nTools: python\nSolution:\n"
    without = format_prompt("What is 2 + 2?", template="short", allow_tools=False)
    assert without == "Problem: What is 2 + 2?\nTools: none\nSolution:\n"
    zero = format_prompt("What is 2 + 2?")
    assert len(tokenizer.encode(zero)) - len(tokenizer.encode(with_tools)) > 25


def test_chat_template_uses_the_tokenizer():
    prompt = format_prompt("What is 2 + 2?", template="chat", tokenizer=builtin_tokenizer())
    assert prompt.startswith("<|im_start|>system\nSolve the problem.")
    assert "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_template_errors():
    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="no chat_template"):
        format_prompt("q", template="chat", tokenizer=NoTemplate())
    with pytest.raises(ValueError, match="template"):
        format_prompt("q", template="fancy")


def test_tool_output_block():
    assert format_tool_output("42\n") == "\n```output\n42\n```\n"
    assert format_tool_output("NameError: name 'y' is not defined") == (
        "\n```output\nNameError: name 'y' is not defined\n```\n")
    long = format_tool_output("7" * 2000, max_chars=100)
    assert long == f"\n{OUTPUT_OPEN}{'7' * 100}\n{TRUNCATED}\n```\n"


def test_tool_solution_splits_where_the_environment_takes_over(problems):
    for p in problems:
        text = tool_solution_text(p, p.answer)
        start = text.index(CODE_OPEN)
        end = text.index(CODE_CLOSE, start + len(CODE_OPEN)) + len(CODE_CLOSE)
        policy_part, rest = text[:end], text[end:]
        assert policy_part.endswith(f"{CODE_OPEN}{p.solution_code}\n{CODE_CLOSE}")
        assert rest.startswith(format_tool_output(p.answer))
        assert "\n" not in text[:start].strip()  # a single reasoning line before the code
        assert _extract_answer(text) == p.answer


def test_direct_solution_text_has_no_code_and_boxes_the_answer(problems):
    for p in problems:
        text = direct_solution_text(p)
        assert text.startswith(f"{DIRECT_REASONING}\n{p.direct_solution}") and "```" not in text
        assert _extract_answer(text) == p.answer


def test_tool_and_direct_responses_part_at_one_token(problems):
    """Both openings share their tokens up to one, so the warm start's tool fraction is that
    token's probability rather than a side effect of how sure the model is of a number."""
    tok = builtin_tokenizer()
    for p in problems:
        tool = tok.encode(tool_solution_text(p, p.answer))
        direct = tok.encode(direct_solution_text(p))
        split = next(i for i, (a, b) in enumerate(zip(tool, direct)) if a != b)
        assert split == 2, (p.stage, tok.decode(tool[:4]), tok.decode(direct[:4]))
