"""Which compiled decode program runs a round trip: the exact shape, or a larger one already
compiled while the exact one is not worth compiling yet.

A decode program's shape is its rows (a `runner._row_buckets` batch size) and its page-pair
list's width; each new shape is a new XLA program. On CPU with the layers unrolled
(`EngineConfig.layer_arrays`) SmolLM2-135M's decode programs take 3-4 s each to compile, and a
rollout meets a dozen or more: the tail of every batch (24, 16, 12, 8 rows) at each width the
contexts reach. A program of more rows and a wider pair list computes the same tokens (padded
rows are idle, padded pairs belong to no row; on XLA:CPU the same bits: tests/rollout/
test_program_reuse.py at the tiny model's and SmolLM2's widths), only at a higher cost a step.
So this is a rent-or-buy choice, decided by the ski-rental rule: run the cheapest compiled
program that covers the shape (rent) until the extra seconds paid for that shape reach what a
compilation costs (the mean of this runner's measured ones; nothing is rented before one is
measured), then compile it (buy). Per shape, and as far as those estimates hold, no shape
costs much more than twice what it would with the future known, and a shape that recurs in
every rollout is compiled once its padding has cost about one compilation.

The extra seconds of a rented round trip are its measured seconds a step times the share of a
step the padding took, from `step_cost` (a row's matmul FLOPs, a page pair's attention FLOPs
weighted by how much slower XLA:CPU runs them). No JAX here: `runner.ModelRunner` asks and
reports.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable

# A page pair's attention FLOPs cost about this many matmul FLOPs on XLA:CPU: small batched
# products of 3 query rows over 16 keys at 10-25 GFLOP/s, and the copy of the page out of the
# pool, against 300-480 GFLOP/s for the blocks' matmuls (a 32-row float32 SmolLM2-135M step:
# matmuls and head 50 ms for 32 rows, attention 43 ms for 384 pairs; docs/performance.md).
ATTENTION_WEIGHT = 16.0


def step_cost(rows: int, pairs: int, *, row_flops: float, pair_flops: float) -> float:
    """A decode step's relative cost: ``rows`` rows of ``row_flops`` matmul FLOPs and ``pairs``
    page pairs of ``pair_flops`` attention FLOPs, weighted by `ATTENTION_WEIGHT`."""
    return rows * row_flops + pairs * pair_flops * ATTENTION_WEIGHT


class ProgramReuse:
    """Rent-or-buy over the decode programs one runner has compiled.

    Shapes are (rows, pairs); ``key`` is everything else that makes a program (its static
    arguments): only programs of the same key cover each other.
    """

    def __init__(self, *, row_flops: float, pair_flops: float):
        self.row_flops, self.pair_flops = row_flops, pair_flops
        self._compiled: dict[Hashable, set[tuple[int, int]]] = {}
        self._rented: dict[tuple[Hashable, int, int], float] = {}
        self._compile_s: list[float] = []
        self.rented_compiles = 0

    def cost(self, rows: int, pairs: int) -> float:
        return step_cost(rows, pairs, row_flops=self.row_flops, pair_flops=self.pair_flops)

    def compile_estimate(self) -> float | None:
        """What compiling a decode program costs here: the mean of the measured ones (None
        before any)."""
        return statistics.fmean(self._compile_s) if self._compile_s else None

    def choose(self, key: Hashable, rows: int, pairs: int) -> tuple[int, int]:
        """The shape to run a round trip of shape (rows, pairs) on: itself when compiled, when
        no compiled program covers it (as many rows or more and as many pairs or more), or once
        its rent reached a compilation's cost; else the cheapest compiled cover."""
        compiled = self._compiled.get(key, ())
        if (rows, pairs) in compiled:
            return rows, pairs
        covers = [s for s in compiled if s[0] >= rows and s[1] >= pairs]
        estimate = self.compile_estimate()
        if not covers or estimate is None:
            return rows, pairs
        if self._rented.get((key, rows, pairs), 0.0) >= estimate:
            return rows, pairs
        return min(covers, key=lambda s: (self.cost(*s), s))

    def ran(self, key: Hashable, wanted: tuple[int, int], used: tuple[int, int], *,
            steps: int, seconds: float, compile_s: float = 0.0) -> None:
        """Reports a round trip: ``steps`` decode steps of shape ``wanted`` run on the program
        of shape ``used`` in ``seconds``, ``compile_s`` of them compiling it (0: it was
        compiled before, here or by another engine of the process)."""
        if compile_s > 0:
            self._compile_s.append(compile_s)
            # A cover chosen as compiled that compiled all the same: a key that misses what
            # makes a program (counted, for the tests).
            self.rented_compiles += used != wanted
        self._compiled.setdefault(key, set()).add(used)
        if used == wanted or steps <= 0:
            return
        step_s = max(0.0, seconds - compile_s) / steps
        share = 1.0 - self.cost(*wanted) / self.cost(*used)
        slot = (key, *wanted)
        self._rented[slot] = self._rented.get(slot, 0.0) + steps * step_s * share

    def add_compiled(self, key: Hashable, shape: tuple[int, int]) -> None:
        """Records a program compiled outside a round trip (the engine's warm-up)."""
        self._compiled.setdefault(key, set()).add(shape)

    def forget(self) -> None:
        """The compiled programs were dropped (`runner._MapWatch`): every shape compiles again
        when next needed; the measured costs stay."""
        self._compiled.clear()
        self._rented.clear()
