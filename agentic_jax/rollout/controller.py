"""The tool controller: per episode, how many tool calls and how much sandbox time.

Inputs per decision:
  (a) the problem's difficulty estimate d in [0, 1] (harder problems get more calls and time);
  (b) the code-execution success rate of its stage, an exponential moving average updated from
      finished episodes (where code mostly fails, one extra call lets the policy fix it);
  (c) the sandbox's backlog (queued + running snippets per worker) and recent latency (a
      congested sandbox gets no time increases, so training never waits on it).

Modes: ``adaptive`` (the rules above), ``fixed`` (the configured budget and timeout for every
episode) and ``forbidden`` (no tool calls at all: the direct-answer ablation).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

logger = logging.getLogger(__name__)

MODES = ("adaptive", "fixed", "forbidden")


@dataclasses.dataclass(frozen=True)
class ToolDecision:
    tool_budget: int
    timeout_ms: int


@dataclasses.dataclass
class ToolController:
    """Sets per-episode tool budgets and sandbox timeouts.

    Decisions read the controller's state and do not change it; `update` folds a rollout's
    finished episodes in once they are all known (on several hosts: every host's, gathered in
    batch order, so the controllers stay identical).

    Args:
      max_tool_calls: the configured budget (``environment.max_tool_calls``); adaptive decisions
        stay within [1, max_tool_calls + 1].
      timeout_ms: the configured per-snippet timeout (``environment.timeout``); adaptive
        decisions stay within [timeout_ms, 2 * timeout_ms].
      mode: one of MODES.
      ema_decay: weight of the old value in the per-stage success-rate average.
      congestion: backlog per worker above which timeouts are not raised.
    """

    max_tool_calls: int = 4
    timeout_ms: int = 500
    mode: str = "adaptive"
    ema_decay: float = 0.9
    congestion: float = 2.0
    success_rate: dict[str, float] = dataclasses.field(default_factory=dict)
    episodes_seen: int = 0
    decisions: dict[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"tool_mode: expected one of {MODES}, got {self.mode!r}")
        if self.max_tool_calls < 0:
            raise ValueError(f"max_tool_calls: expected >= 0, got {self.max_tool_calls}")
        if self.timeout_ms <= 0:
            raise ValueError(f"timeout: expected a positive number of ms, got {self.timeout_ms}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay: expected a value in [0, 1), got {self.ema_decay}")

    def decide(self, *, difficulty: float, stage: str, backlog_per_worker: float = 0.0,
               latency_ms: float = 0.0) -> ToolDecision:
        """The budget and timeout for one episode."""
        if self.mode == "forbidden":
            return ToolDecision(0, self.timeout_ms)
        if self.mode == "fixed" or self.max_tool_calls == 0:
            return ToolDecision(self.max_tool_calls, self.timeout_ms)
        d = min(max(float(difficulty), 0.0), 1.0)
        budget = max(1, round(self.max_tool_calls * (0.5 + 0.5 * d)))
        rate = self.success_rate.get(stage)
        if rate is not None and rate < 0.5:
            budget += 1  # where code mostly fails, one more call lets the policy fix it
        budget = min(budget, self.max_tool_calls + 1)
        congested = (backlog_per_worker > self.congestion
                     or latency_ms > 0.5 * self.timeout_ms)
        timeout = self.timeout_ms if congested else int(round(self.timeout_ms * (1.0 + d)))
        return ToolDecision(budget, timeout)

    def observe(self, stage: str, num_calls: int, num_failures: int) -> None:
        """Updates the stage's execution success rate from one finished episode."""
        self.episodes_seen += 1
        if num_calls <= 0:
            return
        rate = 1.0 - num_failures / num_calls
        old = self.success_rate.get(stage)
        self.success_rate[stage] = rate if old is None else (
            self.ema_decay * old + (1.0 - self.ema_decay) * rate)

    def update(self, budgets: Sequence[int],
               observations: Sequence[tuple[str, int, int]]) -> None:
        """Counts the budgets decided for a rollout's episodes and observes their (stage, calls,
        failures), in batch order."""
        for budget in budgets:
            key = f"budget_{int(budget)}"
            self.decisions[key] = self.decisions.get(key, 0) + 1
        for stage, calls, failures in observations:
            self.observe(stage, int(calls), int(failures))

    def metrics(self) -> dict[str, float]:
        """Controller state for the metrics log."""
        out = {f"controller/exec_success_{s}": r for s, r in self.success_rate.items()}
        total = sum(self.decisions.values()) or 1
        out.update({f"controller/{k}": v / total for k, v in self.decisions.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"success_rate": dict(self.success_rate), "episodes_seen": self.episodes_seen,
                "decisions": dict(self.decisions)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.success_rate = {str(k): float(v) for k, v in state.get("success_rate", {}).items()}
        self.episodes_seen = int(state.get("episodes_seen", 0))
        self.decisions = {str(k): int(v) for k, v in state.get("decisions", {}).items()}
