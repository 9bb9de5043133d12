"""This process's resident memory: its peak so far, and a reset of that peak (Linux), so a run
can report the peak of its RL steps apart from loading, the warm start and evaluation."""

from __future__ import annotations

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
