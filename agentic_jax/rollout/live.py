"""The open rollout loop's record of each episode it holds: its `Phase` and what it waits for
(`agentic_jax.rollout.service`)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import enum
from typing import Any, Callable

import numpy as np

from agentic_jax.rollout.environment import Call
from agentic_jax.rollout.episode import Episode

# Called with (episode so far, "model" | "tool" | "done") as an episode grows.
EpisodeHook = Callable[[Episode, str], None]


class Phase(enum.Enum):
    DECODING = "decoding"
    RUNNING_TOOL = "running_tool"
    READY = "ready"
    DONE = "done"


@dataclasses.dataclass
class Live:
    """One submitted episode: its request's settings and where it is."""

    episode: Episode
    key: np.ndarray
    max_length: int
    sampling: Any
    on_update: EpisodeHook | None
    phase: Phase = Phase.DECODING
    call: Call | None = None            # the event the pause hook found
    tool: cf.Future | None = None       # RUNNING_TOOL: the call's future
    tool_started: float = 0.0
    state: dict = dataclasses.field(default_factory=dict)   # the tools' per-episode memory
    output: list[int] = dataclasses.field(default_factory=list)  # READY: tokens to append

    @property
    def length(self) -> int:
        return len(self.episode.prompt_tokens) + len(self.episode.response_tokens)

    def hook(self, kind: str) -> None:
        if self.on_update is not None:
            self.on_update(self.episode, kind)


def finish(live: Live, reason: str, void: bool = False) -> None:
    live.phase = Phase.DONE
    live.episode.finish_reason = reason
    live.episode.void_turn = live.episode.void_turn or void


def pause_ids(tokenizer: Any, texts: list[str]) -> tuple[int, ...]:
    """The tools' pause texts that the tokenizer has as one token (the built-in one's closing
    fence): a slot stops its round trip there, so the call starts without waiting for the
    round to end."""
    ids = []
    for text in texts:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == 1:
            ids.append(int(encoded[0]))
    return tuple(dict.fromkeys(ids))
