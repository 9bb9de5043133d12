"""Episode and batch types: token sequences with the masks and statistics training needs.

Episodes are token-in / token-out: the response is the exact token sequence the policy produced
plus the exact tokens of each tool output that was fed back. Text is only ever derived from
tokens (decoding), never the other way round, so what the reward reads is what the trainer scores.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from agentic_jax.utils.files import round_up

FINISH_REASONS = ("eos", "answer", "length")


@dataclasses.dataclass
class Episode:
    """One prompt's multi-turn rollout.

    Attributes:
      prompt_tokens: the prompt as fed to the model.
      response_tokens: everything after the prompt: model tokens and tool-output tokens.
      loss_mask: per response token, 1 for a token the policy sampled and 0 for a tool token.
      logprobs: per response token, the sampler's log-probability (temperature 1); 0 for tools.
      values: per response token, the critic's value before sampling it (0 without a critic).
      versions: per response token, the policy version that sampled it (-1 for tool tokens).
      top_logprobs: when its sampling asked for them (serving), per response token the most
        likely (token id, log-prob) pairs at its position (None for tool tokens); else None.
      text: the decoded response (what the reward reads).
      num_tool_calls / num_tool_failures: executed snippets and how many of them failed.
      tool_errors / tool_ms: the failed snippets' error names and the time spent on tools.
      finish_reason: one of FINISH_REASONS.
      void_turn: a turn ended with neither a code block nor a final answer.
      tool_budget / timeout_ms: what the tool controller set for this episode.
      stage / difficulty / group_id: the problem's stage and difficulty, and its prompt group.
      reward / correct / answered: the grade (set by the reward step; answered: an answer was
        extracted from the text).
    """

    prompt_tokens: list[int]
    response_tokens: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    values: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    # Serving's alone: training never asks for it, and hosts do not exchange it.
    top_logprobs: list[list[tuple[int, float]] | None] | None = dataclasses.field(
        default=None, metadata={"gathered": False})
    text: str = ""
    num_tool_calls: int = 0
    num_tool_failures: int = 0
    tool_errors: list[str] = dataclasses.field(default_factory=list)
    tool_ms: float = 0.0
    finish_reason: str = ""
    void_turn: bool = False
    tool_budget: int = 0
    timeout_ms: int = 0
    stage: str = "default"
    difficulty: float = 0.5
    group_id: int = 0
    reward: float = 0.0
    correct: bool = False
    answered: bool = False

    def add_model_tokens(self, tokens: Sequence[int], logprobs: Sequence[float],
                         values: Sequence[float], versions: Sequence[int] | None = None,
                         top_logprobs: Sequence[list[tuple[int, float]]] | None = None) -> None:
        """Appends sampled tokens; ``versions`` None: all sampled by version 0."""
        if top_logprobs is not None:
            if self.top_logprobs is None:
                self.top_logprobs = [None] * len(self.response_tokens)
            self.top_logprobs.extend(top_logprobs)
        self.response_tokens.extend(int(t) for t in tokens)
        self.loss_mask.extend([1] * len(tokens))
        self.logprobs.extend(float(x) for x in logprobs)
        self.values.extend(float(x) for x in values)
        self.versions.extend([0] * len(tokens) if versions is None
                             else [int(v) for v in versions])

    def add_tool_tokens(self, tokens: Sequence[int]) -> None:
        if self.top_logprobs is not None:
            self.top_logprobs.extend([None] * len(tokens))
        self.response_tokens.extend(int(t) for t in tokens)
        self.loss_mask.extend([0] * len(tokens))
        self.logprobs.extend([0.0] * len(tokens))
        self.values.extend([0.0] * len(tokens))
        self.versions.extend([-1] * len(tokens))

    def truncate(self, length: int) -> None:
        """Keeps the first ``length`` response tokens."""
        del self.response_tokens[length:], self.loss_mask[length:]
        del self.logprobs[length:], self.values[length:], self.versions[length:]
        if self.top_logprobs is not None:
            del self.top_logprobs[length:]

    @property
    def num_model_tokens(self) -> int:
        return int(sum(self.loss_mask))

    @property
    def used_code(self) -> bool:
        return self.num_tool_calls > 0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclasses.dataclass
class RolloutBatch:
    """Graded episodes packed into right-padded arrays of one length T (numpy, ready to shard).

    Index t of every per-token array refers to token t; ``sampler_logprobs[:, t]`` is the
    log-probability of token t given tokens < t, so index 0 and all prompt positions are 0.

    Attributes:
      tokens: int32 [B, T]; positions: int32 [B, T];
      loss_mask: float32 [B, T], 1 on sampled response tokens only;
      sampler_logprobs: float32 [B, T];
      lengths: int32 [B]; rewards: float32 [B]; group_ids: int32 [B];
      truncated, void_turn: bool [B].
    """

    tokens: np.ndarray
    positions: np.ndarray
    loss_mask: np.ndarray
    sampler_logprobs: np.ndarray
    lengths: np.ndarray
    rewards: np.ndarray
    group_ids: np.ndarray
    truncated: np.ndarray
    void_turn: np.ndarray

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode], *, length: int,
                      pad_id: int) -> RolloutBatch:
        """Packs episodes (with their ``reward`` and ``group_id``) into ``length`` columns."""
        n = len(episodes)
        tokens = np.full((n, length), pad_id, np.int32)
        mask = np.zeros((n, length), np.float32)
        lps = np.zeros((n, length), np.float32)
        lengths = np.zeros((n,), np.int32)
        for i, ep in enumerate(episodes):
            p, r = len(ep.prompt_tokens), len(ep.response_tokens)
            if p + r > length:
                raise ValueError(f"episode {i} has {p + r} tokens; the batch length is {length}")
            tokens[i, :p] = ep.prompt_tokens
            tokens[i, p:p + r] = ep.response_tokens
            mask[i, p:p + r] = ep.loss_mask
            lps[i, p:p + r] = ep.logprobs
            lengths[i] = p + r
        return cls(
            tokens=tokens,
            positions=np.broadcast_to(np.arange(length, dtype=np.int32), (n, length)).copy(),
            loss_mask=mask,
            sampler_logprobs=lps,
            lengths=lengths,
            rewards=np.asarray([e.reward for e in episodes], np.float32),
            group_ids=np.asarray([e.group_id for e in episodes], np.int32),
            truncated=np.asarray([e.truncated for e in episodes], bool),
            void_turn=np.asarray([e.void_turn for e in episodes], bool),
        )

    def select(self, index: np.ndarray) -> RolloutBatch:
        """The rows at ``index`` (an int array or a bool mask)."""
        return RolloutBatch(**{f.name: getattr(self, f.name)[index]
                               for f in dataclasses.fields(self)})

    def trimmed(self, multiple: int, longest: int | None = None) -> RolloutBatch:
        """The batch cut to the longest episode rounded up to ``multiple`` tokens (never longer
        than it is), so the update does not compute over columns that are padding in every row;
        rounding keeps the number of compiled shapes small. ``longest`` overrides this batch's
        longest episode (hosts agree on one width)."""
        width = self.tokens.shape[1]
        if longest is None:
            longest = int(self.lengths.max()) if len(self) else 0
        if multiple <= 0 or longest <= 0:
            return self
        keep = min(width, max(multiple, round_up(longest, multiple)))
        if keep == width:
            return self
        return dataclasses.replace(self, **{
            f.name: getattr(self, f.name)[:, :keep] for f in dataclasses.fields(self)
            if getattr(self, f.name).ndim == 2})

    def __len__(self) -> int:
        return int(self.tokens.shape[0])
