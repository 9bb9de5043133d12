"""What runs inside each child: lock down, run the snippet, report in the bounded format."""

from __future__ import annotations

import builtins
import dataclasses
import fcntl
import mmap
import os
import resource
import signal
import sys
import time
import traceback

from agentic_jax.sandbox import isolation, syscalls
from agentic_jax.sandbox.protocol import encode_result, read_request
from agentic_jax.sandbox.validator import FORBIDDEN_NAMES

RESULT_FD = 3
CODE_FD = 4
_RESERVE_BYTES = 1 << 20
_HIGH_FD = 64  # received descriptors are moved above the targets before the dup2 sequence
# The child's whole environment. Numeric libraries loaded lazily inside a snippet (SciPy's
# OpenBLAS through sympy.lambdify, say) read their thread count from it: without these
# settings they try to start one thread per CPU, which the sandbox forbids, and exit.
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
             "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1", "LC_ALL": "C.UTF-8"}


@dataclasses.dataclass
class ChildPlan:
    """Everything the child needs, prepared by the worker before the template is forked.

    memory_bytes is the absolute RLIMIT_AS: the worker's mapped size plus the snippet budget.
    uid/gid are None when privileges cannot be dropped; seccomp is None without libseccomp.
    Where the worker has a memory cgroup, the child is born in it (see `cgroup`).
    """

    memory_bytes: int
    file_bytes: int
    open_files: int
    uid: int | None
    gid: int | None
    seccomp: syscalls.SeccompProgram | None
    whitelist: frozenset[str]


@dataclasses.dataclass
class Prepared:
    """Per-process state every child needs, built once in the worker before the template is
    forked (so that no child pays for it): restricted builtins and a memory reserve (address
    space only, released on MemoryError so that reporting can allocate)."""

    builtins: dict
    reserve: mmap.mmap


def prepare(plan: ChildPlan) -> Prepared:
    """Set up the calling (serving) process so that its forks start as children need: the
    child environment, text streams on fds 1 and 2, builtins; returns what run_child uses."""
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    sys.stdin = None
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                      closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                      closefd=False)
    scope_builtins = _restricted_builtins(plan.whitelist)
    exec(compile("pass", "<warmup>", "exec"), {"__builtins__": scope_builtins})  # noqa: S102
    return Prepared(scope_builtins, mmap.mmap(-1, _RESERVE_BYTES))


def run_child(plan: ChildPlan, prepared: Prepared, workdir: str, fds: list[int]) -> None:
    """Never returns: isolates the process, waits for a request on the code pipe, executes
    it, writes the result and exits. fds: code (read end), stdout, stderr, result.

    The child is forked ahead of the request, so isolation and the copy-on-write faults of
    warming up the interpreter state are paid off the latency path.
    """
    try:
        _isolate(plan, workdir, fds)
        scope_builtins, reserve = prepared.builtins, prepared.reserve
    except BaseException as err:  # a setup failure must never run the code unconfined
        message = encode_result("SandboxError", f"setup failed: {err}", 0.0)
        # The original descriptor is open until the closerange that follows its dup to fd 3.
        for fd in (RESULT_FD, fds[3]):
            try:
                os.write(fd, message)
                break
            except OSError:
                continue
        os._exit(70)
    status = 0
    try:
        code, timeout_ms, history = read_request(CODE_FD)
        budget_ms = timeout_ms * (1 + len(history))
        cpu_seconds = max(1, -(-budget_ms // 1000))
        # Lowering the hard limit needs no privilege; the code cannot raise it back.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        error, detail, exec_ms = _execute(code, history, scope_builtins, reserve)
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(RESULT_FD, encode_result(error, detail, exec_ms))
    except BaseException:
        status = 71
    # Closing first lets the worker see end-of-output before the slow address-space teardown.
    os.closerange(1, RESULT_FD + 1)
    os._exit(status)


def _isolate(plan: ChildPlan, workdir: str, fds: list[int]) -> None:
    """Order matters: fds and limits while privileged, then drop identity, then seccomp."""
    os.setsid()
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)  # the parent is the server
    syscalls.set_process_name("sandbox-child")
    code_fd, out_fd, err_fd, result_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD, _HIGH_FD) for fd in fds)
    for source, target in ((out_fd, 1), (err_fd, 2), (result_fd, RESULT_FD), (code_fd, CODE_FD)):
        os.dup2(source, target)
    os.close(0)
    os.closerange(CODE_FD + 1, 1 << 20)
    os.chdir(workdir)
    os.umask(0o077)
    isolation.apply_snippet_limits(plan.memory_bytes, plan.file_bytes, plan.open_files)
    if plan.uid is not None and plan.gid is not None:
        isolation.drop_privileges(plan.uid, plan.gid)
    if plan.seccomp is not None:
        plan.seccomp.install()


def _execute(code: str, history: list[str], scope_builtins: dict,
             reserve: mmap.mmap) -> tuple[str | None, str, float]:
    """Run the earlier blocks of a session (output discarded), then the snippet, in one fresh
    namespace. Returns (error name or None, detail, milliseconds the snippet itself ran)."""
    scope = {"__name__": "__main__", "__builtins__": scope_builtins}
    for number, block in enumerate(history, 1):
        with _discarded_output():
            outcome = _run_block(block, scope, reserve)
        if outcome[0] is not None:
            return outcome[0], f"while replaying earlier block {number}: {outcome[1]}", 0.0
    return _run_block(code, scope, reserve)


def _run_block(code: str, scope: dict, reserve: mmap.mmap) -> tuple[str | None, str, float]:
    start = time.perf_counter()
    try:
        exec(compile(code, "<snippet>", "exec"), scope)  # noqa: S102 - this is the sandbox
    except SystemExit as stop:
        if stop.code not in (None, 0):
            return _report(stop, start)
    except MemoryError:
        scope.clear()
        reserve.close()  # frees address space so that reporting can allocate
        return "MemoryError", "ran out of memory", (time.perf_counter() - start) * 1e3
    except BaseException as err:
        return _report(err, start)
    return None, "", (time.perf_counter() - start) * 1e3


class _discarded_output:
    """Send fds 1 and 2 (and Python's streams) to /dev/null for the duration."""

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for saved, target in zip(self.saved, (1, 2)):
            os.dup2(saved, target)
            os.close(saved)


def _report(err: BaseException, start: float) -> tuple[str, str, float]:
    elapsed = (time.perf_counter() - start) * 1e3
    last = traceback.format_exception_only(type(err), err)[-1].strip()
    detail = last.split(": ", 1)[1] if ": " in last else last
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if f.filename == "<snippet>"]
    if lines:
        detail += f" (line {lines[-1]})"
    return type(err).__name__, detail, elapsed


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
