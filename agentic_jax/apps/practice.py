r"""Adaptive practice: each learner gets problems whose stage and difficulty follow their own
recent accuracy.

    python -m agentic_jax.apps.practice [--state=learner.json]   # answer on stdin; "quit" ends

The stage comes from a `CurriculumScheduler` of the learner's own (the mixture over stages
moves on once their rolling accuracy on the current stage passes ``stage_threshold``; passed
stages keep a floor of weight). Within the stage the next problem is the unseen one nearest the
learner's level there, and the level moves with their rolling accuracy a on that stage:

    level <- clip(level + step * (a - target_accuracy), 0, 1)

so it rises while they answer more than ``target_accuracy`` right and falls otherwise.
Answers are graded by the grader (`grade_answer` of the extracted answer).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
from collections.abc import Sequence
from typing import Any

from agentic_jax.data import Problem, generate_curriculum
from agentic_jax.data.scheduler import CurriculumScheduler, SchedulerConfig
from agentic_jax.reward import extract_answer, grade_answer

# Problems per stage the practice pool holds (generated once, from the seed).
POOL_SIZES = {"arithmetic": 400, "algebra": 300, "calculus": 200, "proof": 100}


@dataclasses.dataclass(frozen=True)
class PracticeConfig:
    """window: answers per stage in the rolling accuracy. target_accuracy: the accuracy the
    level steers to. step: level change per unit of accuracy error. start_level: the first
    level of every stage. stage_threshold / min_answers: rolling accuracy and answers on the
    current stage that open the next one."""

    window: int = 8
    target_accuracy: float = 0.7
    step: float = 0.3
    start_level: float = 0.2
    stage_threshold: float = 0.8
    min_answers: int = 5

    def __post_init__(self):
        if not 1 <= self.min_answers <= self.window:
            raise ValueError(f"min_answers: expected 1..window ({self.window}), got "
                             f"{self.min_answers}")
        for name in ("target_accuracy", "start_level", "step"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}: expected a value in [0, 1], got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class Feedback:
    correct: bool
    answer: str | None      # what was graded
    reference: str
    stage: str
    difficulty: float       # of the problem answered
    level: float            # the learner's new level on that stage
    stage_advanced: bool    # the scheduler moved to the next stage


class Learner:
    """One learner's practice state (plain JSON through `state_dict`)."""

    def __init__(self, problems: Sequence[Problem], cfg: PracticeConfig | None = None,
                 seed: int = 0):
        self.cfg = cfg or PracticeConfig()
        self.scheduler = CurriculumScheduler(problems, SchedulerConfig(
            threshold=self.cfg.stage_threshold, window=self.cfg.window,
            min_samples=self.cfg.min_answers), seed=seed)
        self._pools = {s: [p for p in problems if p.stage == s] for s in self.scheduler.stages}
        self._by_id = {p.id: p for p in problems}
        self.seed = seed
        self.levels = dict.fromkeys(self.scheduler.stages, self.cfg.start_level)
        self.seen: set[str] = set()
        self.history: list[dict[str, Any]] = []
        self.current: Problem | None = None

    def next_problem(self) -> Problem:
        """A stage drawn from the scheduler's mixture, then the unseen problem of that stage
        nearest the learner's level (the pool starts over once all were seen)."""
        rng = random.Random(f"{self.seed}:{len(self.history)}:{len(self.seen)}")
        mixture = self.scheduler.mixture()
        stage = rng.choices(list(mixture), list(mixture.values()))[0]
        pool = [p for p in self._pools[stage] if p.id not in self.seen] or self._pools[stage]
        level = self.levels[stage]
        self.current = min(pool, key=lambda p: (abs(p.difficulty - level), rng.random()))
        self.seen.add(self.current.id)
        return self.current

    def answer(self, text: str) -> Feedback:
        """Grades ``text`` for the current problem and moves the level and the scheduler."""
        if self.current is None:
            raise ValueError("answer: no problem was given yet; call next_problem first")
        problem, self.current = self.current, None
        given = extract_answer(text) or (text.strip() or None)
        correct = grade_answer(given, problem.answer)
        advanced = self.scheduler.update([(problem.stage, float(correct))])
        accuracy = self.scheduler.accuracy(problem.stage)
        level = self.levels[problem.stage] + self.cfg.step * (accuracy - self.cfg.target_accuracy)
        self.levels[problem.stage] = min(1.0, max(0.0, level))
        self.history.append({"id": problem.id, "stage": problem.stage,
                             "difficulty": problem.difficulty, "correct": correct})
        return Feedback(correct, given, problem.answer, problem.stage, problem.difficulty,
                        self.levels[problem.stage], advanced)

    def progress(self) -> dict[str, Any]:
        recent = self.history[-self.cfg.window:]
        return {"answered": len(self.history),
                "correct": sum(h["correct"] for h in self.history),
                "recent_accuracy": (sum(h["correct"] for h in recent) / len(recent)
                                    if recent else None),
                "stage": self.scheduler.current_stage, "mixture": self.scheduler.mixture(),
                "levels": dict(self.levels),
                "stage_accuracy": {s: self.scheduler.accuracy(s) for s in self.scheduler.stages}}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict(), "levels": self.levels,
                "seen": sorted(self.seen), "history": self.history,
                "current": self.current.id if self.current else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.levels = {s: float(state["levels"][s]) for s in self.scheduler.stages}
        self.seen = {i for i in state["seen"] if i in self._by_id}
        self.history = list(state["history"])
        self.current = self._by_id.get(state.get("current") or "")


def practice_pool(seed: int = 0) -> list[Problem]:
    return generate_curriculum(seed=seed, sizes=POOL_SIZES)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agentic_jax.apps.practice",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", default=None, help="JSON file keeping the learner's state")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    learner = Learner(practice_pool(args.seed), seed=args.seed)
    if args.state and os.path.exists(args.state):
        try:
            with open(args.state, encoding="utf-8") as f:
                learner.load_state_dict(json.load(f))
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"error: --state={args.state}: not a practice state ({err})", file=sys.stderr)
            return 2
    while True:
        problem = learner.current or learner.next_problem()
        print(f"[{problem.stage}, difficulty {problem.difficulty:.2f}] {problem.question}")
        line = sys.stdin.readline()
        if not line or line.strip().lower() in ("quit", "exit"):
            break
        fb = learner.answer(line)
        print(("right" if fb.correct else f"wrong: the answer is {fb.reference}")
              + f" (level {fb.level:.2f}" + (", next stage" if fb.stage_advanced else "") + ")")
    if args.state:
        with open(f"{args.state}.partial", "w", encoding="utf-8") as f:
            json.dump(learner.state_dict(), f)
        os.replace(f"{args.state}.partial", args.state)
    print(json.dumps(learner.progress()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
