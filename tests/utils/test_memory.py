"""agentic_jax.utils.memory: the peak resident set follows a large allocation, and a reset starts
it again from what is in use now."""

import numpy as np
import pytest

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
