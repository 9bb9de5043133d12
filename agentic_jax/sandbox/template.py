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
_FDS = struct.Struct(f"{CHILD_FDS}i")


class TemplateLost(Exception):
    """The template process died or stopped answering; the worker must be replaced."""


def start(become_child: Callable[[str, list[int]], None], drop: list[int],
          timeout_s: float, settle: Callable[[], None] = lambda: None) -> TemplateClient:
    """Fork the template from the calling (serving) process.

    become_child(workdir, fds) runs in each new child and never returns; it sees the serving
    process's state as of this call, before any request. drop: descriptors the template must
    not keep (the host protocol pipes). timeout_s: longest wait for the template's answer.
    settle() runs in the template once, before its first fork; should it raise, the template
    exits, and the first request finds it lost.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.close()
        for fd in drop:
            os.close(fd)
        try:
            syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
            settle()
        except BaseException:
            os._exit(70)
        _serve(theirs, become_child)
    theirs.close()
    return TemplateClient(ours, pid, timeout_s)


def _serve(sock: socket.socket, become_child: Callable[[str, list[int]], None]) -> None:
    """Template loop: one message (workdir name + CHILD_FDS descriptors) -> one child.

    Between forks it touches as few objects as it can (C methods bound once, no Python-level
    helpers, no fork hooks on its side): every page it writes after a fork is a copy, and its
    first write into a huge page splits it, which every later fork and child exit then pays
    for in page-table work.
    """
    syscalls.set_process_name("sandbox-tmpl")
    recvmsg, send, close, exit_now = sock.recvmsg, sock.send, os.close, os._exit
    fork, pack, unpack = syscalls.fork_sibling, _PID.pack, _FDS.unpack
    ancillary, rights = socket.CMSG_SPACE(_FDS.size), (socket.SOL_SOCKET, socket.SCM_RIGHTS)
    while True:
        try:
            name, ancdata, _, _ = recvmsg(_MAX_NAME, ancillary)
        except OSError:
            exit_now(0)
        if not name or len(ancdata) != 1:
            exit_now(0)
        level, kind, data = ancdata[0]
        if (level, kind) != rights or len(data) != _FDS.size:
            exit_now(0)
        fds = unpack(data)
        try:
            pid = fork(False)  # the template has no other thread and imports nothing here
        except OSError as err:
            pid = -err.errno
        if pid == 0:
            sock.close()
            become_child(name.decode(), list(fds))
        for fd in fds:
            close(fd)
        try:
            send(pack(pid))
        except OSError:
            exit_now(0)


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
