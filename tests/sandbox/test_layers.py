"""The building blocks on their own: the memory cgroup, tree removal, the result format, the
sibling fork, the seccomp program, and stateful sessions."""

import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys

import pytest

from agentic_jax.sandbox import Sandbox, SandboxConfig, cgroup, syscalls
from agentic_jax.sandbox.protocol import RESULT_CAP, decode_result, encode_result
from agentic_jax.sandbox.scratch import remove_tree
from tests.sandbox.conftest import probe


@pytest.fixture
def worker_cgroup():
    path = cgroup.create()
    if path is None:
        pytest.skip("no writable memory cgroup on this machine: the rlimits are the only layer")
    yield path
    cgroup.remove(path)


def test_memory_cgroup_kills_what_the_rlimit_does_not_see(worker_cgroup):
    """A process in the cgroup fills memfds (unmapped shmem) past the limit: the kernel kills
    it and the cgroup counts the kill."""
    memcg = cgroup.WorkerCgroup(worker_cgroup, 64 << 20)
    code = ("import os, sys\nos.write(int(sys.argv[1]), b'0')\n"
            "fds = [os.memfd_create('m') for _ in range(16)]\n"
            "for fd in fds:\n    for _ in range(16):\n        os.write(fd, b'x' * (1 << 20))\n"
            "print('held 256 MB')")
    proc = subprocess.run([sys.executable, "-c", code, str(memcg.procs_fd)],
                          pass_fds=(memcg.procs_fd,), capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == -9 and "held" not in proc.stdout, proc
    assert memcg.new_oom_kill() and not memcg.new_oom_kill()
    os.close(memcg.procs_fd)
    os.close(memcg.events_fd)


def test_stale_worker_cgroups_are_swept(worker_cgroup):
    parent = os.path.dirname(worker_cgroup)
    stale = os.path.join(parent, f"{cgroup.PREFIX}999999999-0")
    os.mkdir(stale)
    cgroup.sweep_stale(parent)
    assert not os.path.exists(stale) and os.path.exists(worker_cgroup)


def test_remove_tree_survives_deep_and_long_paths(tmp_path):
    root = tmp_path / "tree"
    os.mkdir(root)
    fd = os.open(root, os.O_RDONLY)
    name = "n" * 100
    for _ in range(1500):  # 150 KB of path: past PATH_MAX and the recursion limit
        os.mkdir(name, dir_fd=fd)
        with open(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd), "w") as f:
            f.write("x")
        os.symlink("/etc/passwd", "link", dir_fd=fd)
        child = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    for i in range(50):
        os.makedirs(root / f"wide{i}" / "a" / "b")
    remove_tree(str(root))
    assert not root.exists() and os.path.exists("/etc/passwd")
    remove_tree(str(root))  # already gone: nothing to do


def test_result_format_round_trip_and_bounds():
    assert decode_result(encode_result(None, "", 1.5), 10) == {"error": None, "detail": "",
                                                                "exec_ms": 1.5}
    data = encode_result("KeyError", "'a'\nsecond line", 2.0)
    assert decode_result(data, len(data))["detail"] == "'a'\nsecond line"
    magic = encode_result(None, "", 0.0).split(b"\n")[0]
    for bad in (b"[" * 60_000, b"", magic + b"\nnan\n\n", magic + b"\n1\nnot a name!\n",
                magic + b"\n-1\n\n", b"other\n1\n\n"):
        assert decode_result(bad, len(bad)) is None, bad
    assert decode_result(data, RESULT_CAP + 1) is None
    long = encode_result("E", "d" * 10**6, 1.0)
    assert len(decode_result(long, len(long))["detail"]) == 2000


def _run_bpf(program: bytes, nr: int, arch: int) -> int:
    """The action a classic BPF seccomp program returns for syscall ``nr`` of ``arch`` (no
    arguments): an interpreter of the instructions libseccomp emits."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *([0] * 6))
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    for _ in range(10 * len(insns)):
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:  # ret k
            return k
        elif code == 0x05:  # ja
            pc += k
        elif code in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x54:  # and k
            acc &= k
        else:
            raise AssertionError(f"instruction {code:#x} not interpreted")
    raise AssertionError("the program did not return")


def test_seccomp_binary_tree_decides_as_the_linear_list():
    """The installed program (a binary search over syscall numbers) returns the same action as
    libseccomp's linear list for every syscall number, of this and of foreign architectures,
    and denies exactly the listed syscalls."""
    tree, linear = syscalls.compile_seccomp_filter(), syscalls.compile_seccomp_filter(False)
    if tree is None:
        pytest.skip("no libseccomp on this machine")
    assert tree != linear
    native = struct.unpack_from("<I", linear, 8 * 1 + 4)[0]  # the arch the program checks first
    numbers = [*range(-1, 1100), *(0x40000000 + n for n in range(600))]
    for arch in (native, 0xC000003E, 0x40000003, 0xC00000B7):
        assert [_run_bpf(tree, n, arch) for n in numbers] == \
            [_run_bpf(linear, n, arch) for n in numbers]
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"))
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    listed = {lib.seccomp_syscall_resolve_name(name.encode())
              for name in syscalls.DENIED_SYSCALLS} - {-1}
    actions = {n: _run_bpf(tree, n, native) for n in range(1100)}
    assert {n for n, action in actions.items() if action == 0x00050001} == listed  # EPERM
    assert {n for n, action in actions.items() if action == 0x7FFF0000} == set(actions) - listed


def test_fork_sibling_makes_a_child_of_the_parent():
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        pid = syscalls.fork_sibling()
        if pid == 0:
            import sympy
            os.write(write_end, f"{os.getpid()} {os.getppid()} {sympy.sqrt(8)}".encode())
            os._exit(5)
        os._exit(0)
    os.close(write_end)
    assert os.waitpid(middle, 0)[1] == 0
    pid, ppid, value = os.read(read_end, 100).decode().split()
    _, status = os.waitpid(int(pid), 0)  # the sibling is this process's child
    assert int(ppid) == os.getpid() and value == "2*sqrt(2)" and os.WEXITSTATUS(status) == 5
    os.close(read_end)


@pytest.fixture(scope="module")
def stateful():
    with Sandbox(SandboxConfig(num_workers=1, stateful=True, timeout_ms=5000)) as box:
        yield box


def test_stateful_session_shares_one_namespace(stateful):
    session = stateful.session()
    assert session.run("import sympy as sp\nx = sp.Symbol('x')\nroots = sp.solve(x**2 - 9, x)\n"
                       "print('first')").stdout == "first\n"
    assert session.run("1 / 0").error == "ZeroDivisionError"  # failed blocks are not kept
    second = session.run("print(roots, sp.diff(x**3, x))")
    assert second.ok and second.stdout == "[-3, 3] 3*x**2\n", second
    assert len(session.history) == 2
    other = stateful.session()
    assert other.run("print(roots)").error == "NameError"  # episodes do not share
    probe(stateful)


def test_stateless_session_forgets(stateful):
    with Sandbox(SandboxConfig(num_workers=1)) as box:
        session = box.session()
        assert session.run("y = 5").ok
        assert session.run("print(y)").error == "NameError" and not session.history


def test_history_blocks_are_validated_and_replay_errors_named(stateful):
    assert stateful.run("print(1)", history=["import os"]).error == "ImportError"
    replay = stateful.run("print(2)", history=["x = 1", "raise ValueError('now')"])
    assert replay.error == "ValueError" and "replaying earlier block 2" in replay.message
    assert stateful.run("print(x + 1)", history=["x = 41\nprint('hidden')"]).stdout == "42\n"
    with pytest.raises(ValueError, match="SandboxConfig.stateful"):
        SandboxConfig(stateful=1)
