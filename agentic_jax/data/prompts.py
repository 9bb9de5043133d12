"""The tool format, defined once: prompts, tool-output blocks and warm-start texts.

A response that uses the tool looks like

    Let me compute it with Python.
    ```python
    print(3847 * 2913)
    ```
    ```output
    11206211
    ```
    The answer is \\boxed{11206211}.

The policy writes everything up to and including the CODE_CLOSE that ends its code block; the
environment runs the code and appends `format_tool_output(...)` right after it; the policy then
continues and ends with the boxed answer.
"""

from __future__ import annotations

from typing import Any

from agentic_jax.data.problem import Problem
from agentic_jax.data.recipes import RECIPES, recipe_prompt
from agentic_jax.errors import UserError

CODE_OPEN = "```python\n"
CODE_CLOSE = "```"
OUTPUT_OPEN = "```output\n"
OUTPUT_CLOSE = "```"
ANSWER_PREFIX = "The answer is "
MAX_OUTPUT_CHARS = 512
TRUNCATED = "... (output truncated)"

TOOL_INSTRUCTION = (
    "Solve the problem. You may write Python in a ```python block; it is run and its output "
    "is shown in a ```output block. Put the final answer in \\boxed{}."
)
DIRECT_INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."
# The project's own templates, then the published recipes of data/recipes.py (ZeroTIR,
# SimpleTIR, Qwen2.5-Math CoT and tool-integrated), each documented there with its source.
TEMPLATES = ("zero", "short", "chat") + tuple(RECIPES)

# ChatML, installed on the built-in tokenizer (checkpoints bring their own template).
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_REASONING = {
    "arithmetic": "Let me compute it with Python.",
    "algebra": "Let me solve it with sympy.",
    "calculus": "Let me work it out with sympy.",
    "proof": "Let me check it with Python.",
}
_DEFAULT_REASONING = "Let me use Python."
# A written-out solution opens the way a tool-using one does, so the choice between them is one
# token (" write" against " compute", " solve", ...), whose probability the warm start sets to about
# warmstart.tool_fraction and RL is free to move.
DIRECT_REASONING = "Let me write it out."


def format_prompt(question: str, *, template: str = "zero", tokenizer: Any = None,
                  allow_tools: bool = True) -> str:
    """The prompt text for one question.

    Args:
      question: the problem statement.
      template: "zero" (plain text for base models, no instruction tuning assumed), "short"
        (no instruction, only whether the tool is available: for models trained from scratch,
        which learn the format in the warm start and gain nothing from ~40 instruction tokens
        but their cost), "chat" (the tokenizer's chat template with a system instruction
        and the question), or a published recipe's name ("zerotir", "simpletir",
        "qwen25_math_cot", "qwen25_math_tir", "zerorl"; see ``agentic_jax.data.recipes``).
      tokenizer: needed for "chat"; must have a `chat_template`.
      allow_tools: whether the instruction offers the Python tool.
    """
    instruction = TOOL_INSTRUCTION if allow_tools else DIRECT_INSTRUCTION
    if template == "zero":
        return f"{instruction}\n\nProblem: {question}\nSolution:\n"
    if template == "short":
        return f"Problem: {question}\nTools: {'python' if allow_tools else 'none'}\nSolution:\n"
    if template == "chat":
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise UserError("template='chat': the tokenizer has no chat_template; "
                            "use template='zero' for base models")
        messages = [{"role": "system", "content": instruction},
                    {"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
    if template in RECIPES:
        return recipe_prompt(question, template, tokenizer=tokenizer, allow_tools=allow_tools)
    raise UserError(f"template: expected one of {TEMPLATES}, got {template!r}")


def format_tool_output(stdout_or_error: str, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """The output block the environment appends right after a closed code block.

    Long outputs keep their first `max_chars` characters and say they were cut, so a runaway
    print cannot flood the context.
    """
    text = stdout_or_error.strip("\n")
    if len(text) > max_chars:
        text = text[:max_chars] + "\n" + TRUNCATED
    return f"\n{OUTPUT_OPEN}{text}\n{OUTPUT_CLOSE}\n"


def code_block(code: str) -> str:
    """A code block as the policy writes it, ending with CODE_CLOSE (where decoding pauses)."""
    return f"{CODE_OPEN}{code.strip(chr(10))}\n{CODE_CLOSE}"


def final_answer(answer: str) -> str:
    """The closing line with the boxed answer."""
    return f"{ANSWER_PREFIX}\\boxed{{{answer}}}."


def tool_solution_text(problem: Problem, output: str) -> str:
    """A full tool-using response: reasoning line, code, its `output`, boxed answer."""
    reasoning = _REASONING.get(problem.stage, _DEFAULT_REASONING)
    return (f"{reasoning}\n{code_block(problem.solution_code)}"
            f"{format_tool_output(output)}{final_answer(problem.answer)}")


def direct_solution_text(problem: Problem) -> str:
    """A response without tools: the opening line, the written-out reasoning and the boxed
    answer."""
    return f"{DIRECT_REASONING}\n{problem.direct_solution}\n{final_answer(problem.answer)}"
