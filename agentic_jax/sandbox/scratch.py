"""Per-snippet working directories and a removal that no directory tree can break.

With a private mount namespace each snippet gets its own small tmpfs on one of a fixed set of
mount points, and discarding it is a lazy unmount: the kernel frees whatever the snippet left,
however deep. Without one, the directory is removed by `remove_tree`, which walks iteratively
through directory descriptors (no recursion, no path longer than one name) and so survives
trees deeper than the interpreter's recursion limit or PATH_MAX.
"""

from __future__ import annotations

import collections
import errno
import os
import stat

from agentic_jax.sandbox import syscalls

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str, max_entries: int = 1 << 20) -> None:
    """Delete `path` and everything below it without following symlinks.

    Keeps one directory descriptor open at a time; climbs back through "..", which is safe
    because nothing else writes into the tree while it is removed. Stops quietly after
    max_entries removals (a bound on the work, not expected to be reached).
    """
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    # One entry per level on the way down: (name of this directory, its remaining subdirs).
    stack: list[tuple[str, list[str]]] = [("", _clear_files(fd))]
    removed = 0
    try:
        while stack and removed < max_entries:
            subdirs = stack[-1][1]
            if subdirs:
                name = subdirs.pop()
                child = _open_dir(fd, name)
                if child is None:
                    continue
                os.close(fd)
                fd = child
                stack.append((name, _clear_files(fd)))
                continue
            name, _ = stack.pop()
            if not stack:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            _ignore_missing(os.rmdir, name, dir_fd=fd)
            removed += 1
    finally:
        os.close(fd)
    _ignore_missing(os.rmdir, path)


def _clear_files(fd: int) -> list[str]:
    """Unlink every non-directory in the directory `fd`; return the names of subdirectories."""
    _make_searchable(fd)
    subdirs = []
    for name in os.listdir(fd):
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(mode):
            subdirs.append(name)
        else:
            _ignore_missing(os.unlink, name, dir_fd=fd)
    return subdirs


def _open_dir(fd: int, name: str) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:  # a snippet removed the directory's permissions (unprivileged host)
        os.chmod(name, 0o700, dir_fd=fd, follow_symlinks=False)
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return None


def _make_searchable(fd: int) -> None:
    if os.geteuid() != 0 and (os.fstat(fd).st_mode & 0o700) != 0o700:
        os.fchmod(fd, 0o700)


def _ignore_missing(action, *args, **kwargs) -> None:
    try:
        action(*args, **kwargs)
    except FileNotFoundError:
        pass


class Workdirs:
    """Creates and discards the working directory of each snippet under `root`.

    mounts: each directory is a tmpfs of its own, of `size_mb`, mounted on one of the empty
    mount points in `root` (a read-only scratch root, see `view`; requires mount privileges);
    discarding it is a lazy unmount that frees the mount point. Without: a new directory in
    `root` each time, removed with `remove_tree`.
    uid/gid: owner of the new directory (None keeps the caller's).
    """

    def __init__(self, root: str, size_mb: int, mounts: bool, uid: int | None,
                 gid: int | None) -> None:
        self.root, self.size_mb, self.mounts, self.uid, self.gid = root, size_mb, mounts, uid, gid
        self._free = collections.deque(
            os.path.join(root, name) for name in (sorted(os.listdir(root)) if mounts else ()))
        self._next = 0

    def create(self) -> str:
        if not self.mounts:
            path = os.path.join(self.root, f"job{self._next}")
            self._next += 1
            os.mkdir(path, 0o700)
            if self.uid is not None:
                os.chown(path, self.uid, self.gid)
            return path
        if not self._free:
            raise OSError(errno.EBUSY, "every scratch mount point is in use")
        path = self._free.popleft()
        owner = f",uid={self.uid},gid={self.gid}" if self.uid is not None else ""
        try:
            syscalls.mount("tmpfs", path, "tmpfs", syscalls.MS_NOSUID | syscalls.MS_NODEV,
                           f"size={self.size_mb}m,nr_inodes=4096,mode=0700{owner}")
        except OSError:
            self._free.appendleft(path)
            raise
        return path

    def discard(self, path: str) -> None:
        if self.mounts:
            syscalls.umount(path)
            self._free.append(path)
        else:
            remove_tree(path)

