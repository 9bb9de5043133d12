"""The worker's queue, shared fairly between clients.

A client is an API key (``Authorization: Bearer KEY``) or else the connection's address
(`client_key`). Jobs wait in one line per client and the lines are served in turn, one job
each (round robin), so a client's job waits behind at most one job of each other client with
work queued, however many that client or the others queued: a 10,000-hint upload or a burst
delays another client's chat by a bounded amount.

Room is shared too. Of ``max_queue`` places a client may hold ``(max_queue - reserve) / (1 +
others)``, ``others`` being the other clients with queued jobs, and ``reserve`` (a quarter) is
kept for clients that arrive: one client alone never holds the whole queue, so another one's
request is not refused (429) because of it. Behind a reverse proxy every client has the
proxy's address; an API key per client keeps them apart.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
LOCAL = "local"  # jobs submitted from inside the server with no request behind them


def client_key(request: Any) -> str:
    """``key:<hash>`` of the request's bearer token, else ``addr:<peer address>``."""
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return "key:" + hashlib.sha256(token.strip().encode()).hexdigest()[:16]
    peer = request.client
    return f"addr:{peer.host}" if peer is not None else LOCAL


def reserve(max_queue: int) -> int:
    """Places kept for arriving clients: a quarter of the queue, one at least when it has two."""
    return max(1, max_queue // 4) if max_queue > 1 else 0


class FairQueue(Generic[T]):
    """Per-client lines served round robin (not thread-safe: the worker holds its lock)."""

    def __init__(self, max_queue: int):
        self.max_queue = max_queue
        self._lines: collections.OrderedDict[str, collections.deque[T]] = (
            collections.OrderedDict())
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[T]:
        for line in self._lines.values():
            yield from line

    def share(self, client: str) -> int:
        """Jobs ``client`` may have queued now."""
        others = len(self._lines) - (client in self._lines)
        return max(1, (self.max_queue - reserve(self.max_queue)) // (1 + others))

    def refusal(self, client: str) -> str | None:
        """Why a job of ``client`` cannot be queued now, or None."""
        held = len(self._lines.get(client, ()))
        if held >= self.share(client):
            return (f"{held} of your requests are queued (your share of the queue while "
                    f"{len(self._lines)} clients wait); retry later")
        if self._size >= self.max_queue:
            return f"{self._size} requests are queued; retry later"
        return None

    def push(self, client: str, item: T) -> None:
        self._lines.setdefault(client, collections.deque()).append(item)
        self._size += 1

    def remove(self, client: str, item: T) -> bool:
        line = self._lines.get(client)
        if line is None or item not in line:
            return False
        line.remove(item)
        self._size -= 1
        if not line:
            del self._lines[client]
        return True

    def peek(self) -> tuple[str, T] | None:
        """The next job in turn (the first client's oldest), or None when empty."""
        for client, line in self._lines.items():
            return client, line[0]
        return None

    def pop(self) -> T:
        """Takes `peek`'s job; its client goes to the back of the turn."""
        client, line = next(iter(self._lines.items()))
        item = line.popleft()
        self._size -= 1
        del self._lines[client]
        if line:
            self._lines[client] = line
        return item

    def drain(self) -> list[T]:
        """Every queued job (the queue is left empty)."""
        items = list(self)
        self._lines.clear()
        self._size = 0
        return items

    def total(self, weight: Callable[[T], int]) -> int:
        return sum(weight(item) for item in self)
