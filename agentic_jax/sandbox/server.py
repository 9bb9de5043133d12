"""The serving loop of a worker: prepares children, enforces their deadlines, reaps them.

The host talks to each child directly: the server hands it the child's pipes (the code pipe's
write end, the read ends of stdout, stderr and result) over the channel, so the critical path
of a snippet is host -> child -> host. The server stays out of it: it forks the next child
from the template as soon as the current one starts, kills a child at its deadline or when
the host is done with it, reaps it and reports its exit status.

Channel messages (one JSON object per datagram), server -> host:
    {"ready": true, ...}                         once, after warm-up
    {"child": seq} + 4 descriptors               a prepared child, waiting for its code
    {"exit": seq, "signal", "exit_code", "timed_out", "out_of_memory"}
    {"fault": text}                              no clean child can be made any more
host -> server: {"start": seq, "timeout_ms": t} (code delivered), {"done": seq} (kill it now).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import select
import signal
import socket
import time

from agentic_jax.sandbox.cgroup import WorkerCgroup
from agentic_jax.sandbox.scratch import Workdirs
from agentic_jax.sandbox.template import TemplateClient, TemplateLost

MAX_MESSAGE = 1 << 16
# Children kept ready ahead of the host: back-to-back requests find one already isolated
# while the fork of the next overlaps the current run.
PREPARED_AHEAD = 2


@dataclasses.dataclass
class _Child:
    seq: int
    workdir: str
    host_fds: list[int]  # sent to the host once the PID is known, then closed here
    pid: int = 0
    pidfd: int = -1
    deadline: float | None = None
    killed_by_us: bool = False
    timed_out: bool = False


class Server:
    """Event loop of the serving process (PID 1 of the worker's namespace)."""

    def __init__(self, forker: TemplateClient, workdirs: Workdirs, memcg: WorkerCgroup | None,
                 channel: socket.socket) -> None:
        self.forker, self.workdirs, self.memcg, self.channel = forker, workdirs, memcg, channel
        self.pending: list[_Child] = []   # asked of the template, PID not yet known
        self.live: dict[int, _Child] = {}  # by pidfd
        self.next_seq = 0
        self.faulted = False

    def serve(self) -> None:
        """Run until the host closes the channel (or the template is lost and reported)."""
        self._top_up()
        while True:
            if not self._step():
                break
        for child in list(self.live.values()):
            _kill(child.pid)

    def _step(self) -> bool:
        deadlines = [c.deadline for c in self.live.values() if c.deadline is not None]
        timeout = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
        # The template socket is watched only while a fork is outstanding: a template that
        # died while idle is noticed by the next request to it.
        # poll(2), not select(2): the channel's descriptor number is the host's, and a busy
        # host has numbers past select's 1023.
        channel, template = self.channel.fileno(), self.forker.sock.fileno()
        poller = select.poll()
        for fd in (channel, *([template] if self.pending else []), *self.live):
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll(None if timeout is None else math.ceil(timeout * 1e3)):
            if fd == channel:
                if not self._on_host_message():
                    return False
            elif fd == template:
                self._on_template_answer()
            elif fd in self.live:
                self._reap(self.live.pop(fd))
        now = time.monotonic()
        for child in self.live.values():
            if child.deadline is not None and now >= child.deadline and not child.killed_by_us:
                child.timed_out = True
                self._kill(child)
        return True

    def _on_host_message(self) -> bool:
        try:
            data = self.channel.recv(MAX_MESSAGE)
        except OSError:
            return False
        if not data:
            return False
        message = json.loads(data)
        child = next((c for c in self.live.values() if c.seq == message.get("start",
                      message.get("done"))), None)
        if "start" in message:
            if child is not None:
                child.deadline = time.monotonic() + int(message["timeout_ms"]) / 1e3
            self._top_up()  # the next child gets ready while this one runs
        elif "done" in message and child is not None:
            self._kill(child)
        return True

    def _top_up(self) -> None:
        waiting = len(self.pending) + sum(c.deadline is None for c in self.live.values())
        for _ in range(PREPARED_AHEAD - waiting):
            self._prepare()

    def _prepare(self) -> None:
        """Ask the template for the next child (pipes made here, host ends kept to send)."""
        if self.faulted:
            return
        try:
            workdir = self.workdirs.create()
        except OSError as err:
            self._fault(f"cannot prepare a working directory ({err})")
            return
        pipes = [os.pipe() for _ in range(4)]  # code (to child), stdout, stderr, result
        child_ends = [pipes[0][0]] + [w for _, w in pipes[1:]]
        host_ends = [pipes[0][1]] + [r for r, _ in pipes[1:]]
        try:
            self.forker.request(workdir, child_ends)
        except TemplateLost as err:
            for fd in host_ends:
                os.close(fd)
            self.workdirs.discard(workdir)
            self._fault(str(err))
            return
        finally:
            for fd in child_ends:
                os.close(fd)
        self.pending.append(_Child(self.next_seq, workdir, host_ends))
        self.next_seq += 1

    def _on_template_answer(self) -> None:
        child = self.pending.pop(0)
        try:
            child.pid = self.forker.child_pid()
            child.pidfd = os.pidfd_open(child.pid)
        except (TemplateLost, OSError) as err:
            for fd in child.host_fds:
                os.close(fd)
            self.workdirs.discard(child.workdir)
            self._fault(str(err))
            return
        self.live[child.pidfd] = child
        self._send({"child": child.seq}, child.host_fds)
        for fd in child.host_fds:
            os.close(fd)
        child.host_fds = []

    def _kill(self, child: _Child) -> None:
        child.killed_by_us = True
        _kill(child.pid)

    def _reap(self, child: _Child) -> None:
        _, status, _ = os.wait4(child.pid, 0)
        os.close(child.pidfd)
        self.workdirs.discard(child.workdir)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        oom = (sig == signal.SIGKILL and not child.killed_by_us and self.memcg is not None
               and self.memcg.new_oom_kill())
        self._send({"exit": child.seq, "signal": sig, "timed_out": child.timed_out,
                    "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    "out_of_memory": oom})
        self._top_up()  # a prepared child that died before it started is replaced

    def _fault(self, what: str) -> None:
        if not self.faulted:
            self.faulted = True
            self._send({"fault": f"the worker cannot start a clean process ({what})"})

    def _send(self, message: dict, fds: list[int] = ()) -> None:
        try:
            socket.send_fds(self.channel, [json.dumps(message).encode()], list(fds))
        except OSError:
            pass  # the host is gone; the next receive ends the loop


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except ProcessLookupError:
            pass
