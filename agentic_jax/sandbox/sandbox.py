"""The public `Sandbox`: a pool of warm workers behind validation, a cache and a thread pool."""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import logging
import threading
import time
import weakref

from agentic_jax.sandbox.output import classify
from agentic_jax.sandbox.pool import FairPool
from agentic_jax.sandbox.session import Session
from agentic_jax.sandbox.types import ExecResult, SandboxConfig, failure
from agentic_jax.sandbox.validator import verdict
from agentic_jax.sandbox.worker import Worker, WorkerDied

log = logging.getLogger("agentic_jax.sandbox")
_LATENCY_WINDOW = 512
_live: weakref.WeakSet[Sandbox] = weakref.WeakSet()
_logged_layers: set[tuple[tuple[str, bool], ...]] = set()


@atexit.register
def _close_all() -> None:
    for sandbox in list(_live):
        sandbox.close()


class Sandbox:
    """Runs untrusted Python snippets in isolated, warm worker processes.

    Use as a context manager or call close(); run/run_batch/submit/check_answer never raise
    because of the code they run, nor because a worker died or the sandbox was closed while
    they were under way (they return a SystemError result). Calls made after close() raise
    RuntimeError("Sandbox is closed"). Once close() returns, none of its processes is left.
    """

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self._lock = threading.Lock()
        self._idle = FairPool()
        self._workers = [Worker(self.cfg) for _ in range(self.cfg.workers)]
        self._cache: collections.OrderedDict[tuple, ExecResult] = collections.OrderedDict()
        self._latencies: collections.deque[float] = collections.deque(maxlen=_LATENCY_WINDOW)
        self._counts = collections.Counter()
        self._pending = 0
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(self._workers), thread_name_prefix="sandbox")
        try:
            for worker in self._workers:
                worker.spawn()
            for worker in self._workers:
                worker.wait_ready()
                self._idle.release(worker)
        except BaseException:
            self.close()
            raise
        _live.add(self)
        self._log_layers()

    @property
    def layers(self) -> dict[str, bool]:
        """Isolation layers active in the workers (static analysis is always on)."""
        return {"static_analysis": True, **self._workers[0].layers}

    def worker_pids(self) -> list[int]:
        """Host PIDs of the live worker processes (for monitoring)."""
        return [w.pid for w in self._workers if w.alive]

    def _log_layers(self) -> None:
        key = tuple(sorted(self.layers.items()))
        if key not in _logged_layers:
            _logged_layers.add(key)
            active = ", ".join(k for k, v in key if v) or "none"
            inactive = ", ".join(k for k, v in key if not v) or "none"
            log.info("sandbox layers active: %s; unavailable: %s", active, inactive)
        if self._workers[0].missing:
            log.warning("sandbox whitelist modules not importable: %s", self._workers[0].missing)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, code: str, timeout_ms: int | None = None,
            history: list[str] | tuple[str, ...] = ()) -> ExecResult:
        """Execute one snippet with the configured limits (timeout_ms overrides the timeout).

        history: earlier blocks of the same session, run first in the same namespace with
        their output discarded (each may use timeout_ms again); see `session`.
        """
        self._enter()
        try:
            return self._execute(code, timeout_ms, tuple(history))
        finally:
            self._leave()

    def submit(self, code: str, timeout_ms: int | None = None,
               history: list[str] | tuple[str, ...] = ()
               ) -> concurrent.futures.Future[ExecResult]:
        """Queue a snippet on the host thread pool; the future resolves to its ExecResult."""
        self._enter()
        try:
            future = self._pool.submit(self._execute, code, timeout_ms, tuple(history))
        except RuntimeError:
            self._leave()
            raise RuntimeError("Sandbox is closed") from None
        future.add_done_callback(lambda _: self._leave())
        return future

    def session(self) -> Session:
        """A per-episode handle. With cfg.stateful, its blocks share one namespace, as in a
        notebook (each call replays the earlier successful blocks in a fresh child); without,
        each block runs on its own, exactly like `run`."""
        return Session(self, self.cfg.stateful)

    def run_batch(self, codes: list[str], timeout_ms: int | None = None) -> list[ExecResult]:
        """Execute snippets concurrently over the workers; results in input order."""
        futures = [self.submit(code, timeout_ms) for code in codes]
        return [f.result() for f in futures]

    def check_answer(self, tests_source: str, answer: str,
                     timeout_ms: int | None = None) -> ExecResult:
        """Run `ANSWER = <answer>` (a safely quoted literal) followed by `tests_source`."""
        if not isinstance(answer, str) or not isinstance(tests_source, str):
            raise TypeError("check_answer: tests_source and answer must both be str")
        return self.run(f"ANSWER = {answer!r}\n{tests_source}", timeout_ms)

    def stats(self) -> dict[str, float]:
        """Load and latency figures for a controller.

        backlog: snippets queued or running; running: workers busy; latency_ms_p50/p95 over
        the last 512 executed (uncached) snippets; plus completed/cache_hits/restarts counts.
        """
        with self._lock:
            window = sorted(self._latencies)
            counts = dict(self._counts)
            backlog = self._pending
        pick = (lambda q: window[min(len(window) - 1, int(q * len(window)))] if window else 0.0)
        return {"backlog": backlog, "running": counts.get("running", 0),
                "workers": len(self._workers), "latency_ms_p50": pick(0.5),
                "latency_ms_p95": pick(0.95), "completed": counts.get("completed", 0),
                "cache_hits": counts.get("cache_hits", 0), "restarts": counts.get("restarts", 0)}

    def close(self) -> None:
        """Stop every worker and its children, and wait until they are gone; idempotent.

        Calls already under way return SystemError results; queued ones return at once.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle_now = self._pending == 0
        self._pool.shutdown(wait=False)
        for worker in self._workers:
            worker.retire()
        if idle_now:
            self._release_all()
        _live.discard(self)

    def _release_all(self) -> None:
        for worker in self._workers:
            worker.release()

    def _enter(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("Sandbox is closed")
            self._pending += 1

    def _leave(self) -> None:
        with self._lock:
            self._pending -= 1
            last = self._closed and self._pending == 0
        if last:  # the last call of a closed sandbox: nobody reads the pipes any more
            self._release_all()

    def _execute(self, code: str, timeout_ms: int | None,
                 history: tuple[str, ...] = ()) -> ExecResult:
        start = time.perf_counter()
        timeout = self.cfg.timeout_ms if timeout_ms is None else timeout_ms
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 < timeout <= 3600000:
            raise ValueError(f"timeout_ms: expected an integer in [1, 3600000], got {timeout_ms!r}")
        if self._closed:
            return _closed_result(start)
        cfg = self.cfg
        deterministic = True
        for block in (*history, code):
            checked = verdict(block, cfg.whitelist, cfg.max_code_bytes, cfg.max_nesting,
                              cfg.max_literal_len)
            if isinstance(checked, ExecResult):
                return _with_duration(checked, start)
            deterministic = deterministic and checked
        key = (code, timeout, history) if cfg.cache_size and deterministic else None
        hit = self._cache_get(key)
        if hit is not None:
            return _with_duration(hit, start, cached=True)
        result = self._dispatch(code, timeout, list(history), start)
        if key is not None and result.error not in ("TimeoutError", "SystemError", "SandboxError"):
            self._cache_put(key, result)
        return result

    def _dispatch(self, code: str, timeout_ms: int, history: list[str],
                  start: float) -> ExecResult:
        worker = self._idle.acquire()
        self._bump("running", 1)
        try:
            result = self._attempt(worker, code, timeout_ms, history, start)
        finally:
            self._bump("running", -1)
            self._idle.release(worker)  # even when closed: callers queued behind it must finish
        with self._lock:
            self._latencies.append(result.duration_ms)
            self._counts["completed"] += 1
        return result

    def _attempt(self, worker: Worker, code: str, timeout_ms: int, history: list[str],
                 start: float) -> ExecResult:
        """Run on `worker`, replacing it when it dies; a snippet that never reached a clean
        process is run once more on the replacement."""
        retried = False
        while True:
            if self._closed:
                return _closed_result(start)
            try:
                report = worker.execute(code, timeout_ms, history)
            except WorkerDied as err:
                self._replace(worker)
                if not err.started and not retried:
                    retried = True
                    continue
                return failure("TimeoutError" if "deadline" in str(err) else "SystemError",
                               f"the sandbox worker stopped responding ({err})",
                               (time.perf_counter() - start) * 1e3)
            if report.get("retire"):  # the worker lost its clean template: start a new one
                self._replace(worker)
                if report.get("started") is False and not retried:
                    retried = True
                    continue
            return classify(report, timeout_ms, (time.perf_counter() - start) * 1e3)

    def _replace(self, worker: Worker) -> None:
        """Restart a dead worker in place so the pool keeps serving."""
        worker.kill()
        if self._closed:
            return
        self._bump("restarts", 1)
        try:
            worker.spawn()
            worker.wait_ready()
        except (WorkerDied, OSError) as err:
            if not self._closed:
                log.error("could not restart a sandbox worker: %s", err)

    def _bump(self, name: str, delta: int) -> None:
        with self._lock:
            self._counts[name] += delta

    def _cache_get(self, key: tuple | None) -> ExecResult | None:
        if key is None:
            return None
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self._counts["cache_hits"] += 1
            return hit

    def _cache_put(self, key: tuple, result: ExecResult) -> None:
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self.cfg.cache_size:
                self._cache.popitem(last=False)


def _closed_result(start: float) -> ExecResult:
    return failure("SystemError", "the sandbox was closed before the snippet finished",
                   (time.perf_counter() - start) * 1e3)


def _with_duration(result: ExecResult, start: float, cached: bool = False) -> ExecResult:
    elapsed_ms = (time.perf_counter() - start) * 1e3
    return dataclasses.replace(result, duration_ms=elapsed_ms, cached=cached)
