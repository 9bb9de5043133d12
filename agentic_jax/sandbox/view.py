"""The worker's filesystem view: a new root that holds only what the interpreter needs.

Built once per worker inside its fresh mount namespace, as a tmpfs root that the worker then
pivots into, detaching the host's tree entirely:

    /usr /lib* /bin /sbin   the host's, bound whole (a merged-/usr symlink stays a symlink)
    <import paths>          each bound at its own path, checkout metadata (.git) covered
    /etc                    only ETC_FILES
    /dev                    only DEVICES and DEV_LINKS (no GPU, TPU, VFIO or block devices)
    /proc                   the PID namespace's own, process entries only where the kernel
                            allows (``subset=pid``)
    /sys                    empty
    /tmp/sandbox            the scratch root: SCRATCH_SLOTS empty mount points, on each of
                            which one snippet's own tmpfs is mounted at a time

Everything is read-only except the snippets' own tmpfs mounts: nothing a snippet writes
outlives it, reaches the next one or keeps the worker from making the next mount. Because the
host's tree is detached rather than covered, a mount table read from /proc
(``/proc/self/mounts``, ``mountinfo``) lists only these mounts, never the host's mount points.
"""

from __future__ import annotations

import contextlib
import os
import sys

from agentic_jax.sandbox import syscalls

# Top-level directories of the host bound whole into the view: the interpreter's libraries.
SYSTEM_DIRS = ("usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin")
# Top-level directories the view rebuilds itself: an import path below one is not bound.
REBUILT_DIRS = ("etc", "dev", "proc", "sys")
# The whole of the sandbox's /etc: the loader's library list (extension modules imported
# lazily link against system libraries) and the time zone. Nothing names the host's users,
# hosts, network or packages.
ETC_FILES = ("ld.so.cache", "localtime")
# Version-control metadata hidden inside each import path (a source checkout on sys.path).
CHECKOUT_METADATA = (".git", ".hg", ".svn")
# The whole of the sandbox's /dev: these nodes, bound from the host's, and the links below.
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}
# Where the new root is assembled (a tmpfs over the host's /tmp, in this namespace only),
# and the scratch root inside the view with its mount points: more than the worker ever holds
# at once (the children it prepares ahead, the running one, those not yet reaped).
STAGING = "/tmp"
SCRATCH = "/tmp/sandbox"
SCRATCH_SLOTS = 16

_NO_EXEC = syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC


def import_paths() -> list[str]:
    """Real paths the interpreter may import from, outermost first, nested ones dropped."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  package_root, *sys.path]
    paths = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
    kept: list[str] = []
    for path in paths:
        if not any(_within(path, k) for k in kept):
            kept.append(path)
    return kept


def build() -> str:
    """In a fresh mount namespace: assemble the view, pivot into it, detach the host's tree
    and make everything read-only. Returns the scratch root.

    Must run in the PID namespace's first process so that the view's /proc shows only the
    worker's own processes. Raises OSError on failure.
    """
    syscalls.mount("none", "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE, None)
    _private_proc("/proc")  # also what the binds below name their sources through
    with _opened(_sources()) as handles:
        syscalls.mount("tmpfs", STAGING, "tmpfs", syscalls.MS_NOSUID | syscalls.MS_NODEV,
                       "mode=0755")
        _assemble(STAGING, handles)
    os.makedirs(STAGING + "/proc")
    syscalls.mount("/proc", STAGING + "/proc", None, syscalls.MS_MOVE, None)
    os.chdir(STAGING)
    syscalls.pivot_root(".", ".")  # the host's tree now sits on top of the view ...
    syscalls.umount(".")  # ... and is detached, with every mount below it
    os.chdir("/")
    syscalls.make_tree_readonly("/")
    return SCRATCH


def _sources() -> list[str]:
    """The host paths the view binds, each at the same path (symlinks in them are followed).
    Import paths inside a system directory are already in it."""
    sources = ["/" + name for name in SYSTEM_DIRS
               if os.path.isdir("/" + name) and not os.path.islink("/" + name)]
    sources += [path for path in import_paths() if path != "/" and not any(
        _within(path, "/" + d) for d in (*SYSTEM_DIRS, *REBUILT_DIRS))]
    sources += [f"/etc/{name}" for name in ETC_FILES] + [f"/dev/{name}" for name in DEVICES]
    return sources


@contextlib.contextmanager
def _opened(paths: list[str]):
    """O_PATH descriptors of those of ``paths`` that exist, by path: they stay reachable
    after the staging tmpfs covers /tmp (an import path may lie below it)."""
    handles: dict[str, int] = {}
    try:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                handles[path] = os.open(path, os.O_PATH)
        yield handles
    finally:
        for fd in handles.values():
            os.close(fd)


def _assemble(root: str, handles: dict[str, int]) -> None:
    """Lay out the view under ``root``, binding each handle at its own path."""
    for name in SYSTEM_DIRS:
        if os.path.islink("/" + name):  # merged /usr: lib -> usr/lib
            os.symlink(os.readlink("/" + name), root + "/" + name)
    for target in sorted(handles):
        if not target.startswith(("/etc/", "/dev/")):
            _bind(handles[target], root + target, directory=True)
    for path in import_paths():
        _cover_metadata(root + path)
    _tmpfs(root + "/etc", "size=64k,nr_inodes=16,mode=0755", _NO_EXEC)
    _tmpfs(root + "/dev", "size=64k,nr_inodes=64,mode=0755",
           syscalls.MS_NOSUID | syscalls.MS_NOEXEC)
    for target in sorted(handles):
        if target.startswith(("/etc/", "/dev/")):
            _bind(handles[target], root + target, directory=False,
                  mode=0o666 if target.startswith("/dev/") else 0o644)
    for name, link in DEV_LINKS.items():
        os.symlink(link, f"{root}/dev/{name}")
    os.makedirs(root + "/sys")
    for slot in range(SCRATCH_SLOTS):
        os.makedirs(f"{root}{SCRATCH}/job{slot}")


def _bind(fd: int, target: str, directory: bool, mode: int = 0o755) -> None:
    """Bind what ``fd`` names at ``target``, creating the mount point first."""
    if directory:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, mode))
    syscalls.mount(f"/proc/self/fd/{fd}", target, None, syscalls.MS_BIND | syscalls.MS_REC,
                   None)


def _tmpfs(target: str, options: str, flags: int) -> None:
    os.makedirs(target, mode=0o755, exist_ok=True)
    syscalls.mount("tmpfs", target, "tmpfs", flags, options)


def _cover_metadata(path: str) -> None:
    """Cover CHECKOUT_METADATA at the top of one bound import path: an empty tmpfs over a
    directory, /dev/null over a file (a worktree's .git names the main checkout)."""
    for name in CHECKOUT_METADATA:
        target = os.path.join(path, name)
        if os.path.islink(target):
            continue  # its target is outside the bound paths, so not in the view
        if os.path.isdir(target):
            syscalls.mount("tmpfs", target, "tmpfs", _NO_EXEC, "size=4k,nr_inodes=4")
        elif os.path.isfile(target):
            syscalls.mount("/dev/null", target, None, syscalls.MS_BIND, None)


def _private_proc(target: str) -> None:
    """The PID namespace's own /proc; with ``subset=pid`` (Linux 5.8+) it holds process
    entries only, none of the host's cpuinfo, meminfo, version or sysctl files."""
    try:
        syscalls.mount("proc", target, "proc", _NO_EXEC, "subset=pid")
    except OSError:  # older kernels: the full proc of the namespace
        syscalls.mount("proc", target, "proc", _NO_EXEC, None)


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")
