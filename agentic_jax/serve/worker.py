"""One background thread drives the open rollout loop (`agentic_jax.rollout.RolloutService`)
that every request of the server shares.

HTTP handlers never touch the engine: they `submit` a `Job` (a prompt, its n choices, sampling
settings, a completion-token limit and callbacks) and get a `Ticket` back. The thread admits
queued jobs into the running loop between engine steps — a request that arrives while others
decode starts at the next step, and a short one finishes while a long one runs — up to
``max_batch_rows`` episodes at once (more wait in a bounded queue: `QueueFull`). The queue is
shared fairly between clients (`agentic_jax.serve.fair_queue`: one line per API key or address,
served in turn, each client a share of the places). When the loop is idle, the first job
waits ``batch_wait_ms`` for others so that they prefill together.
`Ticket.cancel()` (a client that went away, a request past its timeout) aborts the job's
episodes: their pages are freed at the next step and their queued tool calls dropped.

Each choice samples with its own key: ``fold_in(key(seed), c)`` when the job gives a seed
(so its reply does not depend on what else runs), else a key of the server's own sequence.
Temperature and top-p are per episode; top-k is one for the engine, so a job with another
top-k waits until the running episodes have finished (and holds the queue behind it).

Callbacks run on the worker thread: ``on_update(choice, episode, kind)`` as an episode grows
("model", "tool", "done") and ``on_finish(episodes, error)`` once (episodes in choice order).
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
import numpy as np

from agentic_jax.rollout import Episode, RowSpec, SamplingParams, new_episode
from agentic_jax.serve.fair_queue import LOCAL, FairQueue
from agentic_jax.serve.schema import ServeLimits

logger = logging.getLogger(__name__)

UpdateFn = Callable[[int, Episode, str], None]
FinishFn = Callable[[list[Episode] | None, BaseException | None], None]


class QueueFull(Exception):
    """The worker's queue holds ``max_queue`` jobs already."""


class Cancelled(Exception):
    """The job was cancelled before it finished."""


@dataclasses.dataclass
class Job:
    """One request: ``n`` episodes of ``prompt`` (token ids), each cut at ``max_new_tokens``
    response tokens. With ``seed``, choice c samples with ``fold_in(key(seed), c)``.
    ``client``: whose request it is (`agentic_jax.serve.fair_queue.client_key`)."""

    prompt: Sequence[int]
    n: int
    sampling: SamplingParams
    max_new_tokens: int
    on_update: UpdateFn
    on_finish: FinishFn
    tools: bool = True
    seed: int | None = None
    client: str = LOCAL


class Ticket:
    """A submitted job: `cancel()` ends it wherever it is (queued or running)."""

    def __init__(self, worker: RolloutWorker, job: Job):
        self._worker, self.job = worker, job
        self.handles: list[int] = []
        self.episodes: list[Episode | None] = [None] * job.n
        self.left = job.n
        self.done = False

    def cancel(self) -> None:
        self._worker.cancel(self)


@dataclasses.dataclass
class WorkerStats:
    """Counters since start. An admission is one step's intake of jobs; ``recent_admissions``
    holds the job count of the latest ones."""

    admissions: int = 0
    requests: int = 0
    rows: int = 0
    cancelled: int = 0
    max_live_rows: int = 0
    steps: int = 0
    busy_s: float = 0.0
    recent_admissions: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=64))

    def as_dict(self) -> dict[str, Any]:
        return {"admissions": self.admissions, "requests": self.requests, "rows": self.rows,
                "cancelled": self.cancelled, "max_live_rows": self.max_live_rows,
                "steps": self.steps, "busy_s": round(self.busy_s, 3),
                "recent_admissions": list(self.recent_admissions)}


# A request's keys, compiled: one dispatch each instead of a few op-by-op ones (those took
# 60% of the worker's admission time at 32 clients); the values are `jax.random.fold_in`'s.
_FOLD_IN = jax.jit(jax.random.fold_in)
_CHOICE_KEYS = jax.jit(lambda key, choices: jax.random.key_data(
    jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, choices)))


class RolloutWorker:
    """The thread that runs every rollout of ``policy`` (a
    `agentic_jax.inference.InferencePolicy`) through its open rollout loop (``service``), each
    episode with the run's fixed tool budget. ``max_length``: prompt + response tokens of one
    episode (the run's ``training.max_length``). ``warmup``: compile the engine's programs
    before the thread starts (`Engine.warmup`), so no request waits on a compilation;
    ``warmup_s`` says how long that took."""

    def __init__(self, policy: Any, limits: ServeLimits, seed: int = 0, warmup: bool = False):
        self.policy, self.limits = policy, limits
        self.stats = WorkerStats()
        self.service = policy.rollout_service()
        self.engine = self.service.engine
        self.controller = policy.controller("fixed")
        self.max_length = policy.agent_cfg.max_length
        self._pending: FairQueue[Ticket] = FairQueue(limits.max_queue)
        self._running: dict[int, tuple[Ticket, int]] = {}   # handle -> (ticket, choice)
        self._live_rows = 0
        self._cond = threading.Condition()
        self._closed = False
        self._root = jax.random.key(seed)
        self._unseeded = 0
        self.engine.set_sampling(policy.agent_cfg.sampling)
        self.engine.return_on_finish = True   # a finished reply leaves at once
        self.warmup_programs, self.warmup_s = self.engine.warmup() if warmup else (0, 0.0)
        self._thread = threading.Thread(target=self._loop, name="rollout-worker", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    def submit(self, job: Job) -> Ticket:
        if job.n > self.limits.max_batch_rows:
            raise ValueError(f"n: at most {self.limits.max_batch_rows}, got {job.n}")
        if not 0 < len(job.prompt) < self.max_length:
            raise ValueError(f"prompt: {len(job.prompt)} tokens; expected 1 to "
                             f"{self.max_length - 1}")
        ticket = Ticket(self, job)
        with self._cond:
            if self._closed:
                raise RuntimeError("the rollout worker is closed")
            refused = self._pending.refusal(job.client)
            if refused is not None:
                raise QueueFull(refused)
            self._pending.push(job.client, ticket)
            self._cond.notify_all()
        self.service.interrupt()  # a step waiting for a tool call returns to admit it
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Ends a job: dropped from the queue, or its episodes aborted (pages freed at the
        next step); its ``on_finish`` gets `Cancelled`. Nothing happens once it finished."""
        with self._cond:
            if ticket.done:
                return
            ticket.done = True
            self.stats.cancelled += 1
            self._pending.remove(ticket.job.client, ticket)
            for handle in ticket.handles:
                if self._running.pop(handle, None) is not None:
                    self._live_rows -= 1
                    self.service.abort(handle)
            self._cond.notify_all()
        ticket.job.on_finish(None, Cancelled("the request was cancelled"))

    def close(self) -> None:
        """Stops the thread; queued and running jobs finish with an error."""
        with self._cond:
            self._closed = True
            left = self._pending.drain()
            self._cond.notify_all()
        self.service.interrupt()  # the thread may wait for a tool call
        self._thread.join()
        for ticket in left:
            ticket.job.on_finish(None, RuntimeError("the server is shutting down"))

    # ------------------------------------------------------------------ the thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._pending or self._running
                           or self.service.busy):
                    self._cond.wait()
                if self._closed:
                    break
                idle = not self._running and bool(self._pending)
            if idle:
                self._gather()
            self._admit()
            started = time.perf_counter()
            try:
                finished = self.service.step()
            except Exception as err:  # one bad step must not stop the server
                logger.exception("rollout step failed")
                self._fail_running(err)
                continue
            finally:
                self.stats.busy_s += time.perf_counter() - started
                self.stats.steps += 1
            for handle, episode in finished:
                self._episode_done(handle, episode)
        self._fail_running(RuntimeError("the server is shutting down"))

    def _gather(self) -> None:
        """With nothing running: waits ``batch_wait_ms`` after the first job (or until the
        queue holds max_batch_rows episodes) so that jobs arriving together start together."""
        deadline = time.monotonic() + self.limits.batch_wait_ms / 1e3
        with self._cond:
            while (self._pending.total(lambda t: t.job.n) < self.limits.max_batch_rows
                   and (left := deadline - time.monotonic()) > 0 and not self._closed):
                self._cond.wait(left)

    def _admit(self) -> None:
        """Moves queued jobs into the loop, the clients in turn (`FairQueue.pop`), while their
        episodes fit."""
        admitted = []
        with self._cond:
            while (turn := self._pending.peek()) is not None:
                ticket = turn[1]
                job = ticket.job
                if self._live_rows + job.n > self.limits.max_batch_rows:
                    break
                top_k = self.engine.cfg.sampling.top_k
                if job.sampling.top_k != top_k:
                    if self._running or self.service.busy:
                        break
                    self.engine.set_sampling(dataclasses.replace(
                        self.engine.cfg.sampling, top_k=job.sampling.top_k))
                self._pending.pop()
                self._start(ticket)
                admitted.append(ticket)
        if admitted:
            s = self.stats
            s.admissions += 1
            s.requests += len(admitted)
            s.rows += sum(t.job.n for t in admitted)
            s.max_live_rows = max(s.max_live_rows, self._live_rows)
            s.recent_admissions.append(len(admitted))

    def _start(self, ticket: Ticket) -> None:
        job = ticket.job
        max_length = min(self.max_length, len(job.prompt) + job.max_new_tokens)
        if job.seed is not None:
            base = jax.random.key(job.seed)
        else:
            base, self._unseeded = _FOLD_IN(self._root, self._unseeded), self._unseeded + 1
        keys = np.asarray(_CHOICE_KEYS(base, np.arange(job.n, dtype=np.uint32)))
        for choice in range(job.n):
            spec = RowSpec(list(job.prompt), tools=job.tools, max_length=max_length)
            episode = new_episode(choice, spec, self.controller, max_length=max_length,
                                  sandbox=self.policy.sandbox)
            handle = self.service.submit(
                episode, keys[choice], max_length=max_length, sampling=job.sampling,
                on_update=lambda ep, kind, c=choice: job.on_update(c, ep, kind))
            ticket.handles.append(handle)
            self._running[handle] = (ticket, choice)
            self._live_rows += 1

    def _episode_done(self, handle: int, episode: Episode) -> None:
        with self._cond:
            owner = self._running.pop(handle, None)
            if owner is None:       # cancelled in the meantime
                return
            self._live_rows -= 1
            ticket, choice = owner
            ticket.episodes[choice] = episode
            ticket.left -= 1
            if ticket.left or ticket.done:
                return
            ticket.done = True
        ticket.job.on_finish(list(ticket.episodes), None)

    def _fail_running(self, err: BaseException) -> None:
        """Ends every running job with ``err`` (the loop is reset; queued jobs stay)."""
        with self._cond:
            tickets = {t for t, _ in self._running.values() if not t.done}
            self._running.clear()
            self._live_rows = 0
            for ticket in tickets:
                ticket.done = True
        self.service.close()
        for ticket in tickets:
            ticket.job.on_finish(None, err)
