"""Newline-delimited JSON over pipes between the host and its workers (never pickle)."""

from __future__ import annotations

import json
import os
import re
import select
import time

MAX_LINE_BYTES = 1 << 24


class ChannelClosed(Exception):
    """The other end closed the pipe, sent garbage, or missed the deadline."""


def send_json(fd: int, message: dict) -> None:
    """Write one JSON object as a line; NaN/inf are refused so the reader never sees them."""
    data = (json.dumps(message, allow_nan=False, separators=(",", ":")) + "\n").encode()
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except (BrokenPipeError, OSError) as err:
        raise ChannelClosed(f"write failed: {err}") from err


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name} in message")


class JsonLineReader:
    """Reads JSON lines from a file descriptor with an optional deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def read(self, deadline: float | None = None) -> dict:
        """Next message; raises ChannelClosed on EOF, bad JSON, oversize or past `deadline`
        (a time.monotonic() value)."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                return self._decode(line)
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ChannelClosed("message too long")
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                    raise ChannelClosed("deadline passed")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise ChannelClosed("end of stream")
            self._buffer += chunk

    @staticmethod
    def _decode(line: bytes) -> dict:
        try:
            message = json.loads(line, parse_constant=_reject_constant)
        except ValueError as err:
            raise ChannelClosed(f"malformed message: {err}") from err
        if not isinstance(message, dict):
            raise ChannelClosed("message is not an object")
        return message


# The child's report on its result descriptor: a fixed header line, then three fields, parsed
# without recursion and with every field bounded (the snippet can write anything there).
RESULT_MAGIC = "agentic-jax-result-1"
RESULT_CAP = 1 << 16
_ERROR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")
_MAX_DETAIL = 2000


def encode_result(error: str | None, detail: str, exec_ms: float) -> bytes:
    """Child side: the report as bytes (error None means the code ran to completion)."""
    text = f"{RESULT_MAGIC}\n{exec_ms:.6f}\n{error or ''}\n{detail[:_MAX_DETAIL]}"
    return text.encode("utf-8", "backslashreplace")


def decode_result(data: bytes, total: int) -> dict | None:
    """Host side: {"error", "detail", "exec_ms"} or None when the report is not well formed.

    total: bytes the child wrote in all (more than RESULT_CAP means it was not a report).
    """
    if total > RESULT_CAP:
        return None
    parts = data.decode("utf-8", "replace").split("\n", 3)
    if len(parts) != 4 or parts[0] != RESULT_MAGIC:
        return None
    try:
        exec_ms = float(parts[1])
    except ValueError:
        return None
    error = parts[2] or None
    if not 0 <= exec_ms < 1e9 or (error is not None and not _ERROR_NAME.fullmatch(error)):
        return None
    return {"error": error, "detail": parts[3][:_MAX_DETAIL], "exec_ms": exec_ms}
