"""Thin ctypes bindings for the Linux calls Python's os module lacks, and the seccomp filter.

The seccomp program is compiled once per worker with libseccomp (as a binary search over the
syscall numbers) and exported as raw BPF, so a snippet's child installs it with a single
prctl() instead of re-running the compiler.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
CLONE_PARENT = 0x00008000
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_SYS_MOUNT_SETATTR = 442  # x86_64 and aarch64 share the number for this late addition
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_ACT_ERRNO_EPERM = 0x00050000 | 1
_SCMP_FLTATR_CTL_OPTIMIZE = 8
_SCMP_OPTIMIZE_BINARY_TREE = 2

# Syscalls a snippet never needs: process creation and exec, tracing and signalling other
# processes, networking, mounts/namespaces, kernel modules, and interfaces that bypass the filter.
DENIED_SYSCALLS = (
    "fork", "vfork", "clone", "clone3", "execve", "execveat", "ptrace", "process_vm_readv",
    "process_vm_writev", "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "socket", "socketpair", "connect", "bind",
    "listen", "accept", "accept4", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount", "fspick", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "acct", "quotactl", "settimeofday", "clock_settime",
    "sethostname", "setdomainname", "iopl", "ioperm", "syslog", "vhangup", "mknod", "mknodat",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "personality", "seccomp",
    # Memory and objects that outlive the process or escape RLIMIT_AS: SysV IPC, POSIX message
    # queues, memfd (its pages are never mapped, so the address-space limit misses them).
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget",
    "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr", "memfd_create", "memfd_secret",
)
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (see unshare(2))."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    """mount(2) with str arguments."""
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def make_tree_readonly(path: str) -> None:
    """Mark every mount at or below `path` read-only (mount_setattr, Linux >= 5.12)."""
    attr = _MountAttr(attr_set=_MOUNT_ATTR_RDONLY)
    _check(_libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD),
                         path.encode(), ctypes.c_uint(_AT_RECURSIVE), ctypes.byref(attr),
                         ctypes.c_size_t(ctypes.sizeof(attr))), "mount_setattr")


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2): make ``new_root`` the root of the mount namespace, the old root mounted
    at ``put_old`` (the same path as ``new_root`` stacks it on top, ready to be detached)."""
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(38, f"pivot_root: unsupported architecture {platform.machine()}")
    _check(_libc.syscall(ctypes.c_long(number), new_root.encode(), put_old.encode()),
           "pivot_root")


def umount(target: str) -> None:
    """Lazily detach the mount at `target` (umount2 with MNT_DETACH)."""
    _check(_libc.umount2(target.encode(), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def set_process_name(name: str) -> None:
    """Name shown in /proc/PID/comm and by ps (at most 15 bytes are kept)."""
    _check(_libc.prctl(ctypes.c_int(PR_SET_NAME), ctypes.c_char_p(name.encode()[:15]),
                       ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(NAME)")


_pylib = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL held across the raw clone
_CLONE_NUMBER = _SYS_CLONE.get(platform.machine())
# The clone's arguments and the interpreter's fork hooks, looked up once: the template forks
# every child, and each object it touches per fork is a page it shares with its children and
# so copies again after every fork (splitting a huge page the first time).
_CLONE_ARGS = (ctypes.c_long(_CLONE_NUMBER or 0), ctypes.c_ulong(CLONE_PARENT | signal.SIGCHLD),
               ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
_syscall = _pylib.syscall
_before_fork = ctypes.pythonapi.PyOS_BeforeFork
_after_fork_child = ctypes.pythonapi.PyOS_AfterFork_Child
_after_fork_parent = ctypes.pythonapi.PyOS_AfterFork_Parent


def fork_sibling(parent_hooks: bool = True) -> int:
    """Fork, but make the new process a child of the caller's parent (clone CLONE_PARENT).

    Returns like os.fork(): 0 in the new process, its PID in the caller. The interpreter's
    own fork hooks run around the raw syscall, so the child is a normal Python process; the
    caller must be single-threaded. Raises OSError when clone fails.

    parent_hooks=False skips the hooks on the caller's side (the import lock, the "before"
    and "after_in_parent" callbacks of os.register_at_fork, whose only task is to hold locks
    that another thread could be holding across the fork), for a caller that has no other
    thread and forks outside any import; the child's side (reinitialised locks, a fresh
    random seed) always runs.
    """
    if _CLONE_NUMBER is None:
        raise OSError(38, f"clone: unsupported architecture {platform.machine()}")
    if parent_hooks:
        _before_fork()
    pid = _syscall(*_CLONE_ARGS)
    if pid == 0:
        _after_fork_child()
        return 0
    err = ctypes.get_errno()
    if parent_hooks:
        _after_fork_parent()
    if pid < 0:
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25  # Linux >= 6.1


def madvise(address: int, length: int, advice: int) -> bool:
    """madvise(2); False when the kernel refuses (old kernel, unsuitable range)."""
    return _libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length),
                         ctypes.c_int(advice)) == 0


def prctl(option: int, arg2: int = 0) -> None:
    """prctl(2) for integer-argument options."""
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)), f"prctl({option})")


def compile_seccomp_filter(binary_tree: bool = True) -> bytes | None:
    """Raw BPF of the deny-list filter, or None when libseccomp is unavailable.

    binary_tree: a binary search over the syscall numbers instead of a linear list. The same
    decisions, in fewer instructions per syscall and in a fraction of the time the kernel
    spends at installation working out, for every syscall number, whether the filter allows
    it unconditionally (its per-filter cache). libseccomp < 2.5 ignores it.
    """
    path = ctypes.util.find_library("seccomp")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                     ctypes.c_uint]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        return None
    try:
        if binary_tree:
            lib.seccomp_attr_set(ctx, _SCMP_FLTATR_CTL_OPTIMIZE, _SCMP_OPTIMIZE_BINARY_TREE)
        for name in DENIED_SYSCALLS:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number >= 0 and lib.seccomp_rule_add(ctx, _SCMP_ACT_ERRNO_EPERM, number, 0) != 0:
                return None
        fd = os.memfd_create("seccomp-bpf")
        try:
            if lib.seccomp_export_bpf(ctx, fd) != 0:
                return None
            os.lseek(fd, 0, os.SEEK_SET)
            return os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


class SeccompProgram:
    """A compiled BPF program kept in memory so that forked children can install it cheaply."""

    def __init__(self, bpf: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self._prog = _SockFprog(len(bpf) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))

    def install(self) -> None:
        """Apply no_new_privs and the filter to the calling process (irreversible)."""
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                           ctypes.byref(self._prog), ctypes.c_ulong(0), ctypes.c_ulong(0)),
               "prctl(PR_SET_SECCOMP)")
