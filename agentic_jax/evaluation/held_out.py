"""Evaluation of the published policy on a problem set: accuracy with and without tools,
pass@k, code use, tool calls and response length, overall and per stage (the episodes
sampled by `agentic_jax.episodes.sampling`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from agentic_jax.data import Problem
from agentic_jax.episodes.grading import grade
from agentic_jax.episodes.metrics import episode_summary, episode_table
from agentic_jax.episodes.policy import Policy
from agentic_jax.episodes.sampling import eval_batch_size, rollout_share
from agentic_jax.evaluation import pass_at_k
from agentic_jax.parallel import gather_rows
from agentic_jax.reward import RewardConfig
from agentic_jax.rollout import SamplingParams


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """batch_size: episodes per agent call on this host (the engine queues them all).
    temperature: 0 is greedy; with num_samples > 1 a temperature of 0 samples at 1.0.
    num_samples: k for pass@k."""

    batch_size: int = 32
    temperature: float = 0.0
    num_samples: int = 1

    def __post_init__(self):
        if self.batch_size < 1 or self.num_samples < 1:
            raise ValueError(f"batch_size and num_samples: expected integers >= 1, got "
                             f"{self.batch_size}, {self.num_samples}")


def eval_config(policy: Policy, num_samples: int = 1) -> EvalConfig:
    """The run's evaluation settings: one training step's episodes per agent call."""
    return EvalConfig(batch_size=eval_batch_size(policy),
                      temperature=policy.cfg.eval_temperature, num_samples=num_samples)


def evaluate(policy: Policy, problems: Sequence[Problem] | None = None, *, tools: bool,
             cfg: EvalConfig | None = None) -> dict[str, float]:
    """`evaluate_outcomes`' summary."""
    return evaluate_outcomes(policy, problems, tools=tools, cfg=cfg)[0]


def evaluate_outcomes(policy: Policy, problems: Sequence[Problem] | None = None, *, tools: bool,
                      cfg: EvalConfig | None = None) -> tuple[dict[str, float], np.ndarray]:
    """Runs every problem ``cfg.num_samples`` times with the published policy and aggregates.

    tools: False is the direct-answer setting (tools forbidden, prompt without the tool
    format). On several hosts each evaluates and grades its share of the problems and the
    per-episode rows are gathered before aggregation. Episode j of the whole set draws with
    key j of one split, so sampled results do not depend on the host split or the chunking.
    Returns the summary and each problem's number of correct samples (int [len(problems)], in
    ``problems``' order), from which two evaluations of the same problems are compared paired
    (`agentic_jax.evaluation.metrics.paired_difference`).
    """
    problems = list(policy.problems.test if problems is None else problems)
    cfg = cfg or eval_config(policy)
    k = cfg.num_samples
    # With several samples per problem a greedy setting would repeat one answer k times.
    temperature = cfg.temperature if k == 1 else (cfg.temperature or 1.0)
    jobs, episodes = rollout_share(policy, problems, k, tools,
                                   SamplingParams(temperature=temperature), cfg.batch_size)
    grade(episodes, jobs, RewardConfig(use_verification=policy.cfg.reward.use_verification),
          sandbox=policy.sandbox)
    table = gather_rows(episode_table(episodes, policy.problems.stages))
    out = episode_summary(table, policy.problems.stages, per_stage=True)
    out["num_problems"] = float(len(table["correct"]) // k)
    if k > 1 and len(table["correct"]):
        out.update(pass_rates(table["correct"], k))
    return out, (np.asarray(table["correct"]) > 0).reshape(-1, k).sum(axis=1).astype(int)


def pass_rates(correct: np.ndarray, k: int) -> dict[str, float]:
    """pass@1 and pass@k (mean over problems) of rows that come in groups of ``k`` samples per
    problem."""
    per_problem = (correct > 0).reshape(-1, k).sum(axis=1)
    return {f"pass@{kk}": float(np.mean([pass_at_k(k, int(c), kk) for c in per_problem]))
            for kk in sorted({1, k})}
