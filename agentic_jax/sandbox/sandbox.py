"""The public `Sandbox`: a pool of warm workers behind validation, a cache and a thread pool."""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time
import weakref

from agentic_jax.sandbox.output import classify
from agentic_jax.sandbox.types import ExecResult, SandboxConfig, failure
from agentic_jax.sandbox.validator import is_deterministic, validate
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
    because of the code they run.
    """

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self._lock = threading.Lock()
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
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
                self._idle.put(worker)
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

    def run(self, code: str, timeout_ms: int | None = None) -> ExecResult:
        """Execute one snippet with the configured limits (timeout_ms overrides the timeout)."""
        self._enter()
        try:
            return self._execute(code, timeout_ms)
        finally:
            self._leave()

    def submit(self, code: str, timeout_ms: int | None = None
               ) -> concurrent.futures.Future[ExecResult]:
        """Queue a snippet on the host thread pool; the future resolves to its ExecResult."""
        self._enter()
        try:
            future = self._pool.submit(self._execute, code, timeout_ms)
        except RuntimeError:
            self._leave()
            raise RuntimeError("Sandbox is closed") from None
        future.add_done_callback(lambda _: self._leave())
        return future

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
        """Stop every worker and its children; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in self._workers:
            worker.kill()
        _live.discard(self)

    def _enter(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("Sandbox is closed")
            self._pending += 1

    def _leave(self) -> None:
        with self._lock:
            self._pending -= 1

    def _execute(self, code: str, timeout_ms: int | None) -> ExecResult:
        start = time.perf_counter()
        timeout = self.cfg.timeout_ms if timeout_ms is None else timeout_ms
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 < timeout <= 3600000:
            raise ValueError(f"timeout_ms: expected an integer in [1, 3600000], got {timeout_ms!r}")
        cfg = self.cfg
        checked = validate(code, cfg.whitelist, cfg.max_code_bytes, cfg.max_nesting,
                           cfg.max_literal_len)
        if isinstance(checked, ExecResult):
            return _with_duration(checked, start)
        key = (code, timeout) if cfg.cache_size and is_deterministic(checked) else None
        hit = self._cache_get(key)
        if hit is not None:
            return _with_duration(hit, start, cached=True)
        result = self._dispatch(code, timeout, start)
        if key is not None and result.error not in ("TimeoutError", "SystemError", "SandboxError"):
            self._cache_put(key, result)
        return result

    def _dispatch(self, code: str, timeout_ms: int, start: float) -> ExecResult:
        worker = self._idle.get()
        self._bump("running", 1)
        try:
            report = worker.execute(code, timeout_ms)
            result = classify(report, timeout_ms, (time.perf_counter() - start) * 1e3)
        except WorkerDied as err:
            result = failure("TimeoutError" if "deadline" in str(err) else "SystemError",
                             f"the sandbox worker stopped responding ({err})",
                             (time.perf_counter() - start) * 1e3)
            self._replace(worker)
        finally:
            self._bump("running", -1)
            self._idle.put(worker)
        with self._lock:
            self._latencies.append(result.duration_ms)
            self._counts["completed"] += 1
        return result

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


def _with_duration(result: ExecResult, start: float, cached: bool = False) -> ExecResult:
    elapsed_ms = (time.perf_counter() - start) * 1e3
    return dataclasses.replace(result, duration_ms=elapsed_ms, cached=cached)
