"""Host-side page accounting: a free list with reference counts, and the pool's size.

A page is free when no sequence and no shared prompt prefix references it. Sharing a page
increments its count; releasing decrements it and returns the page to the free list at zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from agentic_jax.errors import UserError

if TYPE_CHECKING:
    from agentic_jax.models import ModelConfig


def page_bytes(cfg: ModelConfig, page_size: int) -> int:
    """Bytes of one page of K and V across all layers: 2 * L * Hkv * page_size * D * itemsize."""
    itemsize = np.dtype(cfg.compute_dtype).itemsize
    return 2 * cfg.num_layers * cfg.num_kv_heads * page_size * cfg.head_dim * itemsize


def pool_size(cfg: ModelConfig, *, page_size: int, kv_pages: int | None,
              kv_cache_mb: float | None, default_pages: int) -> int:
    """Pages in the pool: ``kv_pages``, or as many as fit in ``kv_cache_mb`` MiB, or the default."""
    if kv_pages is not None:
        return int(kv_pages)
    if kv_cache_mb is not None:
        pages = int(kv_cache_mb * 2**20) // page_bytes(cfg, page_size)
        if pages <= 0:
            raise UserError(f"rollout.kv_cache_mb={kv_cache_mb} holds no page of "
                            f"{page_bytes(cfg, page_size)} bytes")
        return pages
    return int(default_pages)


class PagePool:
    """Reference-counted pages [0, num_pages); allocation is all-or-nothing."""

    def __init__(self, num_pages: int):
        if num_pages <= 0:
            raise ValueError(f"page pool needs at least one page, got {num_pages}")
        self.num_pages = num_pages
        self.refs = np.zeros(num_pages, np.int32)
        # Popped from the end: low page ids first, which keeps small runs' tables compact.
        self._free = list(range(num_pages - 1, -1, -1))
        self.peak = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def in_use(self) -> int:
        return self.num_pages - len(self._free)

    def alloc(self, n: int) -> list[int] | None:
        """n fresh pages (count 1 each), or None (nothing taken) when fewer than n are free."""
        if n > len(self._free):
            return None
        pages = [self._free.pop() for _ in range(n)]
        self.refs[pages] = 1
        self.peak = max(self.peak, self.in_use)
        return pages

    def share(self, pages: list[int]) -> None:
        """One more reference to each of ``pages`` (all must be in use)."""
        if pages and (self.refs[pages] <= 0).any():
            raise RuntimeError(f"sharing a free page among {pages}")
        np.add.at(self.refs, pages, 1)

    def release(self, pages: list[int]) -> None:
        """Drops one reference to each of ``pages``; pages reaching zero become free."""
        if not pages:
            return
        np.add.at(self.refs, pages, -1)
        if (self.refs[pages] < 0).any():
            raise RuntimeError(f"releasing a free page among {pages}")
        self._free.extend(p for p in dict.fromkeys(pages) if self.refs[p] == 0)
