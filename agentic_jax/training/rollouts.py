"""One RL step's experience: draw the prompts, run the tool loop, grade every episode.

Every host draws the same prompts; each rolls out and grades its contiguous share of the
episodes (whole prompt groups) and keeps only those. The host-side state that follows the
episodes (the curriculum scheduler, the tool controller) is updated once from every host's
gathered rows, in batch order, so it stays the same everywhere.
"""

from __future__ import annotations

import functools
import time
from typing import Any, NamedTuple, Sequence

import jax
import numpy as np

from agentic_jax.data import Problem
from agentic_jax.episodes.grading import grade, row_specs
from agentic_jax.episodes.metrics import episode_table
from agentic_jax.parallel import gather_rows, process_slice
from agentic_jax.rollout import Episode, ToolController
from agentic_jax.rollout.agent import WeightFeed
from agentic_jax.training.builders import Run
from agentic_jax.training.dynamic_sampling import Draw, collect_in_band


class Experience(NamedTuple):
    """This host's graded episodes of one step, the table of every host's episodes
    (`episode_table` rows, gathered), the phase timings in seconds, this host's problems
    (``problems[i]`` is ``episodes[i]``'s) and the host-side metrics right after the rollout
    (the curriculum stage, the tool controller's state, dynamic sampling's counts). With dynamic
    sampling the table holds every drawn episode, ``episodes`` those that train."""

    episodes: list[Episode]
    table: dict[str, np.ndarray]
    timing: dict[str, float]
    problems: list[Problem]
    host_metrics: dict[str, Any]


def collect(run: Run, step_key: jax.Array, weights: WeightFeed | None = None) -> Experience:
    """Samples the step's problems (the scheduler), rolls them out with the published policy
    (and the weights ``weights`` feeds during the rollout) and grades them; updates the
    scheduler and the tool controller. With ``rl.accuracy_band`` narrower than [0, 1], more
    prompts are drawn until the batch is full (`dynamic_sampling`)."""
    draw = functools.partial(_draw, run, weights=weights)
    if not run.cfg.rl.dynamic_sampling:
        d = draw(step_key, run.cfg.training.batch_size)
        episodes, problems, table, timing, counts = d.episodes, d.problems, d.table, d.timing, {}
    else:
        episodes, problems, table, timing, counts = collect_in_band(
            run, step_key, draw, processes=jax.process_count())
    return Experience(episodes, table, timing, problems, {**host_metrics(run), **counts})


def host_metrics(run: Run) -> dict[str, Any]:
    """The host-side state right after a rollout: the curriculum stage, the tool controller."""
    return {"stage": run.scheduler.current_stage, **run.controller.metrics()}


def draw_jobs(run: Run, num_prompts: int) -> list[Problem]:
    """``num_prompts`` problems from the scheduler, each ``rl.group_size`` times (a row each)."""
    return [p for p in run.scheduler.sample(num_prompts) for _ in range(run.cfg.rl.group_size)]


def score(run: Run, episodes: Sequence[Episode], local_jobs: Sequence[Problem],
          jobs: Sequence[Problem], timing: dict[str, float]) -> dict[str, np.ndarray]:
    """Grades this host's episodes (``timing["reward_s"]``) and folds every host's rows into
    the scheduler and the tool controller; the gathered `episode_table`."""
    cfg, policy = run.cfg, run.policy
    t0 = time.perf_counter()
    grade(episodes, local_jobs, cfg.reward, cfg.training.max_length, policy.sandbox)
    timing["reward_s"] = time.perf_counter() - t0
    table = gather_rows(episode_table(episodes, policy.problems.stages))
    run.scheduler.update(list(zip(jobs, table["correct"].tolist())))
    update_controller(run.controller, table, policy.problems.stages)
    return table


def _draw(run: Run, key: jax.Array, num_prompts: int, weights: WeightFeed | None) -> Draw:
    """One round: ``num_prompts`` problems from the scheduler, ``rl.group_size`` episodes each,
    graded; the scheduler and the tool controller learn from every host's rows."""
    cfg, policy = run.cfg, run.policy
    jobs = draw_jobs(run, num_prompts)
    share = process_slice(len(jobs))
    local_jobs = jobs[share]
    specs = row_specs(policy, local_jobs, group_size=cfg.rl.group_size, first_row=share.start)
    agent = policy.agent(run.controller)
    episodes, timing = agent.run(specs, key, row_offset=share.start, total_rows=len(jobs),
                                 weights=weights)
    # `run` started the engine's counters afresh: this round's, to fold with other rounds'.
    stats = agent.service.engine.reset_stats()
    table = score(run, episodes, local_jobs, jobs, timing)
    return Draw(episodes, local_jobs, table, timing, share.start, stats)


def update_controller(controller: ToolController, table: dict[str, np.ndarray],
                      stages: Sequence[str]) -> None:
    """Folds a rollout's episodes (an `episode_table`, every host's rows) into the controller."""
    names = [stages[i] if i >= 0 else "default" for i in table["stage"]]
    controller.update(table["budget"].tolist(),
                      list(zip(names, table["calls"].astype(int).tolist(),
                               table["fails"].astype(int).tolist())))
