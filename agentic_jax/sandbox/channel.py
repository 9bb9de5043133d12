"""Host side of a worker's channel (a Unix SOCK_SEQPACKET pair; messages in `server`) and of
the prepared children it hands over: writing the code, draining the output under a deadline."""

from __future__ import annotations

import array
import collections
import dataclasses
import fcntl
import json
import math
import os
import select
import socket
import termios
import time

from agentic_jax.sandbox.output import OutputCapture
from agentic_jax.sandbox.protocol import ChannelClosed

_MAX_MESSAGE = 1 << 16
_KEPT_EXITS = 16


@dataclasses.dataclass
class PreparedChild:
    """A child waiting for its code: the code pipe's write end, then stdout, stderr, result.

    delivered: the whole request is in the code pipe (whether the child took it, `unread`
    tells)."""

    seq: int
    code_fd: int
    out_fds: list[int]
    delivered: bool = False

    def close(self) -> None:
        if self.code_fd >= 0:
            for fd in (self.code_fd, *self.out_fds):
                os.close(fd)
        self.code_fd, self.out_fds = -1, []


class Channel:
    """Messages to and from one worker's server. Owner thread only."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._prepared: collections.deque[PreparedChild] = collections.deque()
        self._exits: collections.OrderedDict[int, dict] = collections.OrderedDict()
        self._fault: str | None = None

    def send(self, message: dict) -> None:
        try:
            self.sock.send(json.dumps(message).encode())
        except OSError as err:
            raise ChannelClosed(f"write failed: {err}") from err

    def receive(self, deadline: float) -> dict:
        """The next message that is not a prepared child, an exit or a fault (those are
        filed for next_child/exit_of)."""
        while (message := self._receive_one(deadline)) is None:
            pass
        return message

    def _receive_one(self, deadline: float) -> dict | None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not ready(self.sock.fileno(), select.POLLIN, remaining):
            raise ChannelClosed("deadline passed")
        data, fds, _, _ = socket.recv_fds(self.sock, _MAX_MESSAGE, 4)
        if not data:
            raise ChannelClosed("end of stream")
        try:
            message = json.loads(data)
        except ValueError as err:
            raise ChannelClosed(f"malformed message: {err}") from err
        if "child" in message:
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                raise ChannelClosed("a prepared child came without its descriptors")
            self._prepared.append(PreparedChild(int(message["child"]), fds[0], fds[1:]))
            return None
        for fd in fds:
            os.close(fd)
        if "exit" in message:
            self._exits[int(message["exit"])] = message
            while len(self._exits) > _KEPT_EXITS:
                self._exits.popitem(last=False)
        elif "fault" in message:
            self._fault = str(message["fault"])
        else:
            return message
        return None

    def next_child(self, deadline: float) -> PreparedChild | str:
        """The next prepared child, or the server's fault text once it can make no more."""
        while not self._prepared and self._fault is None:
            self._receive_one(deadline)
        return self._prepared.popleft() if self._prepared else self._fault

    def exit_of(self, seq: int, deadline: float) -> dict:
        """The server's account of child `seq`'s exit (waits for it)."""
        while seq not in self._exits:
            self._receive_one(deadline)
        return self._exits.pop(seq)

    def close(self) -> None:
        for child in self._prepared:
            child.close()
        self._prepared.clear()
        self.sock.close()


def ready(fd: int, events: int, timeout_s: float) -> bool:
    """Whether ``fd`` has one of ``events`` (select.POLLIN, POLLOUT), or an error or hang-up,
    within ``timeout_s``. poll(2): select(2) refuses descriptors past 1023, which a busy host
    process (a server with many connections) hands out."""
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(math.ceil(max(0.0, timeout_s) * 1e3)))


def write_all(fd: int, data: bytes, deadline: float) -> bool:
    """Write everything before the deadline; False if the reader is gone or too slow."""
    view = memoryview(data)
    os.set_blocking(fd, False)
    while view:
        try:
            view = view[os.write(fd, view):]
            continue
        except BlockingIOError:  # the pipe is full: wait until the child reads
            pass
        except OSError:  # EPIPE: the child is gone
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not ready(fd, select.POLLOUT, remaining):
            return False
    return True


def unread(fd: int) -> int:
    """Bytes written into a pipe that its reader has not taken (FIONREAD works on either end)."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def drain(fds: list[int], sinks: list[OutputCapture], deadline: float) -> bool:
    """Read every pipe into its sink until all are closed; False if the deadline came first."""
    poller = select.poll()
    sink_of = dict(zip(fds, sinks))
    for fd in fds:
        poller.register(fd, select.POLLIN)
    open_fds = set(fds)
    while open_fds:
        remaining_ms = (deadline - time.monotonic()) * 1e3
        if remaining_ms <= 0:
            return False
        for fd, events in poller.poll(max(1, int(remaining_ms))):
            chunk = os.read(fd, 1 << 16) if events & (select.POLLIN | select.POLLHUP) else b""
            if chunk:
                sink_of[fd].feed(chunk)
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
    return True
