"""Published recipes' prompt templates (ZeroTIR, SimpleTIR, Qwen2.5-Math CoT / TIR)."""

from __future__ import annotations

import pytest

from agentic_jax.data import builtin_tokenizer, format_prompt
from agentic_jax.data.prompts import TEMPLATES
from agentic_jax.data.recipes import (
    QWEN25_MATH_COT,
    QWEN25_MATH_TIR,
    RECIPES,
    SIMPLETIR_INSTRUCTION,
    recipe_prompt,
)

QUESTION = "Find $x$ if $\\{x\\} = 2$."


def test_zerotir_is_plain_text_ending_in_think():
    text = format_prompt(QUESTION, template="zerotir")
    assert text.startswith("A conversation between User and Assistant.")
    assert "You can use python-code to solve your problem." in text
    assert text.endswith(f"This is the problem:{QUESTION}\nAssistant: <think>")
    without = format_prompt(QUESTION, template="zerotir", allow_tools=False)
    assert "python-code" not in without and without.endswith("Assistant: <think>")


def test_qwen25_math_prompts_are_system_plus_user_chatml():
    cot = format_prompt(QUESTION, template="qwen25_math_cot")
    assert cot == (f"<|im_start|>system\n{QWEN25_MATH_COT}<|im_end|>\n"
                   f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    tir = format_prompt(QUESTION, template="qwen25_math_tir")
    assert QWEN25_MATH_TIR in tir and QWEN25_MATH_COT not in tir
    assert format_prompt(QUESTION, template="qwen25_math_tir", allow_tools=False) == cot


def test_simpletir_puts_its_instruction_before_the_question():
    text = format_prompt(QUESTION, template="simpletir")
    assert f"<|im_start|>user\n{SIMPLETIR_INSTRUCTION}{QUESTION}<|im_end|>" in text
    assert "```output" in text and "final_answer(" not in text
    assert "system" not in text


def test_a_tokenizer_chat_template_renders_the_same_messages():
    tokenizer = builtin_tokenizer()  # ChatML installed
    for name in ("simpletir", "qwen25_math_cot", "qwen25_math_tir"):
        assert format_prompt(QUESTION, template=name, tokenizer=tokenizer) == recipe_prompt(
            QUESTION, name)


def test_recipes_are_valid_template_names_and_unknown_ones_are_errors():
    assert set(RECIPES) <= set(TEMPLATES) and TEMPLATES[:3] == ("zero", "short", "chat")
    with pytest.raises(ValueError, match="no recipe 'toRL'"):
        recipe_prompt(QUESTION, "toRL")
    with pytest.raises(ValueError, match="template: expected one of"):
        format_prompt(QUESTION, template="toRL")
