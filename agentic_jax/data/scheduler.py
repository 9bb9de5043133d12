"""Adaptive curriculum: the mixture over stages follows the policy's rolling accuracy.

The scheduler trains on one "current" stage at a time and keeps a floor of weight on the
stages already passed (so they are not forgotten), and optionally a share on the stages still
ahead (so they are met before they become current). When the rolling accuracy on the current
stage, over its last `window` results, reaches `threshold` with at least `min_samples`
results, the next stage becomes current. All state is plain JSON for checkpoints.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentic_jax.data.problem import STAGES, Problem

Results = Mapping[str, Iterable[float]] | Iterable[tuple[str | Problem, float]]


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of `CurriculumScheduler`.

    Attributes:
      threshold: rolling accuracy on the current stage that moves training to the next stage.
      window: results per stage kept for the rolling accuracy.
      min_samples: results needed on the current stage before it can be passed.
      floor: mixture weight shared equally by the stages before the current one.
      ahead: mixture weight shared equally by the stages after the current one (0: none; a
        later stage is then first drawn once it is current).
      stages: stage order, easiest first.
    """

    threshold: float = 0.7
    window: int = 256
    min_samples: int = 64
    floor: float = 0.1
    ahead: float = 0.0
    stages: tuple[str, ...] = STAGES

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold: expected a value in (0, 1], got {self.threshold}")
        if self.window < 1:
            raise ValueError(f"window: expected >= 1, got {self.window}")
        if not 1 <= self.min_samples <= self.window:
            raise ValueError(f"min_samples: expected 1..window ({self.window}), "
                             f"got {self.min_samples}")
        if not 0.0 <= self.floor < 1.0:
            raise ValueError(f"floor: expected a value in [0, 1), got {self.floor}")
        if not 0.0 <= self.ahead < 1.0 or self.floor + self.ahead >= 1.0:
            raise ValueError(f"ahead: expected a value in [0, 1 - floor), got {self.ahead} "
                             f"(floor {self.floor})")


class CurriculumScheduler:
    """Samples problems from a stage mixture that moves on as accuracy rises."""

    def __init__(self, problems: Sequence[Problem], config: SchedulerConfig | None = None,
                 seed: int = 0) -> None:
        self.config = config or SchedulerConfig()
        self._seed = seed
        pools: dict[str, list[Problem]] = {s: [] for s in self.config.stages}
        for problem in problems:
            if problem.stage in pools:
                pools[problem.stage].append(problem)
        self._pools = {s: pool for s, pool in pools.items() if pool}
        if not self._pools:
            raise ValueError(f"problems: none belongs to the stages {self.config.stages}")
        self.stages: tuple[str, ...] = tuple(self._pools)
        self._current = 0
        self._calls = 0
        self._drawn = {s: 0 for s in self.stages}
        self._windows = {s: deque(maxlen=self.config.window) for s in self.stages}
        self._orders: dict[str, tuple[int, list[int]]] = {}

    @property
    def current_stage(self) -> str:
        """The stage being learned now."""
        return self.stages[self._current]

    def mixture(self) -> dict[str, float]:
        """Sampling weight per stage: ``floor`` shared by the earlier stages, ``ahead`` by the
        later ones, the rest on the current one."""
        weights = dict.fromkeys(self.stages, 0.0)
        earlier, later = self.stages[: self._current], self.stages[self._current + 1:]
        floor = self.config.floor if earlier else 0.0
        ahead = self.config.ahead if later else 0.0
        for stage in earlier:
            weights[stage] = floor / len(earlier)
        for stage in later:
            weights[stage] = ahead / len(later)
        weights[self.current_stage] = 1.0 - floor - ahead
        return weights

    def accuracy(self, stage: str) -> float | None:
        """Rolling accuracy on `stage`, or None before any result."""
        window = self._windows[stage]
        return sum(window) / len(window) if window else None

    def _next_from(self, stage: str) -> Problem:
        """Walks the stage's pool in a fresh seeded permutation per epoch (no repeats)."""
        pool = self._pools[stage]
        epoch, position = divmod(self._drawn[stage], len(pool))
        if self._orders.get(stage, (None,))[0] != epoch:
            order = list(range(len(pool)))
            random.Random(f"{self._seed}:{stage}:{epoch}").shuffle(order)
            self._orders[stage] = (epoch, order)
        self._drawn[stage] += 1
        return pool[self._orders[stage][1][position]]

    def sample(self, n: int, rng: random.Random | None = None) -> list[Problem]:
        """Draws `n` problems from the current mixture.

        Without `rng` the draw is seeded by (seed, call count), so a scheduler restored from
        `state_dict()` continues with exactly the problems the original would have drawn.
        """
        if rng is None:
            rng = random.Random(f"{self._seed}:sample:{self._calls}")
        self._calls += 1
        weights = self.mixture()
        stages = rng.choices(list(weights), list(weights.values()), k=n)
        return [self._next_from(stage) for stage in stages]

    def update(self, results: Results) -> bool:
        """Records per-problem scores (1 correct, 0 wrong); returns True if the stage advanced.

        Args:
          results: {stage: [score, ...]} or [(stage or Problem, score), ...].
        """
        pairs = (((s, v) for s, vs in results.items() for v in vs)
                 if isinstance(results, Mapping) else results)
        for who, score in pairs:
            stage = who.stage if isinstance(who, Problem) else who
            if stage in self._windows:
                self._windows[stage].append(float(score))
        window = self._windows[self.current_stage]
        ready = len(window) >= self.config.min_samples
        if ready and self._current + 1 < len(self.stages):
            if sum(window) / len(window) >= self.config.threshold:
                self._current += 1
                return True
        return False

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state (stage, draw counters, rolling windows)."""
        return {
            "stages": list(self.stages),
            "current_stage": self.current_stage,
            "calls": self._calls,
            "drawn": dict(self._drawn),
            "windows": {s: list(w) for s, w in self._windows.items()},
            "seed": self._seed,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores `state_dict()` output; the problems and config must match the saved run."""
        if list(state.get("stages", ())) != list(self.stages):
            raise ValueError(f"state_dict['stages']: saved {state.get('stages')}, but this "
                             f"scheduler has {list(self.stages)}")
        self._current = self.stages.index(state["current_stage"])
        self._calls = int(state["calls"])
        self._seed = int(state["seed"])
        self._drawn = {s: int(state["drawn"][s]) for s in self.stages}
        self._windows = {s: deque(map(float, state["windows"][s]), maxlen=self.config.window)
                         for s in self.stages}
        self._orders = {}
