"""Rollouts that overlap the update: a producer thread collects each step's experience ahead of
the trainer, within a staleness bound (``rl.async_mode``, ``rollout.max_staleness``).

Versions. Version v is the policy after v updates (0: the starting policy); step t's update
starts from version t - 1. Every model token records the version that sampled it
(`Episode.versions`); its staleness at step t is (t - 1) - version.

    sync          COLLECT t -> UPDATE t -> PUBLISH in the loop's own thread (`run.rl_step`).
    one_step_off  step t + 1's rollout runs during step t's update with the weights step t's
                  rollout had; new weights reach the engine between rollouts (staleness <= 1).
    fully_async   the producer runs up to K = rollout.max_staleness steps ahead; new weights
                  reach the engine before its next step, in the middle of a rollout, and the
                  in-flight episodes continue with them (rollout.partial = "continue": earlier
                  tokens keep their version and log-probs) or start again ("abort"). With
                  rollout.stream_steps the steps stream through one open tool loop
                  (`agentic_jax.training.stream`): a step whose gate is open enters the engine's
                  queue as soon as the steps in flight leave decode slots free, so the tail of
                  one step's rollout overlaps the next one's.

The bound. Step t's rollout starts only once the trainer has released version t - 1 - K (K is
min(max_staleness, 1) for one_step_off) and versions only grow, so no token has staleness > K.
With K = 0 every rollout waits for the previous update: the synchronous run, exactly.

Drains. At checkpoint and evaluation steps s the pipeline drains: step s + 1's rollout waits until
step s is released (saved), so a checkpoint holds the curriculum scheduler and tool controller
exactly as at step s, a resumed run continues as an uninterrupted one would, and evaluation has
the engine to itself. The cost: one rollout per checkpoint interval is not overlapped.

The device work of both threads is XLA's and the sandbox's, which release the GIL; the engine is
used by one thread at a time (the producer while it collects, else whoever publishes), and it
samples with its own copy of the weights (the train step donates the trainer's buffers).

Placement. Colocated (``mesh.rollout_devices = 0``), the producer and the trainer take turns on
the same devices. Disaggregated, the engine samples on devices of its own and its weights are
moved there device to device at each publish (`agentic_jax.parallel.placement`), so a rollout
and an update run at the same time on different chips. The
producer's collectives would interleave with the trainer's on several processes, so the config
allows asynchrony in one process only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agentic_jax.episodes.policy import Policy
from agentic_jax.rollout import Episode
from agentic_jax.training.builders import Run, sampler_weights
from agentic_jax.training.rollouts import Experience, collect
from agentic_jax.training.stream import StepStream


def start(run: Run, first_step: int, total_steps: int,
          step_key: Callable[[int], jax.Array]) -> RolloutPipeline | None:
    """The producer of steps [first_step, total_steps] (None with rl.async_mode = "sync"),
    draining at checkpoint and evaluation steps."""
    cfg = run.cfg
    if cfg.rl.async_mode == "sync":
        return None
    every_eval = cfg.eval.every_steps if run.policy.problems.benchmarks else 0

    def drains(step: int) -> bool:
        return step % cfg.checkpoint.every_steps == 0 or bool(every_eval
                                                              and step % every_eval == 0)

    return RolloutPipeline(run, first_step, total_steps, step_key, drains)


class RolloutPipeline:
    """The producer thread and its queue of collected steps (see the module docstring).

    The loop calls, per step t: `next(t)` (the step's experience), `publish(params, t)` after
    its update, then `release(t)` once step t is saved; `close()` at the end.
    """

    def __init__(self, run: Run, first_step: int, total_steps: int,
                 step_key: Callable[[int], jax.Array], drains: Callable[[int], bool]):
        mode, bound = run.cfg.rl.async_mode, run.cfg.staleness.max_staleness
        self.run = run
        self.lag = min(bound, 1) if mode == "one_step_off" else bound
        self._mid_rollout = mode == "fully_async"
        # Dynamic sampling draws rounds until a step's batch is full: its steps do not stream.
        self._stream = (self._mid_rollout and run.cfg.staleness.stream_steps
                        and not run.cfg.rl.dynamic_sampling)
        self._first, self._step_key, self._drains = first_step, step_key, drains
        self._cond = threading.Condition()
        self._released = first_step - 1
        self._pending: tuple[Any, int] | None = None
        self._collecting_since: float | None = None
        self._busy: list[tuple[float, float]] = []
        self._ready: dict[int, Experience] = {}
        self._error: BaseException | None = None
        self._closed = False
        engine = run.policy.engine
        engine.update_params(_own_copy(run.policy, engine.params), engine.version)
        self._thread = threading.Thread(target=self._produce, args=(first_step, total_steps),
                                        name="rollout-producer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the trainer's side

    def next(self, step: int) -> Experience:
        """Step ``step``'s experience (waits for the producer)."""
        with self._cond:
            self._cond.wait_for(lambda: step in self._ready or self._error is not None)
            if self._error is not None:
                raise RuntimeError("rollout producer failed") from self._error
            return self._ready.pop(step)

    def publish(self, params: Any, version: int) -> None:
        """New weights for the engine: applied now when it is idle, else by the producer (at its
        next engine step in fully_async, after its rollout in one_step_off)."""
        weights = _own_copy(self.run.policy, sampler_weights(self.run.policy, params))
        with self._cond:
            self._pending = (weights, version)
            if self._collecting_since is None:
                self._apply_pending()

    def release(self, version: int) -> None:
        """The trainer is done with step ``version`` (updated, published, saved)."""
        with self._cond:
            self._released = version
            self._cond.notify_all()

    def busy_seconds(self, start: float, end: float) -> float:
        """Seconds in [start, end] (perf_counter) the producer spent collecting."""
        with self._cond:
            spans = list(self._busy)
            if self._collecting_since is not None:
                spans.append((self._collecting_since, time.perf_counter()))
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    def close(self) -> None:
        """Stops the producer after its current rollout."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    # ------------------------------------------------------------------ the producer's side

    def gate(self, step: int) -> int:
        """The version the trainer must have released before step ``step``'s rollout starts:
        step - 1 - lag, or the newest drain step before ``step`` when that is later."""
        drain = next((s for s in range(step - 1, self._first - 1, -1) if self._drains(s)),
                     self._first - 1)
        return max(step - 1 - self.lag, drain)

    def _produce(self, first: int, total: int) -> None:
        try:
            if self._stream:
                self._produce_streaming(first, total)
                return
            for step in range(first, total + 1):
                with self._cond:
                    self._cond.wait_for(
                        lambda step=step: self._closed or self._released >= self.gate(step))
                    if self._closed:
                        return
                    self._apply_pending()
                    self._collecting_since = time.perf_counter()
                experience = collect(self.run, self._step_key(step),
                                     weights=self._poll if self._mid_rollout else None)
                with self._cond:
                    self._busy.append((self._collecting_since, time.perf_counter()))
                    self._collecting_since = None
                    self._apply_pending()
                    self._ready[step] = experience
                    self._cond.notify_all()
        except Exception as err:  # noqa: BLE001 - any failure is handed to next()
            with self._cond:
                self._error, self._collecting_since = err, None
                self._cond.notify_all()

    def _produce_streaming(self, first: int, total: int) -> None:
        """fully_async with rollout.stream_steps: every step whose gate is open enters one open
        tool loop once it has free decode slots; completed steps are handed over in order."""
        stream = StepStream(self.run, self._step_key)
        try:
            step = first
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or stream.open or step > total
                                        or self._released >= self.gate(step))
                    if self._closed or (step > total and not stream.open):
                        return
                    if step <= total and stream.room and self._released >= self.gate(step):
                        if not stream.open:
                            self._apply_pending()
                            self._collecting_since = time.perf_counter()
                        stream.admit(step)
                        step += 1
                        continue  # another step may fit
                done = stream.advance(self._poll)
                with self._cond:
                    self._ready.update(done)
                    if not stream.open:
                        self._busy.append((self._collecting_since, time.perf_counter()))
                        self._collecting_since = None
                        self._apply_pending()
                    if done:
                        self._cond.notify_all()
        finally:
            stream.close()

    def _poll(self) -> tuple[Any, int] | None:
        """The agent loop's weight feed (fully_async): new (weights, version) or None."""
        with self._cond:
            pending, self._pending = self._pending, None
            return pending

    def _apply_pending(self) -> None:
        """Hands pending weights to the engine (with the lock held, the engine idle)."""
        if self._pending is not None:
            self.run.policy.engine.update_params(*self._pending)
            self._pending = None


def _own_copy(policy: Policy, tree: Any) -> Any:
    """New buffers with the values of ``tree``'s arrays: the trainer's are donated to its next
    update while the sampler may still read these. Disaggregated, the sampler's weights are
    already a copy on its own devices."""
    if policy.rollout_shardings is not None:
        return tree
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def staleness_metrics(episodes: Sequence[Episode], step: int) -> dict[str, float]:
    """staleness_mean / staleness_max over the model tokens of step ``step``'s episodes: the
    trainer's version (step - 1) minus the version that sampled each token."""
    versions = [v for e in episodes for v, m in zip(e.versions, e.loss_mask) if m]
    if not versions:
        return {"staleness_mean": 0.0, "staleness_max": 0.0}
    stale = (step - 1) - np.asarray(versions, np.int64)
    return {"staleness_mean": float(stale.mean()), "staleness_max": float(stale.max())}
