"""OS isolation: per-worker namespaces, per-snippet limits and identity.

Worker level (paid once): private network, mount, IPC, UTS and PID namespaces, in which the
worker builds its filesystem view (`view`).
Snippet level (paid per fork, a few syscalls): its own scratch tmpfs, memory cgroup, new
session, resource limits, dropped privileges, no_new_privs + seccomp.
"""

from __future__ import annotations

import os
import resource

from agentic_jax.sandbox import syscalls


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
