"""Episode rewards: pure outcome reward (1 correct, 0 otherwise) with optional shaping, and batch
grading on a host thread pool so the accelerator never waits on SymPy.

Optional terms (all off by default):
  format penalty       no final answer could be extracted,
  tool-failure penalty more than ``tool_failure_threshold`` of the episode's tool calls failed,
  overlong penalty     DAPO-style soft penalty ramping linearly from 0 at
                       ``max_length - overlong_buffer`` tokens to ``overlong_penalty`` at
                       ``max_length`` (with no buffer: the full penalty at ``max_length``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Sequence
from typing import Any

from agentic_jax.reward.extract import extract_answer
from agentic_jax.reward.grader import grade_answer
from agentic_jax.reward.verify import verify


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Reward shaping; the defaults give the pure outcome reward."""

    correct_reward: float = 1.0
    incorrect_reward: float = 0.0
    format_penalty: float = 0.0
    tool_failure_penalty: float = 0.0
    tool_failure_threshold: float = 0.5
    overlong_penalty: float = 0.0
    overlong_buffer: int = 0
    use_verification: bool = False  # correctness from verify(problem, ...) when a problem is given

    def __post_init__(self):
        for name in ("format_penalty", "tool_failure_penalty", "overlong_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"RewardConfig.{name} must be >= 0 (it is subtracted), "
                    f"got {getattr(self, name)}"
                )
        if self.overlong_buffer < 0:
            raise ValueError(
                f"RewardConfig.overlong_buffer must be >= 0, got {self.overlong_buffer}"
            )
        if not 0.0 <= self.tool_failure_threshold <= 1.0:
            raise ValueError(
                "RewardConfig.tool_failure_threshold must be in [0, 1], "
                f"got {self.tool_failure_threshold}"
            )


@dataclasses.dataclass(frozen=True)
class RewardInfo:
    """The reward of one episode and how it was made up."""

    reward: float
    correct: bool
    has_answer: bool
    extracted: str | None
    format_penalty: float = 0.0
    tool_penalty: float = 0.0
    overlong_penalty: float = 0.0


def overlong_penalty(response_length: int, max_length: int | None, cfg: RewardConfig) -> float:
    """The soft overlong penalty (>= 0) for a response of ``response_length`` tokens."""
    if max_length is None or cfg.overlong_penalty == 0.0:
        return 0.0
    if response_length >= max_length:
        return cfg.overlong_penalty
    start = max_length - cfg.overlong_buffer
    if cfg.overlong_buffer == 0 or response_length <= start:
        return 0.0
    return cfg.overlong_penalty * (response_length - start) / cfg.overlong_buffer


def compute_reward(
    response_text: str,
    reference_answer: str,
    *,
    cfg: RewardConfig = RewardConfig(),
    num_tool_calls: int = 0,
    num_tool_failures: int = 0,
    response_length: int = 0,
    max_length: int | None = None,
    problem: Any = None,
    sandbox: Any = None,
) -> RewardInfo:
    """Reward of one response: ``cfg.correct_reward`` if its extracted final answer matches
    ``reference_answer`` (or, with ``cfg.use_verification`` and a ``problem``, passes
    ``verify``, which runs the problem's tests in ``sandbox`` when one is given), else
    ``cfg.incorrect_reward``; minus the enabled penalties."""
    if num_tool_failures > num_tool_calls:
        raise ValueError(
            f"num_tool_failures ({num_tool_failures}) exceeds num_tool_calls ({num_tool_calls})"
        )
    extracted = extract_answer(response_text)
    if extracted is None:
        correct = False
    elif cfg.use_verification and problem is not None:
        correct = verify(problem, extracted, sandbox=sandbox).ok
    else:
        correct = grade_answer(extracted, reference_answer)
    format_pen = cfg.format_penalty if extracted is None else 0.0
    failed_share = num_tool_failures / num_tool_calls if num_tool_calls else 0.0
    tool_pen = cfg.tool_failure_penalty if failed_share > cfg.tool_failure_threshold else 0.0
    long_pen = overlong_penalty(response_length, max_length, cfg)
    base = cfg.correct_reward if correct else cfg.incorrect_reward
    return RewardInfo(
        reward=base - format_pen - tool_pen - long_pen,
        correct=correct,
        has_answer=extracted is not None,
        extracted=extracted,
        format_penalty=format_pen,
        tool_penalty=tool_pen,
        overlong_penalty=long_pen,
    )


def _optional(values: Sequence | None, n: int, name: str, default: Any) -> list:
    if values is None:
        return [default] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries, expected {n} (one per response)")
    return list(values)


def grade_batch(
    responses: Sequence[str],
    references: Sequence[str],
    *,
    cfg: RewardConfig = RewardConfig(),
    max_workers: int = 4,
    num_tool_calls: Sequence[int] | None = None,
    num_tool_failures: Sequence[int] | None = None,
    response_lengths: Sequence[int] | None = None,
    max_length: int | None = None,
    problems: Sequence[Any] | None = None,
    sandbox: Any = None,
) -> list[RewardInfo]:
    """``compute_reward`` for every response on a host thread pool; results in input order.
    ``sandbox`` (thread-safe) runs the problems' tests under ``cfg.use_verification``."""
    n = len(responses)
    references = _optional(references, n, "references", None)
    calls = _optional(num_tool_calls, n, "num_tool_calls", 0)
    failures = _optional(num_tool_failures, n, "num_tool_failures", 0)
    lengths = _optional(response_lengths, n, "response_lengths", 0)
    problems = _optional(problems, n, "problems", None)
    if max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")

    def one(i: int) -> RewardInfo:
        return compute_reward(
            responses[i],
            references[i],
            cfg=cfg,
            num_tool_calls=calls[i],
            num_tool_failures=failures[i],
            response_length=lengths[i],
            max_length=max_length,
            problem=problems[i],
            sandbox=sandbox,
        )

    with concurrent.futures.ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(one, range(n)))
