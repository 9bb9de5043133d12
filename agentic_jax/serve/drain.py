"""Shutting the server down without dropping requests: on SIGTERM (a scheduler stopping or
moving the server) the requests in flight finish, new ones get 503, and the process exits once
none is left or ``drain_s`` has passed, whichever is first.

    server = DrainingServer(uvicorn.Config(app, ...), service.drain, drain_s=30)
    server.run()   # returns after a drain; a second SIGTERM or a Ctrl-C stops at once

The listening socket stays open while draining, so a client (or a load balancer's health
check: ``/health`` answers 503 too) is told to go elsewhere rather than finding the port
closed. After ``drain_s`` the requests still running are cancelled as uvicorn shuts down.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from agentic_jax.serve.schema import error_response

RETRY_AFTER_S = 5
SHUTDOWN_GRACE_S = 2.0  # uvicorn's own wait for connections after the drain


class Drain:
    """Requests in flight, and whether the server has stopped taking new ones."""

    def __init__(self):
        self._cond = threading.Condition()
        self.in_flight = 0
        self.started: float | None = None  # time.monotonic() of the SIGTERM

    @property
    def draining(self) -> bool:
        return self.started is not None

    def start(self) -> None:
        with self._cond:
            self.started = time.monotonic()
            self._cond.notify_all()

    def enter(self) -> bool:
        """Counts a new request in; False (not counted) once draining."""
        with self._cond:
            if self.started is not None:
                return False
            self.in_flight += 1
            return True

    def leave(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Waits until no request is in flight (True) or ``timeout_s`` passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)


class DrainGate:
    """ASGI middleware: counts HTTP requests in flight; while draining, answers 503."""

    def __init__(self, app: ASGIApp, drain: Drain):
        self.app, self.drain = app, drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.drain.enter():
            response = error_response(503, "the server is shutting down; retry on another "
                                      "server or in a moment", kind="service_unavailable")
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.leave()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with SIGTERM draining first (`Drain`, at most ``drain_s``)."""

    def __init__(self, config: uvicorn.Config, drain: Drain, drain_s: float = 30.0):
        if config.timeout_graceful_shutdown is None:
            config.timeout_graceful_shutdown = SHUTDOWN_GRACE_S
        super().__init__(config)
        self.drain, self.drain_s = drain, drain_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.drain.draining:
            self.drain.start()
            threading.Thread(target=self._exit_when_drained, name="drain",
                             daemon=True).start()
            return
        super().handle_exit(sig, frame)  # a second SIGTERM or Ctrl-C: uvicorn's own stop

    def _exit_when_drained(self) -> None:
        self.drain.wait_idle(self.drain_s)
        self.should_exit = True
