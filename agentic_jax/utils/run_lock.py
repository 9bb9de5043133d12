"""One run per run directory: ``DIR/run.lock`` is held (``flock``) for as long as a run writes
there, names its holder (host, pid, start time, command) and is removed when the run ends.

Two runs on one directory would interleave their metrics and race on the checkpoints'
temporary directories. The kernel drops a ``flock`` when its process dies however it died
(SIGKILL included), so a lock file left by a dead run holds nothing: the next run takes it
over and says whose it was. On a file system without ``flock`` (some network mounts) the
holder's pid decides, when it ran on this host.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time

from agentic_jax.errors import UserError

LOCK_FILE = "run.lock"


class WorkdirBusy(UserError):
    """Another live process holds the run directory."""


class WorkdirLock:
    """``with WorkdirLock(workdir) as lock:`` holds ``workdir`` (created if missing) or raises
    `WorkdirBusy` naming the holder; ``lock.taken_over`` is the holder record of a dead run
    whose lock this one took (None when the lock was free)."""

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, LOCK_FILE)
        self.taken_over: dict | None = None
        self._fd: int | None = None
        self._created_dir = False

    def acquire(self) -> WorkdirLock:
        workdir = os.path.dirname(self.path) or "."
        self._created_dir = not os.path.isdir(workdir)
        os.makedirs(workdir, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                previous = _read_holder(fd)
                locked = _flock(fd)
                if locked and not _still_at(fd, self.path):
                    os.close(fd)  # its holder removed the file as it ended: a new one is due
                    continue
                if locked is False or (locked is None and previous and _alive_here(previous)):
                    raise WorkdirBusy(f"{workdir} is in use by {describe(previous)} "
                                      f"({self.path}); wait for that run to end or use another "
                                      "--workdir")
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(_me()).encode() + b"\n", 0)
            except BaseException:
                os.close(fd)
                self._remove_created_dir()
                raise
            self._fd, self.taken_over = fd, previous
            return self

    def release(self) -> None:
        """Removes the lock file (then drops the lock) and the run directory when acquiring
        created it and nothing else was written there."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._fd)  # drops the flock
            self._fd = None
        self._remove_created_dir()

    def _remove_created_dir(self) -> None:
        if self._created_dir:
            with contextlib.suppress(OSError):  # not empty: the run wrote there
                os.rmdir(os.path.dirname(self.path))

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def describe(holder: dict | None) -> str:
    """'pid 123 on host gpu-1 since 2024-05-01 10:00:00 (python -m agentic_jax.train ...)'."""
    if not holder:
        return "another process (no holder recorded)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return (f"pid {holder.get('pid')} on host {holder.get('host')} since {since} "
            f"({holder.get('command', '')[:200]})")


def _me() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
            "command": " ".join(sys.argv)}


def _still_at(fd: int, path: str) -> bool:
    """``fd`` is the file now at ``path`` (not one unlinked by a run that just ended)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _read_holder(fd: int) -> dict | None:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "null")
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _flock(fd: int) -> bool | None:
    """True when this process now holds the lock, False when another one does, None on a file
    system without flock (the holder record then decides: `_alive_here`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EACCES):
            return False
        if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise
        return None
    return True


def _alive_here(holder: dict) -> bool:
    """A holder record of a process still running on this host."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
