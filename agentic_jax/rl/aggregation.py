"""Masked reductions of [B, T] per-token terms into pooled sums (`Pooled`), the form in which
every loss term and metric of the update is built.

A `Pooled(sum, denom)` rather than a mean: a batch split into micro-batches pools exactly by
adding sums and denominators. The denominators depend only on `loss_mask`, so the step divides
each micro-batch's sums by the full batch's denominator before differentiating
(`losses.objective(..., loss_denom)`), and the micro-batch gradients add up to the full batch's.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

Array = jax.Array

AGGREGATIONS = ("token_mean", "sequence_mean", "sequence_sum")


class Pooled(NamedTuple):
    """A loss or metric as (sum, denominator); pools across micro-batches by adding sums."""

    sum: Array
    denom: Array

    def mean(self) -> Array:
        return self.sum / jnp.maximum(self.denom, 1e-8)


def aggregation_denominator(loss_mask: Array, mode: str) -> Array:
    """Denominator of `aggregate`: sum(mask) for token_mean, else the number of rows with a
    model token."""
    chex.assert_rank(loss_mask, 2)
    mask = loss_mask.astype(jnp.float32)
    if mode == "token_mean":
        return mask.sum()
    if mode in ("sequence_mean", "sequence_sum"):
        return (mask.sum(axis=1) > 0).sum().astype(jnp.float32)
    raise ValueError(f"aggregation: expected one of {AGGREGATIONS}, got {mode!r}")


def aggregate(per_token: Array, loss_mask: Array, mode: str) -> Pooled:
    """Masked reduction of a [B, T] term, m = loss_mask, n_b = sum_t m_bt:

    token_mean:    sum_bt m l / sum_bt m
    sequence_mean: sum_b (sum_t m l / n_b) / #{b : n_b > 0}
    sequence_sum:  sum_b sum_t m l / #{b : n_b > 0}        (no length normalisation, Dr. GRPO)
    """
    chex.assert_equal_shape([per_token, loss_mask])
    mask = loss_mask.astype(jnp.float32)
    masked = jnp.where(mask > 0, per_token.astype(jnp.float32), 0.0) * mask
    if mode == "sequence_mean":
        per_seq = masked.sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)
        total = per_seq.sum()
    else:
        total = masked.sum()
    return Pooled(total, aggregation_denominator(mask, mode))
