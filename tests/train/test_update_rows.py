"""The update's packing arguments (row counts padded by `packed_row_count`, not to a multiple
of 8) and what its steps computed (update_rows, update_fill)."""

import types

import numpy as np
import pytest

from agentic_jax.rl.experience import pack_plan
from agentic_jax.training.update import packing_options, slot_metrics


def _training(**kw):
    return types.SimpleNamespace(**{"pack_sequences": True, "max_length": 64, "pack_width": 0,
                                    "minibatches": 2, **kw})


def test_packing_pads_to_the_shards_and_micro_batches_alone():
    lengths = np.full(34, 32)
    options = packing_options(_training(), row_multiple=4, lengths=lengths)   # 2 a minibatch
    assert options["row_multiple"] == 2 and options["pack_width"] == 64
    assert options["lengths"] is lengths
    assert packing_options(_training(pack_sequences=False), 4, lengths) == {}
    assert packing_options(_training(pack_width=96), 4, lengths)["pack_width"] == 96
    # 17 episodes of a full row: 18 packed rows, not the 24 of a multiple of 8.
    assert pack_plan(np.full(17, 32), 32).rows.shape[0] == 18
    assert pack_plan(np.full(17, 32), 32, row_multiple=4).rows.shape[0] == 20
    assert pack_plan(np.full(17, 32), 32, row_multiple=8).rows.shape[0] == 24


def test_slot_metrics():
    # Two epochs of two minibatches, 18 and 16 rows of 64 tokens; 2,000 episode tokens an epoch.
    lengths = np.array([1200, 800])
    shapes = [(18, 64), (16, 64)] * 2
    got = slot_metrics(shapes, lengths, epochs=2)
    assert got["update_rows"] == 17
    assert got["update_fill"] == pytest.approx(4000 / (2 * (18 + 16) * 64))
