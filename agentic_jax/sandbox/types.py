"""Configuration, results and the error taxonomy shared by every sandbox module."""

from __future__ import annotations

import dataclasses
import os
import re

from agentic_jax.errors import UserError

# Fix hints of the error taxonomy; `ExecResult.message` is "<what happened>; <hint>".
HINTS: dict[str, str] = {
    "ImportError": "add it to environment.whitelist if it is safe",
    "TimeoutError": "raise environment.timeout or simplify the computation",
    "MemoryError": "raise environment.memory_limit or avoid large intermediates",
    "SecurityError": "the sandbox forbids it; rewrite the code without it",
    "SystemError": "the interpreter crashed; avoid native-level tricks",
}

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits and pool settings of a `Sandbox`.

    timeout_ms: wall-clock budget of one snippet (the child is killed after it).
    memory_mb: address space a snippet may allocate beyond what the warm worker already maps.
    whitelist: top-level modules a snippet may import; the workers import them at start.
    num_workers: warm worker processes (None: CPU count); also the host thread-pool size.
    max_output_bytes: stdout/stderr kept per snippet (head and tail halves).
    cache_size: results kept for repeated deterministic snippets (0 disables the cache).
    disk_mb: size of the private writable scratch directory and the largest file.
    max_open_files: file descriptors a snippet may hold.
    max_code_bytes: longest accepted source text.
    max_nesting: deepest nesting of loops, functions, classes and comprehensions.
    max_literal_len: longest string/bytes literal and most elements in one literal display.
    sandbox_uid / sandbox_gid: unprivileged ids the snippet runs as when the host is root.
    grace_ms: extra time the host waits for a worker before declaring it hung.
    stateful: `Sandbox.session()` blocks share one namespace (earlier successful blocks are
        replayed in each fresh child); off, every block runs on its own.
    """

    timeout_ms: int = 500
    memory_mb: int = 100
    whitelist: tuple[str, ...] = ("sympy", "numpy", "math")
    num_workers: int | None = None
    max_output_bytes: int = 16384
    cache_size: int = 4096
    disk_mb: int = 16
    max_open_files: int = 64
    max_code_bytes: int = 65536
    max_nesting: int = 16
    max_literal_len: int = 100_000
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    grace_ms: int = 3000
    stateful: bool = False

    def __post_init__(self) -> None:
        whitelist = self.whitelist
        if isinstance(whitelist, str) or not all(isinstance(m, str) for m in whitelist):
            raise UserError("SandboxConfig.whitelist: expected a sequence of module names, "
                            f"got {whitelist!r}")
        for name in whitelist:
            if not _MODULE_NAME.match(name):
                raise UserError(f"SandboxConfig.whitelist: {name!r} is not a top-level "
                                "module name")
        object.__setattr__(self, "whitelist", tuple(dict.fromkeys(whitelist)))
        _check_int("timeout_ms", self.timeout_ms, 1, 3_600_000)
        _check_int("memory_mb", self.memory_mb, 8, 1 << 20)
        if self.num_workers is not None:
            _check_int("num_workers", self.num_workers, 1, 1024)
        _check_int("max_output_bytes", self.max_output_bytes, 64, 1 << 30)
        _check_int("cache_size", self.cache_size, 0, 1 << 24)
        _check_int("disk_mb", self.disk_mb, 1, 1 << 20)
        _check_int("max_open_files", self.max_open_files, 16, 1 << 20)
        _check_int("max_code_bytes", self.max_code_bytes, 1, 1 << 26)
        _check_int("max_nesting", self.max_nesting, 1, 200)
        _check_int("max_literal_len", self.max_literal_len, 1, 1 << 30)
        _check_int("sandbox_uid", self.sandbox_uid, 1, (1 << 32) - 2)
        _check_int("sandbox_gid", self.sandbox_gid, 1, (1 << 32) - 2)
        _check_int("grace_ms", self.grace_ms, 100, 600_000)
        if not isinstance(self.stateful, bool):
            raise UserError(f"SandboxConfig.stateful: expected a bool, got {self.stateful!r}")

    @property
    def workers(self) -> int:
        """Resolved worker count."""
        return self.num_workers or os.cpu_count() or 1


def _check_int(field: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UserError(f"SandboxConfig.{field}: expected an integer in [{low}, {high}], "
                        f"got {value!r}")


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """Outcome of one snippet.

    ok: ran to completion within limits. stdout: captured output (head + tail when too long).
    error: taxonomy name or the class name of the exception the code raised; None when ok.
    message: one-line explanation plus the fix hint. duration_ms: wall time of the call.
    stderr: captured warnings and native-library output. exec_ms: time the code itself ran
    inside the sandbox. cached: served from the execution cache.
    """

    ok: bool
    stdout: str = ""
    error: str | None = None
    message: str = ""
    duration_ms: float = 0.0
    stderr: str = ""
    exec_ms: float = 0.0
    cached: bool = False


def failure(error: str, what: str, duration_ms: float = 0.0, **fields: object) -> ExecResult:
    """An unsuccessful result whose message is `what` followed by the taxonomy hint."""
    hint = HINTS.get(error)
    message = f"{error}: {what}" + (f"; {hint}" if hint else "")
    return ExecResult(ok=False, error=error, message=message, duration_ms=duration_ms, **fields)
