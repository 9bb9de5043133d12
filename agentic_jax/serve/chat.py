"""Episodes -> OpenAI choices, chunks and usage.

A choice's content is the episode's transcript: the policy's reasoning, its ```python blocks
and the ```output blocks the sandbox returned, ending in the final answer. It is cut at the
request's completion-token limit and at its first stop string. (Prompts are rendered by the
policy: `agentic_jax.inference.InferencePolicy.chat_prompt`.)

With ``logprobs``, a choice lists the tokens the policy sampled within the shown content, each
with its log-prob under the untempered policy (the engine's own) and the most likely
alternatives; the tool outputs in the content were not sampled and have no entry.
"""

from __future__ import annotations

import dataclasses
import re
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


def tokens_shown(tokens: Sequence[int], decode: Decode, text: str) -> int:
    """How many of ``tokens`` the shown ``text`` (a prefix of their decoding) covers: the fewest
    whose decoding (without a trailing partial character) reaches its length."""
    if len(text) >= len(decode(tokens)):
        return len(tokens)
    low, high = 0, len(tokens)
    while low < high:
        mid = (low + high) // 2
        if len(decode(tokens[:mid]).rstrip("\ufffd")) >= len(text):
            high = mid
        else:
            low = mid + 1
    return low


def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's): the character each byte is written as in a
    vocabulary -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    alphabet, unprintable = {}, 0
    for byte in range(256):
        if byte in printable:
            alphabet[chr(byte)] = byte
        else:
            alphabet[chr(256 + unprintable)] = byte
            unprintable += 1
    return alphabet


_BYTE_ALPHABET = _byte_alphabet()
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")   # SentencePiece's byte fallback


class TokenText:
    """A token's text and UTF-8 bytes as OpenAI's logprobs show them (cached per id). The
    bytes are the token's own, also when it holds part of a character: read from byte-level
    BPE and byte-fallback pieces, else the text's."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._known: dict[int, tuple[str, list[int]]] = {}   # at most the vocabulary

    def __call__(self, token: int) -> tuple[str, list[int]]:
        if token not in self._known:
            self._known[token] = self._read(token)
        return self._known[token]

    def _read(self, token: int) -> tuple[str, list[int]]:
        text = self.tokenizer.decode([token], skip_special_tokens=False)
        piece = self.tokenizer.convert_ids_to_tokens(token) or ""
        raw = text.encode("utf-8")
        if (byte := _BYTE_TOKEN.fullmatch(piece)) is not None:
            raw = bytes([int(byte.group(1), 16)])
        elif piece and all(c in _BYTE_ALPHABET for c in piece):
            pieced = bytes(_BYTE_ALPHABET[c] for c in piece)
            if pieced.decode("utf-8", errors="replace") == text:
                raw = pieced
        return text, list(raw)


@dataclasses.dataclass(frozen=True)
class Sampled:
    """What a choice's log-probs are read from: per response token its id, whether the policy
    sampled it, its log-prob and its most likely alternatives (None: not recorded)."""

    tokens: Sequence[int]
    mask: Sequence[int]
    logprobs: Sequence[float]
    alternatives: Sequence[Sequence[tuple[int, float]] | None] | None

    @classmethod
    def of(cls, episode: Episode) -> Sampled:
        """A snapshot of ``episode`` (which the rollout worker may go on extending)."""
        tops = episode.top_logprobs
        return cls(list(episode.response_tokens), list(episode.loss_mask),
                   list(episode.logprobs), None if tops is None else list(tops))


def logprob_content(sampled: Sampled, start: int, end: int, token_text: TokenText
                    ) -> list[dict[str, Any]]:
    """OpenAI's ``logprobs.content`` for response positions [start, end): one entry per
    sampled token, tool-output positions skipped."""
    def entry(token: int, logprob: float) -> dict[str, Any]:
        text, raw = token_text(int(token))
        return {"token": text, "logprob": float(logprob), "bytes": raw}

    content = []
    for i in range(start, end):
        if not sampled.mask[i]:
            continue
        pairs = sampled.alternatives[i] if sampled.alternatives is not None else None
        content.append({**entry(sampled.tokens[i], sampled.logprobs[i]),
                        "top_logprobs": [entry(t, lp) for t, lp in pairs or ()]})
    return content


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


def logprobs_field(content: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """A choice's ``logprobs``: None when not asked for."""
    return None if content is None else {"content": content, "refusal": None}


def completion_body(cid: str, model: str, prompt_tokens: int, episodes: Sequence[Episode],
                    choices: Sequence[ChoiceText],
                    logprobs: Sequence[list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The reply; ``logprobs``: each choice's `logprob_content` (None: not asked for)."""
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                     "logprobs": logprobs_field(None if logprobs is None else logprobs[i]),
                     "finish_reason": c.finish_reason, "tool_loop": tool_loop_info(e, c.text)}
                    for i, (e, c) in enumerate(zip(episodes, choices))],
        "usage": usage(prompt_tokens, choices),
    }


def chunk(cid: str, model: str, created: int, index: int | None, delta: dict | None = None,
          finish_reason: str | None = None, logprobs: list[dict[str, Any]] | None = None,
          **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``index`` None makes a chunk without choices (usage)."""
    choices = [] if index is None else [{"index": index, "delta": delta or {},
                                         "logprobs": logprobs_field(logprobs),
                                         "finish_reason": finish_reason}]
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices, **extra}
