"""What crosses process boundaries besides the channel's messages: the error type of a broken
channel, the framed request a child reads and its bounded result format (never pickle)."""

from __future__ import annotations

import os
import re
import struct


class ChannelClosed(Exception):
    """The other end closed the pipe, sent garbage, or missed the deadline."""


# A request on the code pipe: its length, then the timeout, the number of blocks and each block
# (the session's earlier blocks, then the snippet) as its length and UTF-8 text. The child reads
# exactly that much, so the host need not close its end for the child to see the end, and can
# still count the bytes the child left unread after it died (a child that died with its code
# unread ran nothing). Decoding it takes a fresh child a few struct calls, where JSON's decoder
# (its first call in a process forked from the template) costs a few hundred microseconds.
_LENGTH = struct.Struct("<Q")
_HEAD = struct.Struct("<II")  # timeout_ms, blocks


def encode_request(code: str, timeout_ms: int, history: list[str]) -> bytes:
    """Host side: the framed request."""
    parts = [_HEAD.pack(timeout_ms, len(history) + 1)]
    for block in (*history, code):
        data = block.encode("utf-8", "surrogatepass")
        parts += (_LENGTH.pack(len(data)), data)
    body = b"".join(parts)
    return _LENGTH.pack(len(body)) + body


def read_request(fd: int) -> tuple[str, int, list[str]]:
    """Child side: (code, timeout_ms, history) of the request framed by `encode_request`
    (EOFError if the pipe ends first)."""
    (length,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size))
    body = _read_exactly(fd, length)
    timeout_ms, count = _HEAD.unpack_from(body)
    blocks, at = [], _HEAD.size
    for _ in range(count):
        (size,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        blocks.append(body[at:at + size].decode("utf-8", "surrogatepass"))
        at += size
    return blocks[-1], timeout_ms, blocks[:-1]


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            raise EOFError(f"the request ended {left} bytes short")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


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
