r"""Prompt templates of published tool-integrated-reasoning recipes, by name.

    zerotir           ZeroTIR ("Agent RL Scaling Law", Mai et al. 2025), the ``ZERO_TIR``
                      template of github.com/yyht/openrlhf_async_pipline (openrlhf/cli/
                      template.py): plain text for base models, ending in "Assistant: <think>".
                      Without tools: the same file's ``ZERO_V2`` (the ZeroRL baseline).
    simpletir         SimpleTIR (Xue, Zheng et al. 2025), the ``data.prompt`` of
                      github.com/ltzheng/SimpleTIR recipe/simpletir/config/simpletir_trainer.yaml,
                      put before the question in the user turn of the chat template. Two
                      changes for this environment: the code output is described as the
                      ```output block it is here (SimpleTIR's sandbox prefixes "Code execution
                      result: "), and the paragraph on a ``final_answer()`` helper is left out
                      (this sandbox has no such function; answers are read from \boxed{}).
                      Without tools: qwen25_math_cot.
    qwen25_math_cot   Qwen2.5-Math's chain-of-thought system prompt (README of
                      github.com/QwenLM/Qwen2.5-Math), system + user turn of the chat template.
    qwen25_math_tir   Qwen2.5-Math's tool-integrated system prompt (same README).
                      Without tools: qwen25_math_cot.

Chat recipes use the tokenizer's chat template when one is given, else ChatML (the format of
the Qwen2.5 checkpoints these recipes were published with).
"""

from __future__ import annotations

from typing import Any, NamedTuple

_ZERO_HEAD = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant "
    "solves it. The Assistant first thinks about the reasoning process in the mind and then "
    "provides the User with the answer. The reasoning process is enclosed within <think> "
    "</think> and answer is enclosed within <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>. "
)
_ZERO_TAIL = (
    "User: You must put your answer inside <answer> </answer> tags, i.e., <answer> answer "
    "here </answer>. And your final answer will be extracted automatically by the \\boxed{} "
    "tag.\nThis is the problem:{question}\nAssistant: <think>"
)
ZEROTIR = _ZERO_HEAD + "In your reasoning-process, You can use python-code to solve your problem. " \
    + _ZERO_TAIL
ZERORL = _ZERO_HEAD + _ZERO_TAIL
SIMPLETIR_INSTRUCTION = (
    "Solve the following problem step by step. You now have the ability to selectively write "
    "executable Python code to enhance your reasoning process. The Python code will be "
    "executed by an external sandbox, and the output (in an ```output block) is returned to "
    "aid your reasoning and help you arrive at the final answer. The Python code should be "
    "complete scripts, including necessary imports.\n\n"
    "Code Format:\n"
    "Each code snippet is wrapped between ```. You need to use `print()` to output "
    "intermediate results.\n\n"
    "Answer Format:\n"
    "The last part of your response should be:\n"
    "\\boxed{'The final answer goes here.'}\n\n"
    "User Question:\n"
)
QWEN25_MATH_COT = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN25_MATH_TIR = ("Please integrate natural language reasoning with programs to solve the "
                   "problem above, and put your final answer within \\boxed{}.")


class Recipe(NamedTuple):
    """How a recipe builds its prompt: plain text or a system + user chat."""

    kind: str              # "text" (``template`` with {question}) or "chat"
    template: str          # the text template, or the system prompt
    user_prefix: str = ""  # text put before the question in the user turn
    without_tools: str = ""  # the recipe used when tools are forbidden ("" = itself)


RECIPES: dict[str, Recipe] = {
    "zerotir": Recipe("text", ZEROTIR, without_tools="zerorl"),
    "zerorl": Recipe("text", ZERORL),
    "simpletir": Recipe("chat", "", SIMPLETIR_INSTRUCTION, without_tools="qwen25_math_cot"),
    "qwen25_math_cot": Recipe("chat", QWEN25_MATH_COT),
    "qwen25_math_tir": Recipe("chat", QWEN25_MATH_TIR, without_tools="qwen25_math_cot"),
}


def _chatml(messages: list[dict[str, str]]) -> str:
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def recipe_prompt(question: str, name: str, *, tokenizer: Any = None,
                  allow_tools: bool = True) -> str:
    """The prompt of recipe ``name`` (see the module docstring) for ``question``."""
    if name not in RECIPES:
        raise ValueError(f"template: no recipe {name!r} (have {', '.join(RECIPES)})")
    recipe = RECIPES[name]
    if not allow_tools and recipe.without_tools:
        return recipe_prompt(question, recipe.without_tools, tokenizer=tokenizer)
    if recipe.kind == "text":
        return recipe.template.replace("{question}", question)
    messages = [{"role": "system", "content": recipe.template}] if recipe.template else []
    messages.append({"role": "user", "content": recipe.user_prefix + question})
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return _chatml(messages)
