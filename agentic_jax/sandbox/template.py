"""The clean template: the process every snippet's child is forked from.

The serving process reads requests and collects reports, so its memory holds every earlier
snippet's code and output. The template is forked from it once, after warm-up and before the
first request, and afterwards receives only pipe descriptors and a directory name; each child
is forked from the template, so it starts with no other snippet's data in its address space.
The fork uses CLONE_PARENT: the child becomes the serving process's own child, which waits for
it, reads its exit status and kills it, exactly as for a direct fork.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
from collections.abc import Callable

from agentic_jax.sandbox import syscalls
from agentic_jax.sandbox.channel import ready

_PID = struct.Struct("i")
_MAX_NAME = 4096
CHILD_FDS = 4  # code (read end), stdout, stderr, result (write ends)


class TemplateLost(Exception):
    """The template process died or stopped answering; the worker must be replaced."""


def start(become_child: Callable[[str, list[int]], None], drop: list[int],
          timeout_s: float) -> TemplateClient:
    """Fork the template from the calling (serving) process.

    become_child(workdir, fds) runs in each new child and never returns; it sees the serving
    process's state as of this call, before any request. drop: descriptors the template must
    not keep (the host protocol pipes). timeout_s: longest wait for the template's answer.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.close()
        for fd in drop:
            os.close(fd)
        _serve(theirs, become_child)
    theirs.close()
    return TemplateClient(ours, pid, timeout_s)


def _serve(sock: socket.socket, become_child: Callable[[str, list[int]], None]) -> None:
    """Template loop: one message (workdir name + CHILD_FDS descriptors) -> one child."""
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    syscalls.set_process_name("sandbox-tmpl")
    while True:
        try:
            name, fds, _, _ = socket.recv_fds(sock, _MAX_NAME, CHILD_FDS)
        except OSError:
            os._exit(0)
        if not name or len(fds) != CHILD_FDS:
            os._exit(0)
        try:
            pid = syscalls.fork_sibling()
        except OSError as err:
            pid = -err.errno
        if pid == 0:
            sock.close()
            become_child(name.decode(), fds)
        for fd in fds:
            os.close(fd)
        try:
            sock.send(_PID.pack(pid))
        except OSError:
            os._exit(0)


class TemplateClient:
    """Serving-process side of the template: ask for children, learn their PIDs."""

    def __init__(self, sock: socket.socket, pid: int, timeout_s: float) -> None:
        self.sock = sock
        self.pid = pid
        self.timeout_s = timeout_s

    def request(self, workdir: str, fds: list[int]) -> None:
        """Ask for a child working in `workdir` on the given descriptors (not waiting)."""
        try:
            socket.send_fds(self.sock, [workdir.encode()], fds)
        except OSError as err:
            raise TemplateLost(f"template unreachable: {err}") from err

    def child_pid(self) -> int:
        """PID of the child of the oldest unanswered request."""
        if not ready(self.sock.fileno(), select.POLLIN, self.timeout_s):
            raise TemplateLost("template did not answer in time")
        try:
            data = self.sock.recv(_PID.size)
        except OSError as err:
            raise TemplateLost(f"template unreachable: {err}") from err
        if len(data) != _PID.size:
            raise TemplateLost("template exited")
        (pid,) = _PID.unpack(data)
        if pid <= 0:
            raise TemplateLost(f"template could not fork: {os.strerror(-pid)}")
        return pid
