"""What runs inside the forked child: lock itself down, run the snippet, report as JSON."""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import resource
import signal
import sys
import time
import traceback

from agentic_jax.sandbox import isolation, syscalls
from agentic_jax.sandbox.validator import FORBIDDEN_NAMES

RESULT_FD = 3
CODE_FD = 4
_RESERVE_BYTES = 1 << 20


@dataclasses.dataclass
class ChildPlan:
    """Everything the child needs, prepared by the worker before forking.

    memory_bytes is the absolute RLIMIT_AS: the worker's mapped size plus the snippet budget.
    uid/gid are None when privileges cannot be dropped; seccomp is None without libseccomp.
    """

    workdir: str
    memory_bytes: int
    file_bytes: int
    open_files: int
    uid: int | None
    gid: int | None
    seccomp: syscalls.SeccompProgram | None
    whitelist: frozenset[str]


def run_child(plan: ChildPlan, code_fd: int, out_fd: int, err_fd: int, result_fd: int) -> None:
    """Never returns: isolates the process, waits for a request on `code_fd`, executes it,
    writes the result and exits.

    The child is forked ahead of the request, so isolation and the copy-on-write faults of
    warming up the interpreter state are paid off the latency path.
    """
    try:
        _isolate(plan, code_fd, out_fd, err_fd, result_fd)
        scope_builtins = _restricted_builtins(plan.whitelist)
        exec(compile("pass", "<warmup>", "exec"), {"__builtins__": scope_builtins})  # noqa: S102
    except BaseException as err:  # a setup failure must never run the code unconfined
        message = json.dumps({"error": "SandboxError", "detail": f"setup failed: {err}"})
        # The original descriptor is open until the closerange that follows its dup to fd 3.
        for fd in (result_fd, RESULT_FD):
            try:
                os.write(fd, message.encode())
                break
            except OSError:
                continue
        os._exit(70)
    status = 0
    try:
        request = json.loads(_read_all(CODE_FD))
        cpu_seconds = max(1, -(-int(request["timeout_ms"]) // 1000))
        # Lowering the hard limit needs no privilege; the code cannot raise it back.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        report = _execute(str(request["code"]), scope_builtins)
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(RESULT_FD, json.dumps(report).encode())
    except BaseException:
        status = 71
    # Closing first lets the worker see end-of-output before the slow address-space teardown.
    os.closerange(1, RESULT_FD + 1)
    os._exit(status)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _isolate(plan: ChildPlan, code_fd: int, out_fd: int, err_fd: int, result_fd: int) -> None:
    """Order matters: fds and limits while privileged, then drop identity, then seccomp."""
    os.setsid()
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    for source, target in ((out_fd, 1), (err_fd, 2), (result_fd, RESULT_FD), (code_fd, CODE_FD)):
        os.dup2(source, target)
    os.close(0)
    os.closerange(CODE_FD + 1, 1 << 20)
    os.chdir(plan.workdir)
    os.umask(0o077)
    os.environ.clear()
    sys.stdin = None
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                      closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                      closefd=False)
    isolation.apply_snippet_limits(plan.memory_bytes, plan.file_bytes, plan.open_files)
    if plan.uid is not None and plan.gid is not None:
        isolation.drop_privileges(plan.uid, plan.gid)
    if plan.seccomp is not None:
        plan.seccomp.install()


def _execute(code: str, scope_builtins: dict) -> dict:
    """Run the snippet in fresh globals; returns {"error", "detail", "exec_ms"}."""
    reserve = bytearray(_RESERVE_BYTES)  # freed on MemoryError so reporting can allocate
    scope = {"__name__": "__main__", "__builtins__": scope_builtins}
    start = time.perf_counter()
    try:
        exec(compile(code, "<snippet>", "exec"), scope)  # noqa: S102 - this is the sandbox
    except SystemExit as stop:
        if stop.code not in (None, 0):
            return _report(stop, start)
    except MemoryError:
        del reserve
        return {"error": "MemoryError", "detail": "ran out of memory",
                "exec_ms": (time.perf_counter() - start) * 1e3}
    except BaseException as err:
        del reserve
        return _report(err, start)
    return {"error": None, "detail": "", "exec_ms": (time.perf_counter() - start) * 1e3}


def _report(err: BaseException, start: float) -> dict:
    elapsed = (time.perf_counter() - start) * 1e3
    last = traceback.format_exception_only(type(err), err)[-1].strip()
    detail = last.split(": ", 1)[1] if ": " in last else last
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if f.filename == "<snippet>"]
    if lines:
        detail += f" (line {lines[-1]})"
    return {"error": type(err).__name__, "detail": detail, "exec_ms": elapsed}


def _restricted_builtins(whitelist: frozenset[str]) -> dict:
    """Builtins without the escape hatches, with an import hook that enforces the whitelist."""
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name.split(".")[0] not in whitelist:
            raise ImportError(f"module {name!r} is not in the whitelist")
        return real_import(name, globals, locals, fromlist, level)

    allowed = {k: v for k, v in vars(builtins).items() if k not in FORBIDDEN_NAMES}
    allowed["__import__"] = guarded_import
    return allowed
