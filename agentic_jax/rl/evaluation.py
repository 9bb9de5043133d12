"""Evaluation of the published policy on a problem set: accuracy with and without tools,
pass@k, code use, tool calls and response length, overall and per stage."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax

from agentic_jax.data import Problem
from agentic_jax.parallel import gather_rows, process_slice
from agentic_jax.reward import RewardConfig
from agentic_jax.rl.builders import Policy
from agentic_jax.rl.metrics import episode_table, pass_rates, summarize
from agentic_jax.rl.rollouts import grade, row_specs
from agentic_jax.rollout import Episode, SamplingParams, ToolController


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """batch_size: episodes per agent call on this host (a fixed shape: one compilation).
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
    format). On several hosts each evaluates its share of the problems and the per-episode
    rows are gathered before aggregation. Episode j of the whole set draws with key j of one
    split, so sampled results do not depend on the host split or the chunking.
    """
    problems = list(policy.problems.test if problems is None else problems)
    cfg = cfg or eval_config(policy)
    k = cfg.num_samples
    share = process_slice(len(problems))
    jobs = [p for p in problems[share] for _ in range(k)]
    episodes = _rollout(policy, jobs, tools, cfg, job_offset=share.start * k,
                        job_total=len(problems) * k)
    grade(episodes, jobs, RewardConfig(use_verification=policy.cfg.reward.use_verification),
          sandbox=policy.sandbox)
    table = gather_rows(episode_table(episodes, policy.problems.stages))
    out = summarize(table, policy.problems.stages, per_stage=True)
    out["num_problems"] = float(len(table["correct"]) // k)
    if k > 1 and len(table["correct"]):
        out.update(pass_rates(table["correct"], k))
    return out


def _rollout(policy: Policy, jobs: list[Problem], tools: bool, cfg: EvalConfig, *,
             job_offset: int, job_total: int) -> list[Episode]:
    e = policy.cfg.environment
    controller = ToolController(max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout,
                                mode="fixed" if tools else "forbidden")
    temperature = cfg.temperature if cfg.num_samples == 1 else (cfg.temperature or 1.0)
    agent = policy.agent(controller, dataclasses.replace(
        policy.agent_cfg, sampling=SamplingParams(temperature=temperature)))
    rng = jax.random.key(policy.cfg.seed)
    # Room after the last episode for the padding rows of a final, partial chunk.
    total = job_total + cfg.batch_size
    episodes: list[Episode] = []
    for start in range(0, len(jobs), cfg.batch_size):
        chunk = jobs[start:start + cfg.batch_size]
        padded = chunk + [chunk[-1]] * (cfg.batch_size - len(chunk))  # one compiled shape
        result = agent.run(row_specs(policy, padded, allow_tools=tools), rng,
                           row_offset=job_offset + start, total_rows=total)
        episodes.extend(result.episodes[:len(chunk)])
    return episodes
