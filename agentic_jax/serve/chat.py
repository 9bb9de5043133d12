"""Episodes -> OpenAI choices, chunks and usage.

A choice's content is the episode's transcript: the policy's reasoning, its ```python blocks
and the ```output blocks the sandbox returned, ending in the final answer. It is cut at the
request's completion-token limit and at its first stop string. (Prompts are rendered by the
policy: `agentic_jax.inference.InferencePolicy.chat_prompt`.)
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from agentic_jax.reward import extract_answer
from agentic_jax.rollout import Episode

Decode = Callable[[Sequence[int]], str]


@dataclasses.dataclass(frozen=True)
class ChoiceText:
    """What a choice shows: ``text`` so far, and ``finish_reason`` once it ended ("stop",
    "length") or None while it grows. ``model_tokens`` / ``tool_tokens`` count the kept
    response tokens the policy sampled and those of tool outputs."""

    text: str
    finish_reason: str | None
    model_tokens: int
    tool_tokens: int


def choice_text(tokens: Sequence[int], loss_mask: Sequence[int], decode: Decode, *,
                max_new_tokens: int, stops: Sequence[str], episode_reason: str | None
                ) -> ChoiceText:
    """The choice of a (possibly unfinished) episode's response ``tokens``.

    ``episode_reason``: the episode's finish_reason when it is done, else None. While it grows,
    a tail that could still become a stop string or a multi-byte character is held back.
    """
    kept = list(tokens[:max_new_tokens])
    text = decode(kept)
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    model = int(sum(loss_mask[:len(kept)]))
    counts = {"model_tokens": model, "tool_tokens": len(kept) - model}
    if cut >= 0:
        return ChoiceText(text[:cut], "stop", **counts)
    if len(tokens) >= max_new_tokens and (len(tokens) > max_new_tokens
                                          or episode_reason in (None, "length")):
        return ChoiceText(text, "length", **counts)
    if episode_reason is not None:
        return ChoiceText(text, "length" if episode_reason == "length" else "stop", **counts)
    return ChoiceText(_settled(text, stops), None, **counts)


def _settled(text: str, stops: Sequence[str]) -> str:
    """``text`` without a trailing partial character or a suffix that starts a stop string."""
    text = text.rstrip("\ufffd")
    hold = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    return text[:len(text) - hold]


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def tool_loop_info(episode: Episode, text: str) -> dict[str, Any]:
    """The extra per-choice record: the extracted answer and the episode's tool use."""
    return {"answer": extract_answer(text), "tool_calls": episode.num_tool_calls,
            "tool_failures": episode.num_tool_failures,
            "episode_finish_reason": episode.finish_reason}


def usage(prompt_tokens: int, choices: Sequence[ChoiceText]) -> dict[str, int]:
    """OpenAI usage; completion tokens are the sampled ones, tool-output tokens apart."""
    completion = sum(c.model_tokens for c in choices)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "tool_output_tokens": sum(c.tool_tokens for c in choices)}


def completion_body(cid: str, model: str, prompt_tokens: int, episodes: Sequence[Episode],
                    choices: Sequence[ChoiceText]) -> dict[str, Any]:
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                     "finish_reason": c.finish_reason, "tool_loop": tool_loop_info(e, c.text)}
                    for i, (e, c) in enumerate(zip(episodes, choices))],
        "usage": usage(prompt_tokens, choices),
    }


def chunk(cid: str, model: str, created: int, index: int | None, delta: dict | None = None,
          finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``index`` None makes a chunk without choices (usage)."""
    choices = [] if index is None else [{"index": index, "delta": delta or {},
                                         "finish_reason": finish_reason}]
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices, **extra}
