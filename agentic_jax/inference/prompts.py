"""The run's prompt template: a problem's prompt, and a conversation's (serving, the apps)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_jax.data import Problem, prompts
from agentic_jax.data.tokenizer import encode_prompt as encode_text


def encode_prompt(cfg: Any, tokenizer: Any, problem: Problem,
                  allow_tools: bool = True) -> list[int]:
    """The prompt tokens of ``problem`` in the run's template (a BOS token first when the
    tokenizer adds one, never an EOS). ``cfg``: the run's `RunConfig`."""
    text = prompts.format_prompt(problem.question, template=cfg.data.template,
                                 tokenizer=tokenizer, allow_tools=allow_tools)
    return encode_text(tokenizer, text)


def chat_prompt(cfg: Any, tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The prompt tokens of a conversation in the run's template.

    With the "chat" template the tokenizer's chat template renders the messages (the tool
    instruction as system message unless one is given). The other templates hold a single
    question: the messages' contents in order, those not from the user prefixed by their role.
    """
    if cfg.data.template == "chat":
        chat = list(messages)
        if chat[0]["role"] != "system":
            chat.insert(0, {"role": "system", "content": prompts.TOOL_INSTRUCTION})
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    else:
        question = "\n\n".join(m["content"] if m["role"] == "user"
                               else f"{m['role']}: {m['content']}" for m in messages)
        text = prompts.format_prompt(question, template=cfg.data.template, tokenizer=tokenizer)
    return encode_text(tokenizer, text)
