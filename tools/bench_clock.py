"""Timing that survives a shared machine: interleaved rounds, CPU time beside wall time, and
the CPU other processes took while each side ran.

    sides = interleaved({"HF generate": hf_fn, "engine": engine_fn}, repeats=3)
    print(ratio_line(sides["engine"], sides["HF generate"], per="token", work=tokens))

Each round runs every function once, in turn (ABAB...), so a busy spell falls on all of them
alike; a side's figure is the median of its rounds. Beside its wall time each run records its
own CPU time (this process, all threads) and the CPU time the rest of the machine used
(``/proc/stat`` busy time less this process's). A ratio of two sides is only printed when the
others' share of the machine differed by at most ``margin`` between them: when a background
job took a core from one side and not the other (torch's OpenMP threads then spin and its wall
time swings by several times), the ratio says nothing about the code and is withheld.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any, Callable

# The most the other processes' share of the machine may differ between two sides (0.10: a
# tenth of all cores) before their ratio is withheld.
MARGIN = 0.10
# Above this share of the machine taken by other processes on both sides, a printed ratio is
# marked indicative: the two sides lost alike, but threads that spin when they lose a core
# (torch's) lose more than threads that wait.
SHARED = 0.25


def _machine_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (``/proc/stat``), or None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class Run:
    """One timed call: wall seconds, this process's CPU seconds and other processes' CPU
    seconds (None where the machine's counters cannot be read)."""

    wall: float
    cpu: float
    others: float | None
    result: Any = None


def timed(fn: Callable[[], Any]) -> Run:
    busy, wall, cpu = _machine_busy_s(), time.perf_counter(), time.process_time()
    result = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = _machine_busy_s()
    others = None if busy is None or after is None else max(0.0, after - busy - cpu)
    return Run(wall, cpu, others, result)


@dataclasses.dataclass(frozen=True)
class Side:
    """A function's runs over the rounds and their medians."""

    name: str
    runs: tuple[Run, ...]

    @property
    def wall(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)

    @property
    def others_share(self) -> float | None:
        """The share of all cores other processes used while this side ran (0..1)."""
        if any(r.others is None for r in self.runs):
            return None
        return sum(r.others for r in self.runs) / (sum(r.wall for r in self.runs) * cpu_count())

    @property
    def cores(self) -> float:
        """Cores this side kept busy on average (its CPU seconds per wall second)."""
        return self.cpu / self.wall if self.wall > 0 else 0.0

    def describe(self, work: float | None = None, per: str = "token") -> str:
        share = self.others_share
        text = (f"{self.name}: wall {self.wall:.3f} s, CPU {self.cpu:.3f} s "
                f"({self.cores:.2f} cores)")
        if work:
            text += (f", {work / self.wall:.1f} {per}/s, "
                     f"{self.cpu / work * 1e3:.2f} CPU-ms/{per}")
        if share is not None:
            text += f"; others used {share:.0%} of the machine"
        return text + f" (median of {len(self.runs)})"


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int = 3,
                warmup: bool = True) -> dict[str, Side]:
    """Every function run ``repeats`` times in turns (after one warm-up call each unless
    ``warmup`` is False)."""
    if repeats < 1:
        raise ValueError(f"repeats: expected >= 1, got {repeats}")
    for fn in fns.values() if warmup else ():
        fn()
    runs: dict[str, list[Run]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            runs[name].append(timed(fn))
    return {name: Side(name, tuple(r)) for name, r in runs.items()}


def fair(a: Side, b: Side, margin: float = MARGIN) -> str | None:
    """None when ``a`` and ``b`` ran on the same share of the machine (other processes' share
    within ``margin`` of each other), else why their ratio would mislead."""
    sa, sb = a.others_share, b.others_share
    if sa is None or sb is None:
        return None  # no machine counters (not Linux): the interleaving is all there is
    if abs(sa - sb) > margin:
        return (f"other processes used {sa:.0%} of the machine during {a.name} and {sb:.0%} "
                f"during {b.name} (more than {margin:.0%} apart)")
    return None


def ratio_line(ours: Side, base: Side, work_ours: float | None = None,
               work_base: float | None = None, per: str = "token",
               margin: float = MARGIN) -> str:
    """``ours`` against ``base``: the speed ratio by wall time and by CPU time (per unit of
    work when the sides did different amounts), or why no ratio is printed."""
    unfair = fair(ours, base, margin)
    if unfair:
        return f"{ours.name} vs {base.name}: ratio withheld: {unfair}"
    wo, wb = work_ours or 1.0, work_base or work_ours or 1.0
    wall = (wo / ours.wall) / (wb / base.wall)
    cpu = (wo / ours.cpu) / (wb / base.cpu) if ours.cpu > 0 and base.cpu > 0 else float("nan")
    unit = f" per {per}" if work_ours else ""
    shares = [s for s in (ours.others_share, base.others_share) if s is not None]
    shared = (f" (others used up to {max(shares):.0%} of the machine on both sides: "
              f"indicative only)" if shares and max(shares) > SHARED else "")
    return (f"{ours.name} vs {base.name}: {wall:.2f}x by wall time, {cpu:.2f}x by CPU "
            f"time{unit}{shared}")


def machine_line() -> str:
    """Cores, the load average and the float32 matmul rate: what absolute times mean here."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"{cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / "
            f"{load[2]:.2f}; float32 2048^2 matmul {matmul_gflops():.0f} GFLOP/s")


def matmul_gflops(size: int = 2048, repeats: int = 5) -> float:
    """The float32 matmul rate through JAX (median of ``repeats``), the machine's practical
    peak for the models benchmarked here."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    walls = [timed(lambda: f(a).block_until_ready()).wall for _ in range(repeats)]
    return 2 * size**3 / statistics.median(walls) / 1e9


def table(sides: dict[str, Side], work: dict[str, float], baselines: list[str],
          per: str = "token", margin: float = MARGIN) -> list[str]:
    """One row a side (work done, rate, CPU-ms per unit, cores used, others' share of the
    machine) and, for every side not a baseline, its ratio against each baseline: by wall
    time and by CPU time, or withheld (`fair`)."""
    lines = [f"{'':<28} {per + 's':>7} {per + '/s':>9} {'CPU-ms/' + per:>13} {'cores':>6} "
             f"{'others':>7}"]
    for name, side in sides.items():
        share = side.others_share
        lines.append(f"{name:<28} {work[name]:>7.0f} {work[name] / side.wall:>9.1f} "
                     f"{side.cpu / work[name] * 1e3:>13.2f} {side.cores:>6.2f} "
                     f"{'n/a' if share is None else f'{share:.0%}':>7}")
    for name, side in sides.items():
        if name in baselines:
            continue
        for base in baselines:
            lines.append("  " + ratio_line(side, sides[base], work[name], work[base], per,
                                           margin))
    return lines
