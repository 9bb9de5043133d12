"""Host-side handle on one zygote process: start, send a snippet, detect death, kill.

Thread safety: one owner thread at a time calls spawn/wait_ready/execute/release (the pool
hands a worker to one caller); kill and retire may come from any thread at any moment. They
only signal and reap, and never close a descriptor the owner may be reading, so a descriptor
number can never be reused under a reader (which could misattribute a result).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from agentic_jax.sandbox import cgroup
from agentic_jax.sandbox.child import CHILD_ENV
from agentic_jax.sandbox.protocol import ChannelClosed, JsonLineReader, send_json
from agentic_jax.sandbox.scratch import remove_tree
from agentic_jax.sandbox.types import SandboxConfig

_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from agentic_jax.sandbox.zygote import main; main(sys.argv[2])")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The worker's whole environment: no host variables reach it or its children. One thread per
# numeric library, because extra BLAS threads break fork and multiply the address space.
_WORKER_ENV = {**CHILD_ENV, "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}
STARTUP_TIMEOUT_S = 120.0
_EXIT_WAIT_S = 10.0


class WorkerDied(Exception):
    """The worker stopped answering (crashed, was killed, or hung past its grace period).

    started: False when the request is known not to have reached the worker.
    """

    def __init__(self, what: str, started: bool = True) -> None:
        super().__init__(what)
        self.started = started


class Worker:
    """One zygote process and the cgroup its snippets run in."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.layers: dict[str, bool] = {}
        self.missing: list[str] = []
        self._lock = threading.Lock()
        self._retired = False
        self._proc: subprocess.Popen | None = None
        self._server_pidfd: int | None = None
        self._reader: JsonLineReader | None = None
        self._scratch: str | None = None
        self._cgroup: str | None = None
        self._streams: list = []

    def spawn(self) -> None:
        """Start the process without waiting for it to become ready (owner only)."""
        self.release()
        with self._lock:
            if self._retired:
                raise WorkerDied("the sandbox is closed")
            self._cgroup = cgroup.create()
            payload = {"whitelist": list(self.cfg.whitelist), "memory_mb": self.cfg.memory_mb,
                       "disk_mb": self.cfg.disk_mb, "max_open_files": self.cfg.max_open_files,
                       "max_output_bytes": self.cfg.max_output_bytes,
                       "uid": self.cfg.sandbox_uid, "gid": self.cfg.sandbox_gid,
                       "grace_ms": self.cfg.grace_ms, "cgroup": self._cgroup}
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT, _PACKAGE_ROOT, json.dumps(payload)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=_WORKER_ENV, cwd="/", start_new_session=True, close_fds=True)
            self._streams = [self._proc.stdin, self._proc.stdout]
            self._reader = JsonLineReader(self._proc.stdout.fileno())

    def wait_ready(self) -> None:
        """Block until the worker has warmed up; raises WorkerDied if it fails to start."""
        try:
            hello = self._reader.read(time.monotonic() + STARTUP_TIMEOUT_S)
        except (ChannelClosed, OSError) as err:
            self.kill()
            raise WorkerDied(f"sandbox worker failed to start: {err}") from err
        self.layers = {k: bool(v) for k, v in hello.get("layers", {}).items()}
        self.missing = list(hello.get("missing", []))
        self._scratch = hello.get("scratch")
        with self._lock:
            self._server_pidfd = _open_server_pidfd(self._proc)

    @property
    def alive(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def execute(self, code: str, timeout_ms: int, history: list[str]) -> dict:
        """Run one snippet; returns the worker's report. Raises WorkerDied (worker killed).

        The report's "started" is False when the worker knows the code never ran.
        """
        if not self.alive:
            raise WorkerDied("sandbox worker is not running")
        budget_ms = timeout_ms * (1 + len(history))
        deadline = time.monotonic() + (budget_ms + self.cfg.grace_ms) / 1e3
        try:
            send_json(self._proc.stdin.fileno(), {"code": code, "timeout_ms": timeout_ms,
                                                  "history": history})
        except (ChannelClosed, OSError, AttributeError) as err:
            self.kill()
            raise WorkerDied(f"request not delivered: {err}", False) from err
        try:
            return self._reader.read(deadline)
        except (ChannelClosed, OSError) as err:
            self.kill()
            raise WorkerDied(str(err)) from err

    def kill(self) -> None:
        """Kill every process of the worker and wait until all are gone (any thread)."""
        with self._lock:
            self._kill_locked()

    def retire(self) -> None:
        """Kill for good: a later spawn raises WorkerDied (any thread)."""
        with self._lock:
            self._retired = True
            self._kill_locked()

    def release(self) -> None:
        """Close the pipes of a killed worker (owner only, or when no call can be running)."""
        with self._lock:
            self._kill_locked()
            for stream in self._streams:
                stream.close()
            self._streams = []

    def _kill_locked(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if self._server_pidfd is not None:
            _signal_pidfd(self._server_pidfd)
        if proc.poll() is None:  # not reaped, so the PID (and its process group) is still ours
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait()
        if self._server_pidfd is not None:
            # The server is PID 1 of the worker's namespace: it ends only after every
            # process inside has ended, so its exit means nothing of the worker is left.
            select.select([self._server_pidfd], [], [], _EXIT_WAIT_S)
            os.close(self._server_pidfd)
            self._server_pidfd = None
        if self._cgroup:
            cgroup.remove(self._cgroup)
            self._cgroup = None
        if self._scratch:
            remove_tree(self._scratch)
            self._scratch = None


def _open_server_pidfd(proc: subprocess.Popen) -> int | None:
    """A pidfd on the worker's serving process (the outer process's only child), if any."""
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            children = [int(p) for p in f.read().split()]
        return os.pidfd_open(children[0]) if len(children) == 1 else None
    except (OSError, ValueError):
        return None


def _signal_pidfd(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except (ProcessLookupError, OSError):
        pass
