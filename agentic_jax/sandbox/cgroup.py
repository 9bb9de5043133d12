"""A memory cgroup per worker: the accounting layer that no snippet can step around.

RLIMIT_AS counts mapped address space only; pages a process holds without mapping them (shmem,
pipe buffers, kernel objects) and copy-on-write copies of inherited pages escape it. A memory
cgroup charges every page to the process that allocates it, so the kernel kills a snippet that
goes beyond its cgroup limit however it allocates. The host creates one directory per worker
under its own memory cgroup (v1 `memory` hierarchy or cgroup v2 with the memory controller
delegated) and removes it once the worker's processes are gone; the worker sets the limit,
and its template (see `template`) moves itself in before its first fork, so that each snippet's
child is born in the cgroup. The OOM killer picks the process with the most resident memory:
every child maps all of the template's anonymous memory and adds its own, and what a snippet
can hold outside its resident set (its tmpfs, pipe buffers) is far below the cgroup's headroom,
so a snippet that fills the cgroup is the one killed, never the template. Where the machine has
no writable memory cgroup, the resource limits are the only memory layer.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time

PREFIX = "agentic_jax_sandbox-"
_counter = itertools.count()


@dataclasses.dataclass(frozen=True)
class CgroupFiles:
    """Control file names of one cgroup version."""

    limit: str
    swap_limit: str
    events: str  # holds the "oom_kill N" counter


V1 = CgroupFiles("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control")
V2 = CgroupFiles("memory.max", "memory.swap.max", "memory.events")


def _own_memory_cgroup() -> tuple[str, CgroupFiles] | None:
    """Directory of the calling process's memory cgroup and its version, if mounted."""
    with open("/proc/self/cgroup") as f:
        entries = [line.rstrip("\n").split(":", 2) for line in f]
    v1 = next((path for _, ctrl, path in entries if "memory" in ctrl.split(",")), None)
    v2 = next((path for hier, ctrl, path in entries if hier == "0" and ctrl == ""), None)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, tail = line.partition(" - ")
            fstype, _, options = tail.split()[:3]
            root, mount_point = fields.split()[3:5]
            if fstype == "cgroup" and "memory" in options.split(",") and v1 is not None:
                path, files = v1, V1
            elif fstype == "cgroup2" and v2 is not None and v1 is None:
                path, files = v2, V2
            else:
                continue
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return os.path.join(mount_point, path[len(root):].lstrip("/")), files
    return None


def create() -> str | None:
    """Host side: a fresh, empty cgroup directory for one worker, or None where impossible."""
    try:
        found = _own_memory_cgroup()
        if found is None:
            return None
        parent, files = found
        sweep_stale(parent)
        path = os.path.join(parent, f"{PREFIX}{os.getpid()}-{next(_counter)}")
        os.mkdir(path)
    except OSError:
        return None
    if not os.path.exists(os.path.join(path, files.limit)):  # v2 without the memory controller
        remove(path)
        return None
    return path


def sweep_stale(parent: str) -> None:
    """Remove worker cgroups left behind by host processes that no longer exist."""
    for name in os.listdir(parent):
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX):].split("-")[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def remove(path: str, timeout_s: float = 5.0) -> None:
    """Remove a worker cgroup once its last process has exited (retrying while it drains)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)


class WorkerCgroup:
    """Worker side: limit the cgroup and keep the descriptors a child needs to join it."""

    def __init__(self, path: str, limit_bytes: int) -> None:
        files = V1 if os.path.exists(os.path.join(path, V1.limit)) else V2
        _write(os.path.join(path, files.limit), str(limit_bytes))
        swap = os.path.join(path, files.swap_limit)
        if os.path.exists(swap):  # no swapping past the limit either
            _write(swap, str(limit_bytes) if files is V1 else "0")
        self.procs_fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
        self.events_fd = os.open(os.path.join(path, files.events), os.O_RDONLY)
        self.limit_bytes = limit_bytes
        self._seen_kills = self.oom_kills()

    def oom_kills(self) -> int:
        """The kernel's count of processes it killed in this cgroup for want of memory."""
        text = os.pread(self.events_fd, 4096, 0).decode()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def new_oom_kill(self) -> bool:
        """Whether the kernel killed a process here since the last call (one child at a time
        runs in the cgroup, so a new kill is that child's)."""
        kills = self.oom_kills()
        fresh, self._seen_kills = kills > self._seen_kills, kills
        return fresh


def join(procs_fd: int) -> None:
    """Move the calling process into the cgroup ("0" names the writer); the children it forks
    afterwards are born in it."""
    os.write(procs_fd, b"0")


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)
