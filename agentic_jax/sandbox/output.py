"""Result hygiene: capped head+tail output capture, path scrubbing, and the error taxonomy
applied to what a worker reports about one snippet."""

from __future__ import annotations

import re
import signal

from agentic_jax.sandbox.types import ExecResult, failure

# Directory parts of absolute paths (host layout is nobody's business but the host's).
_HOST_PATH = re.compile(r"(?<![\w.])/(?:[\w.+@-]+/)+")


class OutputCapture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.head_cap = limit - limit // 2
        self.tail_cap = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            # Trim lazily so a flood costs amortised O(1) per byte.
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[:len(self.tail) - self.tail_cap]

    def text(self) -> str:
        tail = self.tail[-self.tail_cap:] if self.tail_cap else b""
        dropped = self.total - len(self.head) - len(tail)
        if dropped <= 0:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        marker = f"\n...[output truncated: {dropped} bytes omitted]...\n".encode()
        return (bytes(self.head) + marker + bytes(tail)).decode("utf-8", "replace")


def scrub_paths(text: str) -> str:
    """Remove directory components of absolute paths, keeping the file name."""
    return _HOST_PATH.sub("", text)


def classify(report: dict, timeout_ms: int, duration_ms: float) -> ExecResult:
    """Turn a worker's report about one child into an `ExecResult`.

    report keys: stdout, stderr (str), result (the child's decoded report or None), timed_out
    (bool), signal (int | None), exit_code (int | None), out_of_memory (the memory cgroup
    killed it), exec_ms (float); or fault (str): the worker could not run the snippet at all.
    """
    common = {"duration_ms": duration_ms, "stdout": report.get("stdout", ""),
              "stderr": report.get("stderr", ""), "exec_ms": float(report.get("exec_ms", 0.0))}
    if report.get("fault"):
        return failure("SystemError", str(report["fault"]), **common)
    sig = report.get("signal")
    if report.get("timed_out") or sig == signal.SIGXCPU:
        return failure("TimeoutError", f"exceeded the {timeout_ms} ms time limit", **common)
    result = report.get("result")
    if isinstance(result, dict) and ("error" in result):
        error = result.get("error")
        if error is None:
            return ExecResult(ok=True, **common)
        detail = scrub_paths(str(result.get("detail", "")))[:500]
        return failure(str(error)[:100], detail or "raised without a message", **common)
    if report.get("out_of_memory") or (sig is not None and "MemoryError" in common["stderr"]):
        return failure("MemoryError", "ran out of memory", **common)
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return failure("SystemError", f"the process died with {name}", **common)
    return failure("SystemError", f"the process exited with status {report.get('exit_code')} "
                   "without a result", **common)
