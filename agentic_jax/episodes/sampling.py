"""The published policy's episodes on a problem set, for evaluation: each host rolls out its
share of the problems in batches, every episode with a key of its own of one split of the
run's seed (`rollout_share`), and `sample_episodes` gathers them on every host."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax

from agentic_jax.data import Problem
from agentic_jax.episodes.gather import gather_episodes
from agentic_jax.episodes.grading import row_specs
from agentic_jax.episodes.policy import Policy
from agentic_jax.errors import UserError
from agentic_jax.parallel import process_slice
from agentic_jax.rollout import Episode, SamplingParams


def eval_batch_size(policy: Policy) -> int:
    """Episodes per agent call on this host when evaluating: one training step's."""
    cfg = policy.cfg
    return max(1, cfg.training.batch_size * cfg.rl.group_size // jax.process_count())


def sample_episodes(policy: Policy, problems: Sequence[Problem], *, num_samples: int,
                    tools: bool, sampling: SamplingParams,
                    batch_size: int | None = None) -> list[Episode]:
    """``num_samples`` ungraded episodes of every problem, problem-major (episode
    i * num_samples + s is sample s of problem i), on every host.

    Each host rolls out its share of the problems and the episodes are gathered
    (collective: every host calls it). Episode j draws with key j of one split of the run's
    seed, whatever the host split or the chunking. ``batch_size``: episodes per agent call on
    a host (default: one training step's, `eval_batch_size`).
    """
    if num_samples < 1:
        raise UserError(f"num_samples: expected an integer >= 1, got {num_samples}")
    batch_size = batch_size or eval_batch_size(policy)
    _, episodes = rollout_share(policy, list(problems), num_samples, tools, sampling,
                                batch_size)
    return gather_episodes(episodes)


def rollout_share(policy: Policy, problems: list[Problem], k: int, tools: bool,
                  sampling: SamplingParams, batch_size: int
                  ) -> tuple[list[Problem], list[Episode]]:
    """This host's jobs (its share of ``problems``, each ``k`` times) and their episodes."""
    share = process_slice(len(problems))
    jobs = [p for p in problems[share] for _ in range(k)]
    controller = policy.controller("fixed" if tools else "forbidden")
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
