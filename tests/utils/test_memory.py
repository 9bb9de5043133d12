"""agentic_jax.utils.memory: the peak resident set follows a large allocation, and a reset starts
it again from what is in use now; freed heap memory goes back to the system on request."""

import os

import numpy as np
import pytest

from agentic_jax.utils import memory
from agentic_jax.utils.memory import peak_rss_mb, reset_peak_rss


def test_the_peak_follows_an_allocation_and_a_reset_drops_it():
    if not reset_peak_rss():
        pytest.skip("this system cannot reset the peak (/proc/self/clear_refs)")
    base = peak_rss_mb()
    block = np.ones(400 * 2**20 // 8)  # 400 MiB, every page touched
    assert peak_rss_mb() >= base + 350
    del block  # a block this large is its own mapping: freed at once
    assert peak_rss_mb() >= base + 350  # a peak stays
    assert reset_peak_rss()
    assert peak_rss_mb() < base + 100


def _resident_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(memory._malloc_trim() is None or not os.path.exists("/proc/self/statm"),
                    reason="glibc's malloc_trim and Linux's /proc")
def test_release_host_memory_returns_freed_heap_pages_to_the_system():
    # 160 MB in 64 KiB blocks (below glibc's mmap threshold: they live in the heap), each
    # followed by a 1 KiB block that stays (above pymalloc's 512 bytes: in the same heap), so
    # that free() alone cannot shrink the heap.
    blocks, keepers = [], []
    for _ in range(2560):
        blocks.append(bytearray(b"\x01" * (64 << 10)))
        keepers.append(bytearray(b"\x01" * 1024))
    del blocks
    held = _resident_mb()
    assert memory.release_host_memory()
    assert held - _resident_mb() > 100, "freed heap pages stayed resident"
    assert len(keepers) == 2560
