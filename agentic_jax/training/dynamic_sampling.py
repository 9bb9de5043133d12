"""Dynamic sampling: a step trains on prompt groups whose accuracy lies in ``rl.accuracy_band``
(a group all right or all wrong has no group-relative signal), drawing more prompts until the
batch holds ``training.batch_size`` groups, at most ``rl.max_oversample x batch_size`` prompts
per step. When the draws run out the batch is filled with the last out-of-band groups drawn, so
every update keeps its shape.

Every drawn episode counts for the curriculum, the tool controller and the step's episode metrics
(accuracy is the policy's, not the band's); only the chosen groups train. Counted per step:
dynamic_drawn_prompts, dynamic_in_band_groups, dynamic_filled_groups.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from agentic_jax.rollout import Episode
from agentic_jax.rollout.engine.types import EngineStats
from agentic_jax.training.builders import Run


class Draw(NamedTuple):
    """One round of drawing: this host's graded episodes, their problems and timing, every
    host's `episode_table` rows, the global index of this host's first row and the engine's
    counters over the round."""

    episodes: list[Episode]
    problems: list
    table: dict[str, np.ndarray]
    timing: dict[str, float]
    first_row: int
    stats: EngineStats | None = None


class Chosen(NamedTuple):
    """The groups that train, in order (indices into the concatenated draws), and how many of
    them lie in the band."""

    groups: np.ndarray
    in_band: int


def choose_groups(accuracy: np.ndarray, band: tuple[float, float], batch_size: int) -> Chosen:
    """The first ``batch_size`` groups with accuracy in [low, high], then (when fewer) the last
    out-of-band ones, in draw order. accuracy: [num_groups]."""
    low, high = band
    inside = np.flatnonzero((accuracy >= low) & (accuracy <= high))[:batch_size]
    missing = batch_size - inside.size
    outside = np.flatnonzero((accuracy < low) | (accuracy > high))
    fill = outside[outside.size - missing:] if missing > 0 else outside[:0]
    return Chosen(np.concatenate([inside, np.sort(fill)]).astype(np.int64), int(inside.size))


def collect_in_band(run: Run, step_key: jax.Array,
                    draw: Callable[[jax.Array, int], Draw], processes: int = 1):
    """(episodes, problems, table, timing, counts) of a step under dynamic sampling; ``draw(key,
    num_prompts)`` rolls out one round (round 0 with ``step_key`` itself)."""
    cfg, size = run.cfg, run.cfg.rl.group_size
    batch, budget = cfg.training.batch_size, int(cfg.rl.max_oversample * cfg.training.batch_size)
    draws: list[Draw] = []
    accuracy = np.zeros(0)
    drawn = 0
    while drawn < budget:
        in_band = choose_groups(accuracy, cfg.rl.accuracy_band, batch).in_band
        if in_band >= batch:
            break
        n = min(budget - drawn, -(-(batch - in_band) // processes) * processes)
        key = step_key if not draws else jax.random.fold_in(step_key, len(draws))
        draws.append(draw(key, n))
        drawn += n
        accuracy = np.concatenate([accuracy, draws[-1].table["correct"].reshape(n, size)
                                   .mean(axis=1)])
    chosen = choose_groups(accuracy, cfg.rl.accuracy_band, batch)
    episodes, problems = _local_rows(draws, chosen.groups, size)
    table = {k: np.concatenate([d.table[k] for d in draws]) for k in draws[0].table}
    timing = fold_timing(draws)
    counts = {"dynamic_drawn_prompts": float(drawn),
              "dynamic_in_band_groups": float(chosen.in_band),
              "dynamic_filled_groups": float(len(chosen.groups) - chosen.in_band)}
    return episodes, problems, table, timing, counts


def fold_timing(draws: list[Draw]) -> dict[str, float]:
    """The step's timing over its rounds: phase seconds and counts added up; the engine's
    figures (``engine_*``, ``time_engine_*``) from its counters folded over the rounds
    (`EngineStats.fold`: a page peak, a pool size or a utilisation does not add up), and the
    accelerator's idle fraction from the summed decode and rollout seconds."""
    engine = ("engine_", "time_engine_")
    timing: dict[str, float] = {}
    stats: EngineStats | None = None
    for d in draws:
        for k, v in d.timing.items():
            if not k.startswith(engine) and k != "accelerator_idle_frac":
                timing[k] = timing.get(k, 0.0) + float(v)
        if d.stats is None and any(k.startswith(engine) for k in d.timing):
            raise ValueError("a round's timing holds the engine's figures without its "
                             "counters (Draw.stats): they cannot be folded")
        if d.stats is not None:
            if stats is None:
                stats = dataclasses.replace(d.stats)
            else:
                stats.fold(d.stats)
    if stats is not None:
        timing.update(stats.as_metrics())
    if any("accelerator_idle_frac" in d.timing for d in draws):
        total = timing.get("rollout_s", 0.0)
        timing["accelerator_idle_frac"] = (max(0.0, 1.0 - timing.get("decode_s", 0.0) / total)
                                           if total > 0 else 0.0)
    return timing


def _local_rows(draws: list[Draw], groups: np.ndarray, size: int):
    """This host's episodes of the chosen groups, renumbered: group g's position in ``groups``
    becomes its group_id."""
    position = {int(g): i for i, g in enumerate(groups)}
    episodes, problems, offset = [], [], 0
    for d in draws:
        for j, (ep, problem) in enumerate(zip(d.episodes, d.problems)):
            g = offset + (d.first_row + j) // size
            if g in position:
                episodes.append(dataclasses.replace(ep, group_id=position[g]))
                problems.append(problem)
        offset += len(d.table["correct"]) // size
    order = np.argsort([e.group_id for e in episodes], kind="stable")
    return [episodes[i] for i in order], [problems[i] for i in order]
