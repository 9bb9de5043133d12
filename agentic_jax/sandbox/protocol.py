"""Newline-delimited JSON over pipes between the host and its workers (never pickle)."""

from __future__ import annotations

import json
import os
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
