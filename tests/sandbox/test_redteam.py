"""Red-team attacks. Each asserts the side effect did not happen, the call returned within its
bound, and the sandbox still runs fresh code afterwards (a unique probe the cache cannot answer).

`strict` has the default whitelist (realistic attacks through sympy/numpy); `wide` whitelists
os/subprocess/ctypes/socket/... to model a complete bypass of the static layer, so that the OS
layer is tested on its own.
"""

import os
import socket
import threading
import time

import pytest

from agentic_jax.sandbox import Sandbox, SandboxConfig
from agentic_jax.sandbox.child import CHILD_ENV
from agentic_jax.sandbox.view import DEVICES, ETC_FILES, SCRATCH, SYSTEM_DIRS, import_paths
from tests.sandbox.conftest import probe

TIMEOUT_MS = 2000  # generous: lazy imports are slow on a loaded machine
WIDE = ("sympy", "numpy", "math", "os", "sys", "subprocess", "ctypes", "socket", "signal",
        "threading", "resource", "importlib", "shutil", "pathlib", "builtins", "gc")
SECRET = "s3cr3t-7f1c2a9e"


@pytest.fixture(scope="module")
def strict():
    with Sandbox(SandboxConfig(num_workers=2, timeout_ms=TIMEOUT_MS)) as box:
        yield box


@pytest.fixture(scope="module")
def wide():
    with Sandbox(SandboxConfig(num_workers=2, timeout_ms=TIMEOUT_MS, whitelist=WIDE,
                               cache_size=0)) as box:
        yield box


@pytest.fixture(scope="module")
def host_files(tmp_path_factory):
    """A world-writable directory and a world-readable secret, as permissive as a host could be."""
    root = tmp_path_factory.mktemp("host")
    os.chmod(root, 0o777)
    for parent in root.parents:
        if str(parent).startswith("/tmp/"):
            os.chmod(parent, 0o755)
    secret = root / "secret.txt"
    secret.write_text(SECRET)
    os.chmod(secret, 0o644)
    private = root / "private.txt"
    private.write_text(SECRET)
    os.chmod(private, 0o600)
    return root


def attack(box, code, timeout_ms=TIMEOUT_MS):
    """Run one attack; assert the bound and that the sandbox still serves."""
    pids = box.worker_pids()
    start = time.monotonic()
    result = box.run(code, timeout_ms=timeout_ms)
    assert time.monotonic() - start < timeout_ms / 1e3 + 3.0, "call exceeded its bound"
    probe(box)
    return result, pids


def blocked(box, code, **kw):
    result, _ = attack(box, code, **kw)
    assert not result.ok, result
    return result


# --- static layer: introspection escapes -------------------------------------------------
@pytest.mark.parametrize("code", [
    "print(().__class__.__bases__[0].__subclasses__())",
    "[c for c in object.__subclasses__() if c.__name__ == 'Popen']",
    "g = (i for i in [1])\nprint(g.gi_frame.f_globals)",
    "try:\n    1/0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame.f_back.f_globals)",
    "print(__builtins__['eval'])",
    "f = lambda: 0\nprint(f.__globals__['__builtins__'])",
    "print(getattr(1, '__cl' + 'ass__'))",
    "print('{0.__class__.__base__}'.format(1))",
    "import importlib\nimportlib.import_module('os')",
    "from sympy import __builtins__ as b",
    "e = eval\ne('1')",
    "import sympy\nsympy.__loader__",
])
def test_static_escapes_rejected(strict, code):
    result = blocked(strict, code)
    assert result.error in ("SecurityError", "ImportError")


# --- OS layer reached through whitelisted modules -----------------------------------------
def test_eval_via_sympify_cannot_write_files(strict, host_files):
    marker = host_files / "pwned_sympify"
    code = (f"import sympy\nsympy.sympify(\"__import__('os').system('touch {marker}')\")")
    attack(strict, code)
    assert not marker.exists()


def test_eval_via_lambdify_cannot_read_secrets(strict, host_files):
    code = ("import sympy\nx = sympy.Symbol('x')\n"
            f"f = sympy.lambdify(x, \"open('{host_files / 'secret.txt'}').read()\")\nprint(f(1))")
    result, _ = attack(strict, code)
    assert SECRET not in result.stdout and not result.ok


def test_numpy_ctypes_system_is_denied(strict, host_files):
    marker = host_files / "pwned_ctypes"
    code = ("import numpy\nlibc = numpy.ctypeslib.ctypes.CDLL(None)\n"
            f"print(libc.system(b'touch {marker}'))")
    attack(strict, code)
    assert not marker.exists()


def test_numpy_ctypes_cannot_kill_the_worker(strict):
    code = ("import numpy\nlibc = numpy.ctypeslib.ctypes.CDLL(None)\n"
            "print(libc.kill(libc.getppid(), 9))")
    result, pids = attack(strict, code)
    assert result.stdout.strip() == "-1" and strict.worker_pids() == pids


def test_numpy_ctypes_null_dereference_is_a_contained_crash(strict):
    result = blocked(strict, "import numpy\nnumpy.ctypeslib.ctypes.string_at(0)")
    assert result.error == "SystemError" and "SIGSEGV" in result.message


def test_sympy_test_runner_os_system_is_denied(strict, host_files):
    marker = host_files / "pwned_runtests"
    code = f"from sympy.testing import runtests\nprint(runtests.os.system('touch {marker}'))"
    attack(strict, code)
    assert not marker.exists()


def test_sympy_test_runner_subprocess_is_denied(strict, host_files):
    marker = host_files / "pwned_subprocess"
    code = (f"from sympy.testing import runtests\nruntests.subprocess.run(['touch', '{marker}'])")
    assert blocked(strict, code).error == "PermissionError"
    assert not marker.exists()


def test_numpy_save_outside_the_workdir_fails(strict, host_files):
    target = host_files / "pwned.npy"
    blocked(strict, f"import numpy\nnumpy.save('{target}', numpy.arange(3))")
    blocked(strict, "import numpy\nnumpy.arange(3).tofile('/work/pwned.bin')")
    assert not target.exists() and not os.path.exists("/work/pwned.bin")


def test_numpy_reads_of_host_secrets_fail(strict, host_files):
    for name in ("secret.txt", "private.txt"):
        code = (f"import numpy\nprint(numpy.fromfile('{host_files / name}', "
                "dtype='uint8').tobytes())")
        result = blocked(strict, code)
        assert SECRET not in result.stdout
    result = blocked(strict, "import numpy\nprint(numpy.loadtxt('/etc/shadow', dtype=str))")
    assert "root" not in result.stdout


def test_numpy_file_written_in_workdir_does_not_persist(strict):
    first, _ = attack(strict, "import numpy\nnumpy.save('keep.npy', numpy.arange(3))\n"
                              "print(numpy.load('keep.npy').sum())")
    assert first.stdout == "3\n"
    second, _ = attack(strict, "import numpy\nnumpy.load('keep.npy')")
    assert second.error == "FileNotFoundError"


def test_sympy_misc_os_environment_holds_only_thread_settings(strict):
    result, _ = attack(strict, "from sympy.utilities import misc\nprint(dict(misc.os.environ))")
    assert eval(result.stdout) == CHILD_ENV


# --- OS layer on its own (static layer bypassed) -------------------------------------------
def test_fork_burst_is_denied(wide):
    result = blocked(wide, "import os\nfor _ in range(200):\n    os.fork()")
    assert result.error in ("PermissionError", "BlockingIOError")


def test_exec_and_subprocess_are_denied(wide, host_files):
    marker = host_files / "pwned_exec"
    blocked(wide, f"import subprocess\nsubprocess.run(['/bin/sh', '-c', 'touch {marker}'])")
    blocked(wide, f"import os\nos.execv('/bin/touch', ['touch', '{marker}'])")
    attack(wide, f"import os\nos.system('touch {marker}')")
    assert not marker.exists()


def test_threads_cannot_be_started(wide):
    result = blocked(wide, "import threading\nt = threading.Thread(target=print)\nt.start()")
    assert result.error == "RuntimeError"


def test_loopback_connection_never_arrives(wide):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(1.0)
    port = server.getsockname()[1]
    accepted = []

    def serve():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    blocked(wide, f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), 0.2)")
    thread.join()
    server.close()
    assert not accepted


def test_no_network_at_all(wide):
    assert blocked(wide, "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                   ).error == "PermissionError"
    assert blocked(wide, "import socket\nsocket.socket(socket.AF_UNIX)").error == "PermissionError"


def test_killing_parent_or_group_does_nothing(wide):
    for code in ("import os\nos.kill(os.getppid(), 9)", "import os\nos.killpg(0, 9)",
                 "import os\nos.kill(-1, 9)", "import os\nos.kill(1, 9)"):
        result, pids = attack(wide, code)
        assert result.error == "PermissionError" and wide.worker_pids() == pids


def test_environment_and_proc_environ_leak_nothing(wide):
    os.environ["AGENTIC_JAX_TEST_SECRET"] = SECRET
    try:
        code = ("import os\nprint(dict(os.environ))\nfor pid in os.listdir('/proc'):\n"
                "    if pid.isdigit():\n        for f in ('environ', 'cmdline'):\n"
                "            try:\n"
                "                print(os.read(os.open(f'/proc/{pid}/{f}', os.O_RDONLY), 4096))\n"
                "            except OSError as e:\n                print(pid, f, e.errno)")
        result, _ = attack(wide, code)
        assert result.ok, result
        assert SECRET not in result.stdout
        assert eval(result.stdout.splitlines()[0]) == CHILD_ENV
        assert str(os.getpid()) not in result.stdout.split()
    finally:
        del os.environ["AGENTIC_JAX_TEST_SECRET"]


def test_proc_shows_only_the_sandbox(wide):
    """Every process in /proc is one of this worker's: the server (the PID namespace's init),
    the template and children. How many children is a matter of timing, not of isolation:
    besides this one and those prepared ahead, earlier ones linger until the server reaps
    them (the host starts the next snippet without waiting for that), and a child just
    forked still bears the template's name."""
    code = ("import os\nfor pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):\n"
            "    try:\n"
            "        stat = os.read(os.open(f'/proc/{pid}/stat', os.O_RDONLY), 4096).decode()\n"
            "    except OSError:\n        continue  # reaped meanwhile\n"
            "    print(pid, stat[stat.index('(') + 1:stat.rindex(')')], pid == os.getpid())\n")
    result, _ = attack(wide, code)
    assert result.ok, result
    processes = [line.split() for line in result.stdout.splitlines()]
    assert processes[0] == ["1", "sandbox-server", "False"], processes
    assert {name for _, name, _ in processes[1:]} <= {"sandbox-tmpl", "sandbox-child"}, processes
    assert [name for _, name, me in processes if me == "True"] == ["sandbox-child"], processes


def test_reading_host_files_fails(wide, host_files):
    for path in (host_files / "secret.txt", host_files / "private.txt", "/root/.bashrc",
                 "/etc/shadow", "/work/shared/DESIGN.md"):
        result, _ = attack(wide, f"import pathlib\nprint(pathlib.Path('{path}').read_text())")
        assert not result.ok and SECRET not in result.stdout and "root:" not in result.stdout


def test_the_view_holds_no_host_configuration_or_checkout_metadata(wide):
    """Host files a snippet could read without any escape: accounts, names, network, hardware
    and the checkout's version-control metadata (.git of each import path)."""
    if not wide.layers["private_filesystem"]:
        pytest.skip("no mount namespace on this machine: the view is the host's")
    checkouts = [p for p in import_paths() if os.path.exists(os.path.join(p, ".git"))]
    paths = ["/etc/passwd", "/etc/group", "/etc/resolv.conf", "/etc/hostname", "/etc/hosts",
             "/etc/machine-id", "/proc/cpuinfo", "/proc/meminfo", "/proc/version",
             "/proc/cmdline", "/sys/class/net", "/sys/devices"]
    paths += [os.path.join(p, ".git", name) for p in checkouts for name in ("", "config")]
    code = ("import os\nfor p in %r:\n    try:\n"
            "        n = len(os.listdir(p) if os.path.isdir(p)\n"
            "                else os.read(os.open(p, os.O_RDONLY), 1 << 16))\n"
            "    except OSError:\n        n = 0\n    if n:\n        print(p, n)\n"
            "print(sorted(os.listdir('/etc')))\n" % paths)
    result, _ = attack(wide, code)
    assert result.ok, result
    *leaks, etc = result.stdout.splitlines()
    assert leaks == [] and set(eval(etc)) <= set(ETC_FILES)


def _in_the_view(mount_point: str) -> bool:
    """Whether a mount point belongs to the sandbox's own view (see `view`)."""
    exact = {"/", "/proc", "/sys", "/etc", "/dev", SCRATCH, *(f"/etc/{n}" for n in ETC_FILES),
             *(f"/dev/{n}" for n in DEVICES)}
    trees = [SCRATCH, *(f"/{d}" for d in SYSTEM_DIRS), *import_paths()]
    return mount_point in exact or any(
        mount_point == t or mount_point.startswith(t + "/") for t in trees)


def test_mount_tables_list_only_the_view(wide):
    """/proc's mount tables (any process's) name no host mount point: the host's tree is
    detached from the view, not merely covered."""
    if not wide.layers["private_filesystem"]:
        pytest.skip("no mount namespace on this machine: the view is the host's")
    tables = ["/proc/mounts", "/proc/self/mounts", "/proc/self/mountinfo",
              "/proc/self/mountstats", "/proc/1/mounts", "/proc/1/mountinfo"]
    # The mount point is field 2 of a mounts line, field 5 of mountinfo and of mountstats.
    code = ("import os\nfor p in %r:\n    try:\n"
            "        text = os.read(os.open(p, os.O_RDONLY), 1 << 20).decode()\n"
            "    except OSError:\n        continue\n"
            "    field = 1 if p.endswith('/mounts') else 4\n"
            "    print(p, sorted({l.split()[field] for l in text.splitlines() if l.strip()}))\n"
            % tables)
    result, _ = attack(wide, code)
    assert result.ok, result
    read = {line.split(" ", 1)[0]: eval(line.split(" ", 1)[1])
            for line in result.stdout.splitlines()}
    assert "/proc/self/mountinfo" in read  # readable, so the listing itself is what is checked
    leaks = {p: [m for m in points if not _in_the_view(m)] for p, points in read.items()}
    assert not any(leaks.values()), leaks


def test_runs_unprivileged_and_cannot_regain_root(wide):
    result, _ = attack(wide, "import os\nprint(os.getuid(), os.geteuid(), os.getgid())")
    assert result.stdout == "65534 65534 65534\n"
    assert blocked(wide, "import os\nos.setuid(0)").error == "PermissionError"


def test_resource_limits_cannot_be_raised(wide):
    code = ("import resource\nresource.setrlimit(resource.RLIMIT_AS, "
            "(resource.RLIM_INFINITY, resource.RLIM_INFINITY))")
    assert blocked(wide, code).error in ("ValueError", "PermissionError")


def test_symlink_escapes_fail(wide, host_files):
    target = host_files / "pwned_symlink"
    code = (f"import os\nos.symlink('{host_files / 'secret.txt'}', 'l')\n"
            "print(os.read(os.open('l', os.O_RDONLY), 100))")
    assert SECRET not in blocked(wide, code).stdout
    code = (f"import os\nos.symlink('{target}', 'w')\nos.write(os.open('w', os.O_WRONLY | "
            "os.O_CREAT), b'x')")
    blocked(wide, code)
    assert not target.exists()


def test_writes_outside_workdir_fail(wide):
    for path in ("/work/main/pwned.txt", "/etc/pwned", "/usr/pwned", "/dev/shm/pwned",
                 "/var/tmp/pwned"):
        blocked(wide, f"import pathlib\npathlib.Path('{path}').write_text('x')")
        assert not os.path.exists(path)


def test_ptrace_mount_unshare_via_ctypes_denied(wide):
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.ptrace(16, 1, 0, 0), libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), "
            "libc.unshare(0x40000000), libc.setns(0, 0))")
    result, _ = attack(wide, code)
    assert result.stdout == "-1 -1 -1 -1\n"


def test_importlib_loader_tricks_stay_inside(wide, host_files):
    marker = host_files / "pwned_loader"
    code = ("import importlib.util, pathlib\npathlib.Path('m.py').write_text("
            f"\"import os\\nos.system('touch {marker}')\\n\")\n"
            "spec = importlib.util.spec_from_file_location('m', 'm.py')\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\nprint('ran')")
    result, _ = attack(wide, code)
    assert result.stdout == "ran\n" and not marker.exists()


def test_large_file_write_is_capped(wide):
    result = blocked(wide, "import os\nfd = os.open('big', os.O_WRONLY | os.O_CREAT)\n"
                           "for _ in range(64):\n    os.write(fd, b'x' * 2**20)")
    assert result.error == "OSError"


def test_forged_result_and_closed_pipes_are_handled(wide):
    forged = blocked(wide, "import os\nos.write(3, b'{\"error\": 1, \"exec_ms\": NaN}')\n"
                           "os._exit(0)")
    assert forged.error == "SystemError"
    start = time.monotonic()
    closed = blocked(wide, "import os\nfor fd in (1, 2, 3):\n    os.close(fd)\nwhile True:\n"
                           "    pass", timeout_ms=5000)
    assert closed.error == "SystemError" and time.monotonic() - start < 2.0


# --- resource exhaustion -------------------------------------------------------------------
@pytest.mark.parametrize("code", [
    "x = bytearray(2**31)",
    "x = [0] * 10**9",
    "import numpy\nx = numpy.ones((50_000, 50_000))",
    "import numpy\nx = numpy.zeros(10**9)\nx[:] = 1",
    "a = []\nwhile True:\n    a.append('x' * 10**6)",
    "s = 'x'\nwhile True:\n    s = s + s",
])
def test_memory_bombs(strict, code):
    assert blocked(strict, code, timeout_ms=3000).error == "MemoryError"


@pytest.mark.parametrize("code", [
    "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n"
    "        pass",
    "import math\nwhile True:\n    try:\n        math.factorial(10**6)\n    except BaseException:\n"
    "        continue",
    "x = 10**(10**8)",
])
def test_cpu_loops_that_swallow_exceptions_time_out(strict, code):
    assert blocked(strict, code, timeout_ms=300).error in ("TimeoutError", "MemoryError")


def test_cpu_loop_ignoring_signals_times_out(wide):
    code = ("import signal\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGALRM):\n"
            "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass")
    assert blocked(wide, code, timeout_ms=300).error == "TimeoutError"


def test_huge_integers(strict):
    assert blocked(strict, "print(10**100000)").error == "ValueError"
    power = blocked(strict, "print(2**2**40)", timeout_ms=300)
    assert power.error in ("MemoryError", "TimeoutError")


def test_output_flood_is_capped(strict):
    result = blocked(strict, "while True:\n    print('A' * 1000)", timeout_ms=300)
    assert result.error == "TimeoutError" and "output truncated" in result.stdout
    assert len(result.stdout) < strict.cfg.max_output_bytes + 200


def test_deep_recursion_and_interpreter_crashes(wide):
    assert blocked(wide, "def f(n):\n    return f(n + 1)\nf(0)").error == "RecursionError"
    crash = blocked(wide, "import sys\nsys.setrecursionlimit(10**7)\n"
                          "def f(n):\n    return f(n + 1)\nf(0)", timeout_ms=1000)
    assert crash.error in ("SystemError", "RecursionError", "MemoryError", "TimeoutError")
    assert blocked(wide, "import ctypes\nctypes.string_at(1)").error == "SystemError"
    assert blocked(wide, "import os\nos.abort()").error == "SystemError"
