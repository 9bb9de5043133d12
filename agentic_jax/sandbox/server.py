"""The serving loop of a worker: one request from the host -> one fresh child -> one report.

The next child is requested from the template right after each reply, while the host is busy
with the result, and the finished child is reaped after the reply, so neither fork nor exit
teardown sits on the latency path.
"""

from __future__ import annotations

import os
import select
import signal
import time

from agentic_jax.sandbox.cgroup import WorkerCgroup
from agentic_jax.sandbox.output import OutputCapture
from agentic_jax.sandbox.protocol import (RESULT_CAP, ChannelClosed, JsonLineReader,
                                          decode_result, send_json)
from agentic_jax.sandbox.scratch import Workdirs
from agentic_jax.sandbox.template import TemplateClient, TemplateLost



class Server:
    """Request loop of the serving process (PID 1 of the worker's namespace)."""

    def __init__(self, forker: TemplateClient, workdirs: Workdirs, memcg: WorkerCgroup | None,
                 max_output_bytes: int, proto_in: int, proto_out: int) -> None:
        """forker.timeout_s bounds each wait for the template (a fork takes milliseconds)."""
        self.forker, self.workdirs, self.memcg = forker, workdirs, memcg
        self.max_output_bytes = max_output_bytes
        self.proto_in, self.proto_out = proto_in, proto_out
        self.reader = JsonLineReader(proto_in)

    def serve(self) -> None:
        """Answer requests until the host goes away or the template is lost."""
        upcoming, lost = self._prefork()
        while True:
            try:
                request = self.reader.read()
            except ChannelClosed:
                break
            if upcoming is None:  # no clean process to run it in: say so and retire
                self._reply({"fault": lost, "started": False, "retire": True})
                break
            child, upcoming = upcoming, None
            report = child.run(request, self.max_output_bytes, self.proto_in, self.memcg)
            report["retire"] = bool(report.get("fault"))
            replied = self._reply(report)
            if replied and not report["retire"]:
                upcoming, lost = self._prefork()
            child.finish(self.workdirs)
            if not replied or report.get("retire"):
                break
        if upcoming is not None:
            upcoming.finish(self.workdirs)

    def _prefork(self) -> tuple[PreforkedChild | None, str]:
        try:
            return PreforkedChild(self.forker, self.workdirs), ""
        except (TemplateLost, OSError) as err:
            return None, f"the worker cannot start a clean process ({err})"

    def _reply(self, report: dict) -> bool:
        try:
            send_json(self.proto_out, report)
            return True
        except ChannelClosed:
            return False


class PreforkedChild:
    """A child forked from the template ahead of time, waiting for its one snippet."""

    def __init__(self, forker: TemplateClient, workdirs: Workdirs) -> None:
        self.forker = forker
        self.workdir = workdirs.create()
        pipes = [os.pipe() for _ in range(4)]  # code (to child), stdout, stderr, result
        try:
            forker.request(self.workdir, [pipes[0][0]] + [w for _, w in pipes[1:]])
        finally:
            os.close(pipes[0][0])
            for _, write_end in pipes[1:]:
                os.close(write_end)
        self.code_fd = pipes[0][1]
        self.fds = [read_end for read_end, _ in pipes[1:]]
        self.pid = 0

    def run(self, request: dict, max_output_bytes: int, proto_in: int,
            memcg: WorkerCgroup | None) -> dict:
        """Hand over the snippet and supervise it under the wall-clock deadline."""
        start = time.perf_counter()
        try:
            self.pid = self.forker.child_pid()
        except TemplateLost as err:
            os.close(self.code_fd)
            self.code_fd = -1
            return {"fault": f"the worker cannot start a clean process ({err})",
                    "started": False}
        history = [str(block) for block in request.get("history", ())]
        timeout_ms = int(request["timeout_ms"])
        captures = [OutputCapture(max_output_bytes), OutputCapture(max_output_bytes),
                    OutputCapture(2 * RESULT_CAP)]  # the head half holds a whole report
        try:
            send_json(self.code_fd, {"code": str(request.get("code", "")),
                                     "timeout_ms": timeout_ms, "history": history})
        except ChannelClosed:
            pass  # the child died during setup; its result pipe says why
        os.close(self.code_fd)
        self.code_fd = -1
        deadline = start + timeout_ms * (1 + len(history)) / 1e3
        timed_out = _supervise(self.pid, self.fds, captures, deadline, proto_in)
        _kill(self.pid)  # done or not, nothing of it may outlive this snippet
        parsed = decode_result(bytes(captures[2].head), captures[2].total)
        sig = exit_code = None
        if parsed is None:  # no report: the exit status is the only account of what happened
            status = self._reap()
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        own_ms = parsed["exec_ms"] if parsed else (time.perf_counter() - start) * 1e3
        return {"stdout": captures[0].text(), "stderr": captures[1].text(), "result": parsed,
                "timed_out": timed_out, "signal": sig, "exit_code": exit_code,
                "out_of_memory": sig == signal.SIGKILL and memcg is not None
                and memcg.new_oom_kill(), "exec_ms": own_ms}

    def _reap(self) -> int:
        _, status, _ = os.wait4(self.pid, 0)
        self.pid = 0
        return status

    def finish(self, workdirs: Workdirs) -> None:
        """Kill and reap the child if still there; discard its working directory."""
        if self.pid:
            _kill(self.pid)
            self._reap()
        elif self.code_fd >= 0:  # never started: the template may still be forking it
            try:
                self.pid = self.forker.child_pid()
                _kill(self.pid)
                self._reap()
            except TemplateLost:
                pass
        for fd in [self.code_fd, *self.fds]:
            if fd >= 0:
                os.close(fd)
        self.code_fd = -1
        self.fds = []
        workdirs.discard(self.workdir)


def _supervise(pid: int, fds: list[int], sinks: list[OutputCapture], deadline: float,
               proto_in: int) -> bool:
    """Drain the child's pipes until they all close; kill it at the deadline.

    Returns whether the deadline (or a vanished host) forced the kill.
    """
    poller = select.poll()
    sink_of = dict(zip(fds, sinks))
    for fd in fds:
        poller.register(fd, select.POLLIN)
    poller.register(proto_in, 0)  # only hang-up: the host went away
    open_fds = set(fds)
    while open_fds:
        remaining_ms = (deadline - time.perf_counter()) * 1e3
        if remaining_ms <= 0:
            _kill(pid)
            return True
        for fd, events in poller.poll(max(1, int(remaining_ms))):
            if fd == proto_in:
                _kill(pid)
                return True
            chunk = os.read(fd, 1 << 16) if events & (select.POLLIN | select.POLLHUP) else b""
            if chunk:
                sink_of[fd].feed(chunk)
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
    return False


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except ProcessLookupError:
            pass
