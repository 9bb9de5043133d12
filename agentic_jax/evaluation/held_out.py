"""Evaluation of the published policy on a problem set: accuracy with and without tools,
pass@k, code use, tool calls and response length, overall and per stage; and
`sample_episodes`, the sampling that benchmark evaluation scores."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from agentic_jax.data import Problem
from agentic_jax.errors import UserError
from agentic_jax.evaluation import pass_at_k
from agentic_jax.parallel import gather_rows, process_slice
from agentic_jax.reward import RewardConfig
from agentic_jax.rollout import Episode, SamplingParams, ToolController
from agentic_jax.training.builders import Policy
from agentic_jax.training.episode_gather import gather_episodes
from agentic_jax.training.metrics import episode_summary, episode_table
from agentic_jax.training.rollouts import grade, row_specs


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
    cfg = policy.cfg
    return EvalConfig(
        batch_size=max(1, cfg.training.batch_size * cfg.rl.group_size // jax.process_count()),
        temperature=cfg.eval_temperature, num_samples=num_samples)


def evaluate(policy: Policy, problems: Sequence[Problem] | None = None, *, tools: bool,
             cfg: EvalConfig | None = None) -> dict[str, float]:
    """Runs every problem ``cfg.num_samples`` times with the published policy and aggregates.

    tools: False is the direct-answer setting (tools forbidden, prompt without the tool
    format). On several hosts each evaluates and grades its share of the problems and the
    per-episode rows are gathered before aggregation. Episode j of the whole set draws with
    key j of one split, so sampled results do not depend on the host split or the chunking.
    """
    problems = list(policy.problems.test if problems is None else problems)
    cfg = cfg or eval_config(policy)
    k = cfg.num_samples
    # With several samples per problem a greedy setting would repeat one answer k times.
    temperature = cfg.temperature if k == 1 else (cfg.temperature or 1.0)
    jobs, episodes = _rollout_share(policy, problems, k, tools,
                                    SamplingParams(temperature=temperature), cfg.batch_size)
    grade(episodes, jobs, RewardConfig(use_verification=policy.cfg.reward.use_verification),
          sandbox=policy.sandbox)
    table = gather_rows(episode_table(episodes, policy.problems.stages))
    out = episode_summary(table, policy.problems.stages, per_stage=True)
    out["num_problems"] = float(len(table["correct"]) // k)
    if k > 1 and len(table["correct"]):
        out.update(pass_rates(table["correct"], k))
    return out


def pass_rates(correct: np.ndarray, k: int) -> dict[str, float]:
    """pass@1 and pass@k (mean over problems) of rows that come in groups of ``k`` samples per
    problem."""
    per_problem = (correct > 0).reshape(-1, k).sum(axis=1)
    return {f"pass@{kk}": float(np.mean([pass_at_k(k, int(c), kk) for c in per_problem]))
            for kk in sorted({1, k})}


def sample_episodes(policy: Policy, problems: Sequence[Problem], *, num_samples: int,
                    tools: bool, sampling: SamplingParams,
                    batch_size: int | None = None) -> list[Episode]:
    """``num_samples`` ungraded episodes of every problem, problem-major (episode
    i * num_samples + s is sample s of problem i), on every host.

    Each host rolls out its share of the problems and the episodes are gathered
    (collective: every host calls it). Episode j draws with key j of one split of the run's
    seed, whatever the host split or the chunking. ``batch_size``: episodes per agent call on
    a host (default: one training step's, `eval_config`).
    """
    if num_samples < 1:
        raise UserError(f"num_samples: expected an integer >= 1, got {num_samples}")
    batch_size = batch_size or eval_config(policy).batch_size
    _, episodes = _rollout_share(policy, list(problems), num_samples, tools, sampling,
                                 batch_size)
    return gather_episodes(episodes)


def _rollout_share(policy: Policy, problems: list[Problem], k: int, tools: bool,
                   sampling: SamplingParams, batch_size: int
                   ) -> tuple[list[Problem], list[Episode]]:
    """This host's jobs (its share of ``problems``, each ``k`` times) and their episodes."""
    share = process_slice(len(problems))
    jobs = [p for p in problems[share] for _ in range(k)]
    e = policy.cfg.environment
    controller = ToolController(max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout,
                                mode="fixed" if tools else "forbidden")
    agent = policy.agent(controller, dataclasses.replace(policy.agent_cfg, sampling=sampling))
    rng = jax.random.key(policy.cfg.seed)
    # One split for the whole set (its size kept from when a final chunk was padded to a full
    # batch, so that the keys stay the same).
    total = len(problems) * k + batch_size
    offset = share.start * k
    episodes: list[Episode] = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start:start + batch_size]
        # group_id: the problem's index in ``problems``, whatever the chunking.
        specs = row_specs(policy, chunk, allow_tools=tools, group_size=k,
                          first_row=offset + start)
        result = agent.run(specs, rng, row_offset=offset + start, total_rows=total)
        episodes.extend(result.episodes)
    return jobs, episodes
