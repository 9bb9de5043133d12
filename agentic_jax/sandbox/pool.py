"""A first-come-first-served pool of idle workers."""

from __future__ import annotations

import collections
import threading

from agentic_jax.sandbox.worker import Worker


class FairPool:
    """Idle workers handed out first come, first served (a free worker goes straight to the
    longest waiting caller), so that no caller starves under a flood of others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: collections.deque[Worker] = collections.deque()
        self._waiting: collections.deque[tuple[threading.Event, list[Worker]]] = \
            collections.deque()

    def acquire(self) -> Worker:
        with self._lock:
            if self._idle and not self._waiting:
                return self._idle.popleft()
            ticket: tuple[threading.Event, list[Worker]] = (threading.Event(), [])
            self._waiting.append(ticket)
        ticket[0].wait()
        return ticket[1][0]

    def release(self, worker: Worker) -> None:
        with self._lock:
            if not self._waiting:
                self._idle.append(worker)
                return
            event, slot = self._waiting.popleft()
        slot.append(worker)
        event.set()
