"""A warm worker ("zygote"): imports the whitelist once, isolates itself, serves snippets.

Started by the host as `python -I -c BOOT ROOT CONFIG_JSON` with one end of a Unix socket
pair (the channel, see `server`) as descriptor cfg["channel_fd"]. Layout with namespaces:
    outer process (host's child)  -- waits only
      └ server, PID 1 of a new PID namespace: reads requests, supervises children, reports
          ├ template: forked before the first request; forks every child (CLONE_PARENT)
          └ one short-lived child per snippet (new session, cgroup, limits, nobody, seccomp)
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import socket
import tempfile

from agentic_jax.sandbox import cgroup, child, isolation, server, syscalls, template, view
from agentic_jax.sandbox.child import ChildPlan
from agentic_jax.sandbox.scratch import Workdirs, remove_tree

# Headroom of the memory cgroup beyond the snippet's own budget: copy-on-write copies of the
# worker's pages (at most its resident size) plus kernel objects such as page tables and pipes.
_CGROUP_SLACK_BYTES = 32 << 20


def _warm_sympy(sympy) -> None:
    x = sympy.Symbol("x")
    sympy.solve(x**2 - 4, x)
    sympy.integrate(x * sympy.sin(x), x)
    sympy.diff(sympy.exp(x**2), x)
    # The first definite integral, surd root and printed derivative each cost a fresh child
    # 5-13 ms of one-time set-up (rule tables, printer dispatch) that the template can hold.
    str(sympy.integrate(x**3 - x, (x, 0, 2)))
    str(sympy.solve(x**2 - 3 * x - 1, x))
    str(sympy.diff(sympy.sin(x) * x**3, x))
    sympy.simplify((x**2 - 1) / (x - 1))
    sympy.factor(x**3 - x)
    sympy.limit(sympy.sin(x) / x, x, 0)
    sympy.Matrix([[1, 2], [3, 4]]).det()
    str(sympy.Rational(1, 3) + sympy.sqrt(2))
    sympy.latex(x**2)
    sympy.nsimplify(0.5)
    sympy.isprime(97)


def _warm_numpy(numpy) -> None:
    a = numpy.arange(12.0).reshape(3, 4)
    numpy.linalg.solve(numpy.eye(3) * 2.0, numpy.ones(3))
    str(a @ a.T)
    numpy.fft.fft(a[0])
    numpy.random.default_rng(0).random(3)
    numpy.polyfit(numpy.arange(4.0), numpy.arange(4.0), 1)


# Run in this order, after every import: the last warmer leaves the interpreter's shared caches
# (the type attribute cache, the libraries' memo caches) holding what its own calls looked up.
# Sympy's runs last: snippets repeat its lookups most, and each lookup that misses in a child
# writes to, and so copies, pages the child shares with the template (a tenth fewer copied
# pages per sympy snippet than with numpy's last).
_WARMERS = {"numpy": _warm_numpy, "sympy": _warm_sympy}


def warm_up(whitelist: list[str]) -> list[str]:
    """Import and exercise the whitelisted modules; returns those that failed to import."""
    missing, modules = [], {}
    for name in whitelist:
        try:
            modules[name] = importlib.import_module(name)
        except Exception:  # a bad whitelist entry must not stop the worker
            missing.append(name)
    for name, warmer in _WARMERS.items():
        if name in modules:
            warmer(modules[name])
    return missing


def main(config_json: str) -> None:
    """Worker entry point; never returns."""
    cfg = json.loads(config_json)
    channel_fd = cfg["channel_fd"]
    missing = warm_up(cfg["whitelist"])
    bpf = syscalls.compile_seccomp_filter()
    memcg = _open_cgroup(cfg)
    is_root = os.geteuid() == 0
    layers = isolation.enter_namespaces(is_root)
    if layers["pid_namespace"]:
        _become_pid_one(channel_fd)
    syscalls.set_process_name("sandbox-server")
    scratch, host_visible = _prepare_scratch(cfg, layers)
    layers.update(privilege_drop=is_root, seccomp=bpf is not None, resource_limits=True,
                  memory_cgroup=memcg is not None, clean_template=True)
    uid, gid = (cfg["uid"], cfg["gid"]) if is_root else (None, None)
    plan = ChildPlan(
        memory_bytes=isolation.current_address_space() + cfg["memory_mb"] * (1 << 20),
        file_bytes=cfg["disk_mb"] * (1 << 20), open_files=cfg["max_open_files"], uid=uid,
        gid=gid, seccomp=syscalls.SeccompProgram(bpf) if bpf else None,
        whitelist=frozenset(cfg["whitelist"]))
    prepared = child.prepare(plan)
    gc.collect()
    gc.freeze()  # keeps the collector from touching (and copying) inherited pages in children
    isolation.collapse_to_huge_pages()
    # The host gives up on a worker grace_ms after a snippet's deadline; a lost template must
    # be noticed well before, so that the request is reported as never started.
    forker = template.start(lambda workdir, fds: child.run_child(plan, prepared, workdir, fds),
                            drop=[channel_fd], timeout_s=cfg["grace_ms"] / 3e3,
                            settle=lambda: _settle_template(memcg))
    workdirs = Workdirs(scratch, cfg["disk_mb"], mounts=not host_visible, uid=uid, gid=gid)
    channel = socket.socket(fileno=channel_fd)
    try:
        channel.send(json.dumps({"ready": True, "layers": layers, "missing": missing,
                                 "scratch": scratch if host_visible else None}).encode())
        server.Server(forker, workdirs, memcg, channel).serve()
    finally:
        if host_visible:
            remove_tree(scratch)
    os._exit(0)


def _settle_template(memcg: cgroup.WorkerCgroup | None) -> None:
    """Run in the template once, before its first fork. The fork from the server left every
    page shared, so the template's first writes split its huge pages: they are collapsed
    again (charged, like all the worker's own memory, outside the snippets' cgroup). Then the
    template enters the worker's memory cgroup, so that every child is born in it: no child
    moves between cgroups, a move that costs CPU and, when no other move is under way, waits
    for an RCU grace period (about 10 ms here)."""
    isolation.collapse_to_huge_pages()
    if memcg is not None:
        cgroup.join(memcg.procs_fd)
        os.close(memcg.procs_fd)
        os.close(memcg.events_fd)


def _open_cgroup(cfg: dict) -> cgroup.WorkerCgroup | None:
    """Limit the worker's cgroup (created by the host) to the snippet budget plus headroom."""
    path = cfg.get("cgroup")
    if not path:
        return None
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    limit = (cfg["memory_mb"] + cfg["disk_mb"]) * (1 << 20) + resident + _CGROUP_SLACK_BYTES
    try:
        return cgroup.WorkerCgroup(path, limit)
    except OSError:
        return None


def _become_pid_one(channel_fd: int) -> None:
    """Fork the serving process into the new PID namespace; the outer one only waits.

    Should the outer process die before the death signal is armed, the host still reaches the
    inner one: it stays in the same process group, which the host kills as a whole.
    """
    pid = os.fork()
    if pid:
        os.close(channel_fd)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)


def _prepare_scratch(cfg: dict, layers: dict) -> tuple[str, bool]:
    """Scratch root for per-snippet directories; (path, whether the host can see it)."""
    layers["private_filesystem"] = False
    if layers["mount_namespace"]:
        try:
            scratch = view.build()
            layers["private_filesystem"] = True
            return scratch, False
        except OSError:
            pass
    scratch = tempfile.mkdtemp(prefix="agentic_jax_sandbox_")
    return scratch, True
