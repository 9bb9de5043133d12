"""From problems to the agent's rows and back: `row_specs` (the agent's input for problems)
and `grade` (each episode's reward, correctness and whether it answered)."""

from __future__ import annotations

from typing import Any, Sequence

from agentic_jax.data import Problem
from agentic_jax.episodes.policy import Policy
from agentic_jax.reward import RewardConfig, grade_batch
from agentic_jax.rollout import Episode, RowSpec


def row_specs(policy: Policy, problems: Sequence[Problem], *, allow_tools: bool = True,
              group_size: int = 1, first_row: int = 0) -> list[RowSpec]:
    """The agent's input for ``problems`` (row i is in prompt group (first_row + i) //
    group_size)."""
    return [RowSpec(policy.make_prompt(p, allow_tools), p.difficulty, p.stage,
                    (first_row + i) // group_size) for i, p in enumerate(problems)]


def grade(episodes: Sequence[Episode], problems: Sequence[Problem], cfg: RewardConfig,
          max_length: int | None = None, sandbox: Any = None) -> None:
    """Sets each episode's reward, correct and answered (``problems[i]`` is episode i's).

    With ``cfg.use_verification`` (``rl.reward_check="verify"``) correctness is the
    verification layer's: the problem kind's checks, equivalence with the reference, and the
    problem's tests run in ``sandbox``.
    """
    infos = grade_batch(
        [e.text for e in episodes], [p.answer for p in problems], cfg=cfg,
        num_tool_calls=[e.num_tool_calls for e in episodes],
        num_tool_failures=[e.num_tool_failures for e in episodes],
        response_lengths=[e.num_model_tokens for e in episodes], max_length=max_length,
        problems=list(problems) if cfg.use_verification else None,
        sandbox=sandbox if cfg.use_verification else None)
    for ep, info in zip(episodes, infos):
        ep.reward, ep.correct, ep.answered = info.reward, info.correct, info.extracted is not None
