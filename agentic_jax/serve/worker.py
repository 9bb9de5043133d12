"""One background thread owns the policy and batches concurrent requests into the engine.

The rollout engine holds one batch at a time, so HTTP handlers never touch it: they `submit` a
`Job` (a prompt, its n choices, sampling settings, a completion-token limit and callbacks) and
the worker thread collects the jobs waiting when it is free — up to ``max_batch_rows``
episodes, each row with its job's own temperature / top-p and, when the job gives one, its own
seed — into one `AgentLoop.run`. Jobs that arrive during a run wait for the next one; the
queue is bounded (`QueueFull`).

Callbacks run on the worker thread: ``on_update(choice, episode, kind)`` as an episode grows
(the `AgentLoop` hook: "model", "tool", "done") and ``on_finish(episodes, error)`` once.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from agentic_jax.rollout import Episode, RowSpec, SamplingParams, ToolController
from agentic_jax.serve.schema import ServeLimits

logger = logging.getLogger(__name__)

UpdateFn = Callable[[int, Episode, str], None]
FinishFn = Callable[[list[Episode] | None, BaseException | None], None]


class QueueFull(Exception):
    """The worker's queue holds ``max_queue`` jobs already."""


@dataclasses.dataclass
class Job:
    """One request: ``n`` episodes of ``prompt`` (token ids), each cut at ``max_new_tokens``
    response tokens by the caller (a batch runs to its longest job's limit). With ``seed``,
    choice c samples with ``fold_in(key(seed), c)``, whatever else shares its batch."""

    prompt: Sequence[int]
    n: int
    sampling: SamplingParams
    max_new_tokens: int
    on_update: UpdateFn
    on_finish: FinishFn
    tools: bool = True
    seed: int | None = None


@dataclasses.dataclass
class WorkerStats:
    """Counters since start; ``recent_batches`` holds the request count of the latest runs."""

    runs: int = 0
    requests: int = 0
    rows: int = 0
    max_batch_requests: int = 0
    busy_s: float = 0.0
    recent_batches: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=64))

    def as_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "requests": self.requests, "rows": self.rows,
                "max_batch_requests": self.max_batch_requests, "busy_s": round(self.busy_s, 3),
                "recent_batches": list(self.recent_batches)}


class BatchWorker:
    """The thread that runs every rollout of ``policy`` (an `agentic_jax.rl.builders.Policy`)."""

    def __init__(self, policy: Any, limits: ServeLimits, seed: int = 0):
        self.policy, self.limits = policy, limits
        self.stats = WorkerStats()
        self._pending: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._root = jax.random.key(seed)
        self._thread = threading.Thread(target=self._loop, name="rollout-worker", daemon=True)
        self._thread.start()

    @property
    def max_length(self) -> int:
        """Prompt + response tokens of one episode (the run's ``training.max_length``)."""
        return self.policy.agent_cfg.max_length

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    def submit(self, job: Job) -> None:
        if job.n > self.limits.max_batch_rows:
            raise ValueError(f"n: at most {self.limits.max_batch_rows}, got {job.n}")
        if not 0 < len(job.prompt) < self.max_length:
            raise ValueError(f"prompt: {len(job.prompt)} tokens; expected 1 to "
                             f"{self.max_length - 1}")
        with self._cond:
            if self._closed:
                raise RuntimeError("the rollout worker is closed")
            if len(self._pending) >= self.limits.max_queue:
                raise QueueFull(f"{len(self._pending)} requests are queued; retry later")
            self._pending.append(job)
            self._cond.notify_all()

    def close(self) -> None:
        """Stops after the current run; jobs still queued finish with an error."""
        with self._cond:
            self._closed = True
            left, self._pending = list(self._pending), collections.deque()
            self._cond.notify_all()
        for job in left:
            job.on_finish(None, RuntimeError("the server is shutting down"))
        self._thread.join()

    # ------------------------------------------------------------------ the thread

    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run(batch)

    def _next_batch(self) -> list[Job] | None:
        """Waits for a job, then ``batch_wait_ms`` (or until the batch is full) for others;
        takes, in arrival order, the jobs with the first one's tool mode and top-k that fit."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = time.monotonic() + self.limits.batch_wait_ms / 1e3
            while (sum(j.n for j in self._pending) < self.limits.max_batch_rows
                   and (left := deadline - time.monotonic()) > 0 and not self._closed):
                self._cond.wait(left)
            if self._closed:
                return None
            key = _batch_key(self._pending[0])
            batch, rest, rows = [], collections.deque(), 0
            for job in self._pending:
                if _batch_key(job) == key and rows + job.n <= self.limits.max_batch_rows:
                    batch.append(job)
                    rows += job.n
                else:
                    rest.append(job)
            self._pending = rest
            return batch

    def _run(self, batch: list[Job]) -> None:
        """One `AgentLoop.run` over every choice of ``batch``; errors go to the jobs."""
        owners = [(job, choice) for job in batch for choice in range(job.n)]
        policy, first = self.policy, batch[0]
        max_length = min(self.max_length, max(len(j.prompt) + j.max_new_tokens for j in batch))
        e = policy.cfg.environment
        controller = ToolController(max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout,
                                    mode="fixed" if first.tools else "forbidden")
        agent = policy.agent(controller, dataclasses.replace(
            policy.agent_cfg, sampling=first.sampling, max_length=max_length))
        specs = [RowSpec(list(j.prompt), sampling=j.sampling,
                         key=None if j.seed is None else jax.random.fold_in(
                             jax.random.key(j.seed), choice))
                 for j, choice in owners]

        def hook(b: int, episode: Episode, kind: str) -> None:
            job, choice = owners[b]
            job.on_update(choice, episode, kind)

        started = time.perf_counter()
        rng = jax.random.fold_in(self._root, self.stats.runs)
        try:
            result = agent.run(specs, rng, on_update=hook)
        except Exception as err:  # one bad batch must not stop the server
            logger.exception("rollout of %d requests failed", len(batch))
            for job in batch:
                job.on_finish(None, err)
            return
        finally:
            self._count(batch, len(owners), time.perf_counter() - started)
        start = 0
        for job in batch:
            job.on_finish(result.episodes[start:start + job.n], None)
            start += job.n

    def _count(self, batch: list[Job], rows: int, seconds: float) -> None:
        s = self.stats
        s.runs += 1
        s.requests += len(batch)
        s.rows += rows
        s.busy_s += seconds
        s.max_batch_requests = max(s.max_batch_requests, len(batch))
        s.recent_batches.append(len(batch))


def _batch_key(job: Job) -> tuple:
    # Temperature and top-p are per row in the engine; top-k is one static per batch.
    return (job.sampling.top_k, job.tools)
