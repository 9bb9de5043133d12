"""Red-team attacks on what one snippet could leave for, or take from, the next.

Canaries are split in two halves in the searching snippet's source, so that the searcher never
holds the whole canary itself: a hit means the data came from an earlier snippet.
"""

import errno
import os

import pytest

from agentic_jax.sandbox import Sandbox, SandboxConfig
from tests.sandbox.conftest import WIDE, probe

TIMEOUT_MS = 30_000
# (first half, second half): the earlier snippet's code holds the code canary, prints the
# stdout canary (built at run time, so its code never holds it) and its tests hold the answer.
CODE = ("CANARYCODE", "-a91f7c0d3b")
STDOUT = ("CANARYOUT", "-5e2b18d4c7")
TESTS = ("CANARYTEST", "-77c3e9a1f0")
EXPECTED = ("CANARYANSWER", "-0d4f6b2a91")

_FOUND = """
def found(data, h1, h2):
    i = data.find(h1)
    while i >= 0:
        if data[i + len(h1):i + len(h1) + len(h2)] == h2:
            return True
        i = data.find(h1, i + 1)
    return False
"""


def _needles(encode: bool) -> str:
    q = (lambda s: f"b{s!r}") if encode else repr
    pairs = ", ".join(f"({q(a)}, {q(b)})" for a, b in (CODE, STDOUT, TESTS, EXPECTED))
    return f"NEEDLES = [{pairs}]\n"


@pytest.fixture(scope="module")
def strict():
    with Sandbox(SandboxConfig(num_workers=1, timeout_ms=TIMEOUT_MS, cache_size=0)) as box:
        yield box


@pytest.fixture(scope="module")
def wide():
    with Sandbox(SandboxConfig(num_workers=1, timeout_ms=TIMEOUT_MS, whitelist=WIDE,
                               memory_mb=200, cache_size=0)) as box:
        yield box


def _leave_canaries(box) -> None:
    code = (f"secret = {''.join(CODE)!r}\n"
            f"print({STDOUT[0]!r} + {STDOUT[1]!r})\n")
    assert box.run(code).ok
    tests = f"# {''.join(TESTS)}\nassert ANSWER == {''.join(EXPECTED)!r}"
    assert box.check_answer(tests, "".join(EXPECTED)).ok


def test_earlier_snippets_are_not_on_the_stack(strict):
    """inspect, reachable through a whitelisted module, walks every frame of the process."""
    _leave_canaries(strict)
    walker = (_needles(False) + _FOUND +
              "from sympy.utilities.lambdify import inspect\n"
              "hits = 0\n"
              "for info in inspect.stack(0):\n"
              "    seen = repr(inspect.getargvalues(info.frame).locals)\n"
              "    hits += sum(found(seen, a, b) for a, b in NEEDLES)\n"
              "print('frames', len(inspect.stack(0)), 'hits', hits)\n")
    result = strict.run(walker)
    assert result.ok, result
    assert result.stdout.endswith("hits 0\n"), result.stdout
    probe(strict)


def test_earlier_snippets_are_not_in_the_address_space(wide):
    """The child makes itself dumpable and reads every readable mapping via /proc/self/mem."""
    _leave_canaries(wide)
    scanner = (_needles(True) + _FOUND +
               "import ctypes, os\n"
               "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
               "fd, parts = os.open('/proc/self/maps', os.O_RDONLY), []\n"
               "while part := os.read(fd, 1 << 16):\n    parts.append(part)\n"
               "maps = b''.join(parts).decode()\n"
               "mem = os.open('/proc/self/mem', os.O_RDONLY)\n"
               "hits, scanned, step, pad = [0, 0, 0, 0], 0, 1 << 20, 64\n"
               "for line in maps.splitlines():\n"
               "    span, perms = line.split()[:2]\n"
               "    lo, hi = (int(x, 16) for x in span.split('-'))\n"
               "    if perms[0] != 'r' or lo >= 1 << 62:\n"
               "        continue\n"
               "    for at in range(lo, hi, step):\n"
               "        try:\n"
               "            chunk = os.pread(mem, min(step + pad, hi - at), at)\n"
               "        except OSError:\n"
               "            continue\n"
               "        scanned += len(chunk)\n"
               "        for k, (a, b) in enumerate(NEEDLES):\n"
               "            hits[k] += found(chunk, a, b)\n"
               "print('scanned', scanned > 10 ** 7, 'hits', hits)\n")
    result = wide.run(scanner)
    assert result.ok, result
    assert result.stdout == "scanned True hits [0, 0, 0, 0]\n", result.stdout
    probe(wide)


def test_sysv_ipc_objects_do_not_reach_the_next_snippet(wide):
    key = 0x5A17C0DE
    libc = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    wide.run(libc + f"print(libc.shmget({key}, 4096, 0o1666), libc.msgget({key}, 0o1666), "
                    f"libc.semget({key}, 1, 0o1666))")
    later = wide.run(libc + f"print(libc.shmget({key}, 0, 0), libc.msgget({key}, 0), "
                            f"libc.semget({key}, 0, 0))")
    assert later.stdout == "-1 -1 -1\n", later
    listing = wide.run("import os\nfor f in ('shm', 'msg', 'sem'):\n"
                       "    try:\n"
                       "        print(len(os.read(os.open('/proc/sysvipc/' + f, os.O_RDONLY),"
                       " 1 << 16).splitlines()))\n"
                       "    except FileNotFoundError:\n        print('hidden')")
    # Header lines only, or no listing at all where /proc holds process entries only.
    assert listing.stdout in ("1\n1\n1\n", "hidden\nhidden\nhidden\n"), listing
    probe(wide)


@pytest.mark.parametrize("attack", ["shm", "memfd"])
def test_memory_outside_the_address_space_limit_is_refused(wide, attack):
    """SysV shm (detached) and memfd pages are not mapped, so RLIMIT_AS alone misses them."""
    if attack == "shm":  # 64 MB segments, each touched then detached (never removed)
        code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "libc.shmat.restype = ctypes.c_void_p\nheld = 0\n"
                "for _ in range(6):\n"
                "    seg = libc.shmget(0, 64 << 20, 0o1600)\n"
                "    addr = libc.shmat(seg, None, 0) if seg >= 0 else None\n"
                "    if addr in (None, 2 ** 64 - 1):\n        break\n"
                "    ctypes.memset(addr, 1, 64 << 20)\n"
                "    libc.shmdt(ctypes.c_void_p(addr))\n    held += 64\n"
                "print(held)")
    else:  # RLIMIT_FSIZE caps one file, so many memfds of 15 MB each
        code = ("import os\nheld = 0\ntry:\n    for _ in range(40):\n"
                "        fd = os.memfd_create('m')\n        for _ in range(15):\n"
                "            os.write(fd, b'x' * (1 << 20))\n            held += 1\n"
                "except OSError:\n    pass\nprint(held)")
    result = wide.run(code)
    held = int(result.stdout) if result.ok else 0
    assert held < wide.cfg.memory_mb, result
    probe(wide)


def test_deep_directory_tree_does_not_break_the_next_request(wide):
    code = ("import os\nfor _ in range(2500):\n    os.mkdir('d')\n    os.chdir('d')\n"
            "print(len(os.getcwd()) > 5000)")
    pids = wide.worker_pids()
    result = wide.run(code)
    assert result.ok and result.stdout == "True\n", result
    probe(wide)
    probe(wide)
    assert wide.worker_pids() == pids


_FILLS = {  # each prints the errno that stopped it
    "bytes": "import os\ni = 0\ntry:\n    while True:\n"
             "        os.write(os.open(f'f{i}', os.O_WRONLY | os.O_CREAT), b'x' * (1 << 20))\n"
             "        i += 1\nexcept OSError as e:\n    print(e.errno)",
    "inodes": "import os\ni = 0\ntry:\n    while True:\n        os.mkdir(f'd{i}')\n"
              "        i += 1\nexcept OSError as e:\n    print(e.errno)",
    "scratch root": "import os\ni = 0\ntry:\n    while True:\n        os.mkdir(f'../d{i}')\n"
                    "        i += 1\nexcept OSError as e:\n    print(e.errno)",
}


@pytest.mark.parametrize("fill", sorted(_FILLS))
def test_a_snippet_that_fills_its_scratch_leaves_the_next_unaffected(wide, fill):
    """The next snippets run on the same worker in a fresh, empty working directory with the
    whole disk budget. The scratch root above the working directories is a read-only mount,
    not merely a directory the snippet's user may not write: where the worker runs
    unprivileged, snippets are its user namespace's root and permissions stop nothing (there,
    filling the root once kept the worker from making the next working directory)."""
    if not wide.layers["private_filesystem"]:
        pytest.skip("no mount namespace on this machine: working directories are host ones")
    pids, restarts = wide.worker_pids(), wide.stats()["restarts"]
    filled = wide.run(_FILLS[fill])
    stopped_by = errno.EROFS if fill == "scratch root" else errno.ENOSPC
    assert filled.ok and filled.stdout == f"{stopped_by}\n", filled
    for _ in range(4):
        fresh = wide.run("import os\nprint(os.listdir('.'))\n"
                         "fd = os.open('g', os.O_WRONLY | os.O_CREAT)\nfor _ in range(12):\n"
                         "    os.write(fd, b'y' * (1 << 20))\nprint(os.fstat(fd).st_size >> 20)")
        assert fresh.ok and fresh.stdout == "[]\n12\n", fresh
    probe(wide)
    assert wide.worker_pids() == pids and wide.stats()["restarts"] == restarts


@pytest.mark.parametrize("payload", ["b'[' * 60_000", "b'{\"error\": ' * 6_000",
                                     "b'{\"error\": \"x\", \"detail\": \"' + b'y' * 10 ** 6"])
def test_forged_result_cannot_break_the_parser(wide, payload):
    pids = wide.worker_pids()
    result = wide.run(f"import os\nos.write(3, {payload})\nos._exit(0)")
    assert result.error == "SystemError", result
    probe(wide)
    assert wide.worker_pids() == pids  # the worker itself did not crash


def test_lambdify_with_default_modules_works(strict):
    code = ("import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, x**2 + 1)\n"
            "print(f(3.0))\nimport numpy\nprint(f(numpy.arange(3.0)))")
    result = strict.run(code)
    assert result.ok and result.stdout == "10.0\n[1. 2. 5.]\n", result
    probe(strict)


def test_dev_holds_only_what_the_math_libraries_need(wide):
    result = wide.run("import os\nprint(sorted(os.listdir('/dev')))\n"
                      "print(len(os.urandom(8)), os.read(os.open('/dev/zero', os.O_RDONLY), 2))")
    assert result.ok, result
    listing = eval(result.stdout.splitlines()[0])
    assert set(listing) <= {"null", "zero", "full", "random", "urandom", "fd", "stdin",
                            "stdout", "stderr"}, listing
    assert result.stdout.splitlines()[1] == "8 b'\\x00\\x00'"
    host = [d for d in os.listdir("/dev") if d.startswith(("nvidia", "accel", "vfio", "kvm"))]
    for name in host:
        seen = wide.run(f"import os\nprint(os.path.exists('/dev/{name}'))")
        assert seen.stdout == "False\n", name
