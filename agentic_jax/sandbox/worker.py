"""Host-side handle on one zygote process: start, send a snippet, detect death, kill."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from agentic_jax.sandbox.protocol import ChannelClosed, JsonLineReader, send_json
from agentic_jax.sandbox.types import SandboxConfig

_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from agentic_jax.sandbox.zygote import main; main(sys.argv[2])")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The worker's whole environment: no host variables reach it or its children. One thread per
# numeric library, because extra BLAS threads break fork and multiply the address space.
_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMEXPR_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8",
               "PYTHONIOENCODING": "utf-8"}
STARTUP_TIMEOUT_S = 120.0


class WorkerDied(Exception):
    """The worker stopped answering (crashed, was killed, or hung past its grace period)."""


class Worker:
    """One zygote process. Not thread-safe: the pool gives it to one caller at a time."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.layers: dict[str, bool] = {}
        self.missing: list[str] = []
        self._proc: subprocess.Popen | None = None
        self._reader: JsonLineReader | None = None
        self._scratch: str | None = None

    def spawn(self) -> None:
        """Start the process without waiting for it to become ready."""
        payload = {"whitelist": list(self.cfg.whitelist), "memory_mb": self.cfg.memory_mb,
                   "disk_mb": self.cfg.disk_mb, "max_open_files": self.cfg.max_open_files,
                   "max_output_bytes": self.cfg.max_output_bytes, "uid": self.cfg.sandbox_uid,
                   "gid": self.cfg.sandbox_gid}
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOT, _PACKAGE_ROOT, json.dumps(payload)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=_WORKER_ENV, cwd="/", start_new_session=True, close_fds=True)
        self._reader = JsonLineReader(self._proc.stdout.fileno())

    def wait_ready(self) -> None:
        """Block until the worker has warmed up; raises WorkerDied if it fails to start."""
        try:
            hello = self._reader.read(time.monotonic() + STARTUP_TIMEOUT_S)
        except ChannelClosed as err:
            self.kill()
            raise WorkerDied(f"sandbox worker failed to start: {err}") from err
        self.layers = {k: bool(v) for k, v in hello.get("layers", {}).items()}
        self.missing = list(hello.get("missing", []))
        self._scratch = hello.get("scratch")

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def execute(self, code: str, timeout_ms: int) -> dict:
        """Run one snippet; returns the worker's report. Raises WorkerDied (worker killed)."""
        if not self.alive:
            raise WorkerDied("sandbox worker is not running")
        deadline = time.monotonic() + (timeout_ms + self.cfg.grace_ms) / 1e3
        try:
            send_json(self._proc.stdin.fileno(), {"code": code, "timeout_ms": timeout_ms})
            return self._reader.read(deadline)
        except ChannelClosed as err:
            self.kill()
            raise WorkerDied(str(err)) from err

    def kill(self) -> None:
        """Kill the worker's process group (its PID namespace dies with it) and reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            stream.close()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
