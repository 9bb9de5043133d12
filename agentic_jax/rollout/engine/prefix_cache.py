"""Automatic prefix caching: full pages of prefilled K/V kept after their sequence ends, found
again by any later context that starts with the same tokens (vLLM's automatic prefix caching,
SGLang's radix cache).

The prompts of a rollout share their system prompt and instructions (47 of the 72 tokens of a
SmolLM2 chat prompt of the curriculum). Exact-prompt sharing (`sequences.Prefix`) covers the
samples of one prompt; this cache covers different prompts with a common start, across batches.

A cached page is a node of a tree: its key is (its parent node's id, the page's tokens), so
a page is found only after the whole token run before it, and a lookup walks from the root one
page at a time. Only leaves are evicted, so every cached page stays reachable. The cache holds
one reference to each of its pages (`PagePool.share`); a leaf is evictable when that is the
only reference left to its page, least recently used first.

Only K/V written by prefill and under the current weights is cached: `clear` (on new weights,
and before the engine sleeps) starts a new epoch, and a context whose writing began in an
earlier epoch is never inserted. Plain Python: no JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentic_jax.rollout.engine.pages import PagePool


@dataclasses.dataclass(eq=False)
class _Node:
    node_id: int
    page: int
    key: tuple[int, tuple[int, ...]]   # (the parent's node_id, 0 for the root; the tokens)
    parent: _Node | None
    children: int = 0
    last_use: int = 0


class PrefixCache:
    """Full pages of prefilled K/V by their token prefix (see the module docstring)."""

    def __init__(self, pool: PagePool, page_size: int):
        self.pool, self.page_size = pool, page_size
        self._nodes: dict[tuple[int, tuple[int, ...]], _Node] = {}
        self._next_id = 1            # 0 is the root
        self._clock = 0
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def pages(self) -> list[int]:
        """The pages the cache holds a reference to."""
        return [node.page for node in self._nodes.values()]

    def _blocks(self, tokens: Sequence[int], upto: int):
        ps = self.page_size
        for i in range(min(upto, len(tokens)) // ps):
            yield i, tuple(int(t) for t in tokens[i * ps:(i + 1) * ps])

    def match(self, tokens: Sequence[int], upto: int) -> list[int]:
        """The cached pages holding positions [0, k * page_size) of ``tokens``, for the largest
        k with k * page_size <= ``upto``; each gets one more reference (the caller's)."""
        self._clock += 1
        parent, pages = 0, []
        for _, block in self._blocks(tokens, upto):
            node = self._nodes.get((parent, block))
            if node is None:
                break
            node.last_use = self._clock
            parent = node.node_id
            pages.append(node.page)
        self.pool.share(pages)
        return pages

    def has_first(self, block: tuple[int, ...]) -> bool:
        """Whether a context starting with these ``page_size`` tokens finds a cached page."""
        return (0, block) in self._nodes

    def insert(self, tokens: Sequence[int], pages: Sequence[int], written: int) -> int:
        """Caches the full pages of a context whose first ``written`` positions of ``tokens``
        are in ``pages`` (written under the current weights); returns the pages added."""
        self._clock += 1
        parent, added = None, 0
        for i, block in self._blocks(tokens, written):
            key = (0 if parent is None else parent.node_id, block)
            node = self._nodes.get(key)
            if node is None:
                node = _Node(self._next_id, int(pages[i]), key, parent)
                self._next_id += 1
                self._nodes[key] = node
                if parent is not None:
                    parent.children += 1
                self.pool.share([node.page])
                added += 1
            node.last_use = self._clock
            parent = node
        return added

    def evict(self, wanted: int) -> int:
        """Frees cached pages no sequence reads, least recently used leaves first, until
        ``wanted`` pages are free in the pool (or none is left to free); returns the pages
        freed."""
        freed = 0
        while self.pool.num_free < wanted:
            leaves = [n for n in self._nodes.values()
                      if n.children == 0 and self.pool.refs[n.page] == 1]
            if not leaves:
                break
            leaves.sort(key=lambda n: n.last_use)
            for node in leaves[:wanted - self.pool.num_free]:
                self._remove(node)
                freed += 1
        return freed

    def _remove(self, node: _Node) -> None:
        del self._nodes[node.key]
        if node.parent is not None:
            node.parent.children -= 1
        self.pool.release([node.page])

    def clear(self) -> None:
        """Drops every page (their K/V belongs to the old weights) and starts a new epoch."""
        pages = self.pages
        self._nodes.clear()
        self.pool.release(pages)
        self.epoch += 1
