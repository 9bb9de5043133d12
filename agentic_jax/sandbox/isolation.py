"""OS isolation: per-worker namespaces and filesystem view, per-snippet limits and identity.

Worker level (paid once): private network, mount, IPC, UTS and PID namespaces; a filesystem
view where every top-level directory except the system ones is replaced by an empty tmpfs that
re-exposes only the Python import paths (without checkout metadata such as .git), /etc holds
only what the dynamic loader and time functions read, /sys is empty, /proc is the PID
namespace's own with its process entries only, and /dev holds only the character devices the
interpreter and the math libraries use (no GPU, TPU or block devices); everything read-only.
Snippet level (paid per fork, a few syscalls): its own scratch tmpfs, memory cgroup, new
session, resource limits, dropped privileges, no_new_privs + seccomp.
"""

from __future__ import annotations

import os
import resource
import sys

from agentic_jax.sandbox import syscalls

# Top-level directories a Python process needs to see; everything else is hidden. /etc, /dev,
# /proc and /sys are kept as mount points and rebuilt below.
SYSTEM_DIRS = frozenset({"usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc", "dev",
                         "proc", "sys"})
# The whole of the sandbox's /etc: the loader's library list (extension modules imported
# lazily link against system libraries) and the time zone. Nothing names the host's users,
# hosts, network or packages.
ETC_FILES = ("ld.so.cache", "localtime")
# Version-control metadata hidden inside each import path (a source checkout on sys.path).
CHECKOUT_METADATA = (".git", ".hg", ".svn")
SCRATCH_ROOT = "/tmp"  # per-snippet tmpfs mounts live under SCRATCH_ROOT/sandbox
# The whole of the sandbox's /dev: these nodes, bound from the host's, and the links below.
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}


def import_paths() -> list[str]:
    """Real paths the interpreter may import from, outermost first, nested ones dropped."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  package_root, *sys.path]
    paths = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
    kept: list[str] = []
    for path in paths:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def enter_namespaces(is_root: bool) -> dict[str, bool]:
    """Unshare net/mount/IPC/UTS (and PID for later children) for the calling worker.

    As root the namespaces are created directly; otherwise through a user namespace where
    the worker maps itself to root. Returns which namespace layers took effect.
    """
    flags = (syscalls.CLONE_NEWNS | syscalls.CLONE_NEWNET | syscalls.CLONE_NEWIPC
             | syscalls.CLONE_NEWUTS | syscalls.CLONE_NEWPID)
    uid, gid = os.getuid(), os.getgid()
    try:
        syscalls.unshare(flags if is_root else flags | syscalls.CLONE_NEWUSER)
    except OSError:
        return {"network_namespace": False, "mount_namespace": False, "pid_namespace": False}
    if not is_root:
        _map_ids(uid, gid)
    return {"network_namespace": True, "mount_namespace": True, "pid_namespace": True}


def _map_ids(uid: int, gid: int) -> None:
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def build_filesystem_view() -> str:
    """Inside a fresh mount namespace: hide, re-expose, replace /dev, mount the scratch root,
    freeze.

    Top-level directories outside SYSTEM_DIRS become empty (files become /dev/null), except
    for the import paths bound back in; /dev is rebuilt from DEVICES and DEV_LINKS; then the
    whole tree is made read-only except the scratch root, which holds only mount points.

    Must run in the PID namespace's first process so that the new /proc shows only the
    worker's own processes. Returns the scratch directory. Raises OSError on failure.
    """
    syscalls.mount("none", "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE, None)
    _private_proc()
    keep = import_paths()
    handles = {path: os.open(path, os.O_PATH) for path in keep}
    try:
        for entry in sorted(os.listdir("/")):
            top = "/" + entry
            if entry in SYSTEM_DIRS or os.path.islink(top):
                continue
            if os.path.isdir(top):
                _hide(top, [p for p in keep if p.startswith(top + "/")], handles)
            elif os.path.isfile(top):  # e.g. container metadata next to the system dirs
                syscalls.mount("/dev/null", top, None, syscalls.MS_BIND, None)
        _hide_metadata(keep)
    finally:
        for fd in handles.values():
            os.close(fd)
    _minimal_dev()
    _only_files("/etc", ETC_FILES, "size=64k,nr_inodes=16,mode=0755")
    syscalls.mount("tmpfs", "/sys", "tmpfs", _NO_EXEC, "size=4k,nr_inodes=4,mode=0555")
    scratch = os.path.join(SCRATCH_ROOT, "sandbox")
    os.makedirs(scratch, exist_ok=True)
    syscalls.make_tree_readonly("/")
    syscalls.mount("tmpfs", scratch, "tmpfs", syscalls.MS_NOSUID | syscalls.MS_NODEV,
                   "size=64k,nr_inodes=1024,mode=0755")
    return scratch


_NO_EXEC = syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC


def _private_proc() -> None:
    """The PID namespace's own /proc; with ``subset=pid`` (Linux 5.8+) it holds process
    entries only, none of the host's cpuinfo, meminfo, version or sysctl files."""
    try:
        syscalls.mount("proc", "/proc", "proc", _NO_EXEC, "subset=pid")
    except OSError:  # older kernels: the full proc of the namespace
        syscalls.mount("proc", "/proc", "proc", _NO_EXEC, None)


def _minimal_dev() -> None:
    """Cover /dev with a tmpfs that holds only DEVICES (bound from the host) and DEV_LINKS."""
    _only_files("/dev", DEVICES, "size=64k,nr_inodes=64,mode=0755", flags=syscalls.MS_NOSUID
                | syscalls.MS_NOEXEC, mode=0o666)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"/dev/{name}")


def _only_files(directory: str, names: tuple[str, ...], options: str, flags: int = _NO_EXEC,
                mode: int = 0o644) -> None:
    """Cover ``directory`` with a tmpfs holding only ``names``, each bound from the file it
    was (a symlink's target; names that do not exist are left out)."""
    handles = {}
    for name in names:
        try:
            handles[name] = os.open(os.path.join(directory, name), os.O_PATH)
        except FileNotFoundError:
            continue
    try:
        syscalls.mount("tmpfs", directory, "tmpfs", flags, options)
        for name, fd in handles.items():
            path = os.path.join(directory, name)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, mode))
            syscalls.mount(f"/proc/self/fd/{fd}", path, None, syscalls.MS_BIND, None)
    finally:
        for fd in handles.values():
            os.close(fd)


def _hide_metadata(keep: list[str]) -> None:
    """Cover CHECKOUT_METADATA at the top of each kept import path: an empty tmpfs over a
    directory, /dev/null over a file (a worktree's .git names the main checkout)."""
    for path in keep:
        for name in CHECKOUT_METADATA:
            target = os.path.join(path, name)
            if os.path.islink(target):
                continue  # its target is outside the kept paths, so already hidden
            if os.path.isdir(target):
                syscalls.mount("tmpfs", target, "tmpfs", _NO_EXEC, "size=4k,nr_inodes=4")
            elif os.path.isfile(target):
                syscalls.mount("/dev/null", target, None, syscalls.MS_BIND, None)


def _hide(top: str, keep: list[str], handles: dict[str, int]) -> None:
    """Cover `top` with an empty tmpfs, then bind the kept import paths back in place."""
    syscalls.mount("tmpfs", top, "tmpfs", syscalls.MS_NOSUID | syscalls.MS_NODEV, "mode=0755")
    for path in keep:
        os.makedirs(path, mode=0o755, exist_ok=True)
        syscalls.mount(f"/proc/self/fd/{handles[path]}", path, None,
                       syscalls.MS_BIND | syscalls.MS_REC, None)


def apply_snippet_limits(memory_bytes: int, file_bytes: int, open_files: int) -> None:
    """Hard resource limits (soft == hard, so the code cannot raise them).

    CPU time starts at an hour and is lowered per request, once the timeout is known.
    """
    for limit, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_FSIZE, file_bytes),
                         (resource.RLIMIT_NOFILE, open_files), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_MEMLOCK, 0),
                         (resource.RLIMIT_MSGQUEUE, 0)):
        resource.setrlimit(limit, (value, value))
    # SIGXCPU at the soft limit, SIGKILL one second later: a backstop to the parent's clock.
    resource.setrlimit(resource.RLIMIT_CPU, (3600, 3601))


def drop_privileges(uid: int, gid: int) -> None:
    """Become an unprivileged user with no supplementary groups (root only)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def collapse_to_huge_pages() -> int:
    """Back the process's anonymous memory with transparent huge pages where it can.

    Forking copies, and exiting tears down, one page-table entry per resident 4 KiB page; a
    2 MiB huge page needs one. Done once in the worker before the template is forked, it
    halves the CPU cost of each snippet's fork and exit (a child that writes into a huge page
    splits its own mapping only). Returns the number of 2 MiB-aligned ranges collapsed; 0 on
    kernels without MADV_COLLAPSE.
    """
    huge = 1 << 21
    collapsed = 0
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] != "[heap]"):
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            low, high = (low + huge - 1) & ~(huge - 1), high & ~(huge - 1)
            if high > low and syscalls.madvise(low, high - low, syscalls.MADV_HUGEPAGE):
                collapsed += syscalls.madvise(low, high - low, syscalls.MADV_COLLAPSE)
    return collapsed


def current_address_space() -> int:
    """Bytes of virtual address space the calling process maps now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
