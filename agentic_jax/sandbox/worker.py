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
import socket
import subprocess
import sys
import threading
import time

from agentic_jax.sandbox import cgroup
from agentic_jax.sandbox.channel import (Channel, PreparedChild, drain, ready, unread,
                                         write_all)
from agentic_jax.sandbox.child import CHILD_ENV
from agentic_jax.sandbox.output import OutputCapture
from agentic_jax.sandbox.protocol import RESULT_CAP, ChannelClosed, decode_result, encode_request
from agentic_jax.sandbox.scratch import remove_tree
from agentic_jax.sandbox.server import PREPARED_AHEAD
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
        self._channel: Channel | None = None
        self._scratch: str | None = None
        self._cgroup: str | None = None

    def spawn(self) -> None:
        """Start the process without waiting for it to become ready (owner only)."""
        self.release()
        with self._lock:
            if self._retired:
                raise WorkerDied("the sandbox is closed")
            self._cgroup = cgroup.create()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            payload = {"channel_fd": theirs.fileno(), "whitelist": list(self.cfg.whitelist),
                       "memory_mb": self.cfg.memory_mb,
                       "disk_mb": self.cfg.disk_mb, "max_open_files": self.cfg.max_open_files,
                       "max_output_bytes": self.cfg.max_output_bytes,
                       "uid": self.cfg.sandbox_uid, "gid": self.cfg.sandbox_gid,
                       "grace_ms": self.cfg.grace_ms, "cgroup": self._cgroup}
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-c", _BOOT, _PACKAGE_ROOT, json.dumps(payload)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, env=_WORKER_ENV, cwd="/",
                    start_new_session=True, pass_fds=(theirs.fileno(),))
            finally:
                theirs.close()
            self._channel = Channel(ours)

    def wait_ready(self) -> None:
        """Block until the worker has warmed up; raises WorkerDied if it fails to start."""
        try:
            hello = self._channel.receive(time.monotonic() + STARTUP_TIMEOUT_S)
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
        """Run one snippet on the next prepared child; returns the report (see
        `output.classify`). Raises WorkerDied (worker killed or hung).

        The report's "started" is False when the worker knows the code never ran.
        """
        if not self.alive:
            raise WorkerDied("sandbox worker is not running", False)
        budget_s = timeout_ms * (1 + len(history)) / 1e3
        deadline = time.monotonic() + budget_s + self.cfg.grace_ms / 1e3
        # A prepared child that died before its code reached it (killed, say) never ran
        # anything: the next one takes the request. The server replaces each one it reaps.
        for _ in range(PREPARED_AHEAD + 1):
            try:
                child = self._channel.next_child(deadline)
            except (ChannelClosed, OSError) as err:
                self.kill()
                raise WorkerDied(str(err), False) from err
            if isinstance(child, str):
                return {"fault": child, "started": False, "retire": True}
            try:
                report = self._run_on(child, code, timeout_ms, history, budget_s, deadline)
            except (ChannelClosed, OSError) as err:
                # The worker is gone. A request that no child took in full never ran (the
                # server died, taking the children with it, before one read it): the caller
                # runs it on the replacement.
                started = child.delivered and not unread(child.code_fd)
                self.kill()
                raise WorkerDied(str(err), started) from err
            finally:
                child.close()
            if report is not None:
                return report
        return {"fault": "every prepared child was gone before its code reached it",
                "started": False, "retire": True}

    def _run_on(self, child: PreparedChild, code: str, timeout_ms: int, history: list[str],
                budget_s: float, deadline: float) -> dict | None:
        """The report of the snippet on ``child``; None when the child died before it read its
        code (so ran nothing)."""
        start = time.monotonic()
        request = encode_request(code, timeout_ms, history)
        if not write_all(child.code_fd, request, deadline):  # gone, or not reading at all
            self._channel.send({"done": child.seq})
            return None
        child.delivered = True
        self._channel.send({"start": child.seq, "timeout_ms": int(budget_s * 1e3)})
        captures = [OutputCapture(self.cfg.max_output_bytes),
                    OutputCapture(self.cfg.max_output_bytes), OutputCapture(2 * RESULT_CAP)]
        if not drain(child.out_fds, captures, deadline):
            raise ChannelClosed("deadline passed")
        late = time.monotonic() - start >= budget_s
        self._channel.send({"done": child.seq})
        parsed = decode_result(bytes(captures[2].head), captures[2].total)
        status = {}
        if parsed is None or late:  # only the exit status can tell what happened
            status = self._channel.exit_of(child.seq, deadline)
        if parsed is None and not status.get("timed_out") and unread(child.code_fd):
            return None  # it died (was killed) before it had read its code
        return {"stdout": captures[0].text(), "stderr": captures[1].text(), "result": parsed,
                "timed_out": bool(status.get("timed_out")), "signal": status.get("signal"),
                "exit_code": status.get("exit_code"),
                "out_of_memory": bool(status.get("out_of_memory")),
                "exec_ms": parsed["exec_ms"] if parsed else (time.monotonic() - start) * 1e3}

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
        """Close the channel of a killed worker (owner only, or when no call can be running)."""
        with self._lock:
            self._kill_locked()
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _kill_locked(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if self._server_pidfd is None and proc.poll() is None:
            # Started but not yet ready (a close during a restart): find its serving process
            # now, so that the kill below waits for it too.
            self._server_pidfd = _open_server_pidfd(proc)
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
            ready(self._server_pidfd, select.POLLIN, _EXIT_WAIT_S)
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
