"""Steps that stream through one open tool loop (``rl.async_mode = "fully_async"``,
``rollout.stream_steps``): the next step's prompt groups enter the engine's queue as soon as the
tail of the steps in flight leaves decode slots free, instead of after the last episode of the
step before has finished. `async_rollouts.RolloutPipeline` decides when a step may start (the
staleness gate and the drains); this module runs the admitted steps side by side and hands back
each one's graded experience, in step order, once its last episode finishes.

What a step sees. Its problems are drawn from the curriculum scheduler when it is admitted,
which may be before the steps in flight have updated the scheduler (it has seen every step
before those). Grading, the scheduler's and the tool controller's updates run per step, in step
order, exactly as `rollouts.collect` runs them. Row b of step t samples with key
``jax.random.split(step_key(t), rows)[b]``, as in `collect`; with nothing in flight when a step
is admitted (max_staleness 0, or a drain) the step is the one `collect` would roll out.

Timing. Each step's figures cover its own span, from its admission to its last episode: the
loop's phase times and the engine's counters (slot utilisation, decode and prefill seconds, page
peak), summed over the loop's rounds in that span and shared with whatever other step was in
flight then.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import numpy as np

from agentic_jax.data import Problem
from agentic_jax.episodes.grading import row_specs
from agentic_jax.rollout import Episode, new_episode, poll_weights
from agentic_jax.rollout.agent import WeightFeed
from agentic_jax.rollout.engine.types import EngineStats
from agentic_jax.training.builders import Run
from agentic_jax.training.rollouts import Experience, draw_jobs, host_metrics, score
from agentic_jax.utils.timing import PhaseTimer


class _Step:
    """A step in flight: its rows' problems, their episodes as they finish, the rows left, and
    the engine's counters and the loop's phase times over its span so far."""

    def __init__(self, jobs: list[Problem], episodes: list[Episode], streamed: bool,
                 engine_stats: EngineStats, seconds: dict[str, float]):
        self.jobs, self.episodes, self.streamed = jobs, episodes, streamed
        self.left = len(jobs)
        self.admitted = time.perf_counter()
        self.seconds = dict(seconds)  # the loop's phase times at admission
        self.stats = EngineStats(pool_pages=engine_stats.pool_pages,
                                 page_bytes=engine_stats.page_bytes,
                                 pages_in_use=engine_stats.pages_in_use,
                                 pages_peak=engine_stats.pages_in_use)
        self.aborted = 0  # model tokens thrown away by restarts (rollout.partial = "abort")

    def add(self, stats: EngineStats) -> None:
        """Folds in one round's counters (`Engine.reset_stats` after the round)."""
        self.stats.fold(stats)


class StepStream:
    """One open tool loop over the policy's engine for a run's steps.

    ``admit(t)`` draws step t's problems and queues its episodes; ``advance(weights)`` runs one
    round of the loop and returns [(t, experience)] of the steps that completed; ``room``
    says whether another step would find free decode slots; ``close()`` aborts what is left.
    Used from one thread.
    """

    def __init__(self, run: Run, step_key: Callable[[int], jax.Array]):
        self.run, self._step_key = run, step_key
        self._batch_size, self._group_size = run.cfg.training.batch_size, run.cfg.rl.group_size
        self._agent_cfg = run.policy.agent_cfg  # episode length, sampling, partial mode
        self.service = run.policy.rollout_service()
        self.engine = self.service.engine
        self.engine.set_sampling(self._agent_cfg.sampling)
        self.engine.reset_stats()
        self.service.timer = self._timer = PhaseTimer()
        self._steps: dict[int, _Step] = {}  # in step order
        self._owner: dict[int, tuple[int, int]] = {}  # handle -> (step, row)

    @property
    def open(self) -> bool:
        """Whether a step is in flight."""
        return bool(self._steps)

    @property
    def room(self) -> bool:
        """Nothing is in flight, or fewer unfinished episodes than decode slots."""
        left = sum(s.left for s in self._steps.values())
        return left < self.engine.cfg.num_slots

    def admit(self, step: int) -> None:
        """Draws step ``step``'s problems from the scheduler and queues ``rl.group_size``
        episodes of each."""
        run = self.run
        jobs = draw_jobs(run, self._batch_size)
        specs = row_specs(run.policy, jobs, group_size=self._group_size)
        episodes = [new_episode(i, spec, run.controller, max_length=self._agent_cfg.max_length,
                                sandbox=run.policy.sandbox) for i, spec in enumerate(specs)]
        keys = np.asarray(jax.random.key_data(jax.random.split(self._step_key(step), len(jobs))))
        record = _Step(jobs, episodes, self.open, self.engine.stats, self._timer.seconds)
        for b, (episode, spec) in enumerate(zip(episodes, specs)):
            handle = self.service.submit(episode, keys[b],
                                         max_length=spec.max_length or self._agent_cfg.max_length,
                                         sampling=spec.sampling)
            self._owner[handle] = (step, b)
        self._steps[step] = record

    def advance(self, weights: WeightFeed) -> list[tuple[int, Experience]]:
        """One round: new weights from ``weights()`` first (in-flight episodes go on as
        ``rollout.partial`` says), then one step of the tool loop; the steps it completed."""
        for handle, tokens in poll_weights(self.service, weights, self._agent_cfg.partial).items():
            self._steps[self._owner[handle][0]].aborted += tokens
        finished = self.service.step()
        stats = self.engine.reset_stats()  # this round's counters, into every step in flight
        for record in self._steps.values():
            record.add(stats)
        for handle, episode in finished:
            step, row = self._owner.pop(handle)
            record = self._steps[step]
            record.episodes[row] = episode
            record.left -= 1
        done = []
        while self._steps:
            step, record = next(iter(self._steps.items()))
            if record.left:
                break
            del self._steps[step]
            done.append((step, self._finish(record)))
        return done

    def close(self) -> None:
        """Aborts the episodes in flight (frees their pages and tool calls)."""
        self.service.close()
        self._steps.clear()
        self._owner.clear()

    def _finish(self, record: _Step) -> Experience:
        """Grades a completed step and folds it into the scheduler and the tool controller."""
        timing = {k: v - record.seconds.get(k, 0.0) for k, v in self._timer.seconds.items()}
        timing["rollout_s"] = rollout_s = time.perf_counter() - record.admitted
        timing["accelerator_idle_frac"] = max(0.0, 1.0 - timing.get("decode_s", 0.0)
                                              / rollout_s) if rollout_s > 0 else 0.0
        timing.update(record.stats.as_metrics(), aborted_tokens=float(record.aborted))
        table = score(self.run, record.episodes, record.jobs, record.jobs, timing)
        host = {**host_metrics(self.run), "rollout_streamed": float(record.streamed)}
        return Experience(record.episodes, table, timing, record.jobs, host)
