"""This process's resident memory: its peak so far, and a reset of that peak (Linux), so a run
can report the peak of its RL steps apart from loading, the warm start and evaluation; and a
hand-back of freed host memory to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import re
import resource


def peak_rss_mb() -> float:
    """The peak resident set (MiB) since the process started or since `reset_peak_rss`."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            found = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)
        if found:
            return int(found.group(1)) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_rss() -> bool:
    """Starts the peak again from the memory in use now (Linux 4.0+, /proc/self/clear_refs);
    False where the system cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, or none found)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_host_memory() -> bool:
    """Collects garbage and returns the C heap's free pages to the system (glibc
    ``malloc_trim``); True when it could trim.

    On CPU the arrays an engine frees when it sleeps (its KV pool, its copy of the weights)
    stay resident in glibc's heaps, fragmented by the many allocations of its threads, so an
    update run after a rollout found them neither reusable nor returned: three steps of the
    synchronous SmolLM2-135M RL recipe peaked at 6,510 MB without this call and 4,738 MB with
    it (one machine, one session)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def memory_maps() -> tuple[int, int] | None:
    """(memory mappings this process holds, the kernel's per-process limit
    ``vm.max_map_count``), or None where the system does not say (not Linux). XLA:CPU maps
    about 300 regions for each compiled program of the rollout engine, so a few hundred
    programs reach the default limit of 65,530, past which LLVM cannot map the next one and
    the process dies."""
    try:
        with open("/proc/sys/vm/max_map_count", encoding="ascii") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            in_use = sum(1 for _ in f)
    except (OSError, ValueError):
        return None
    return in_use, limit
