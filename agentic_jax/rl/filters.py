"""Episode filters applied on the host between rollout and update (numpy in, numpy out).

Two outcomes per episode, both [B] bool:
  keep  - the row stays in the training batch (dropped rows are removed with `kept_indices`);
  train - the row's tokens contribute to the loss (False rows stay for group statistics but get
          loss_mask zeroed with `mask_episodes`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

TRUNCATION_MODES = ("keep", "mask", "drop")


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """drop_uniform_groups: drop prompt groups whose rewards are all equal (no learning signal
    under group-relative advantages). truncated: what to do with episodes cut by the length
    budget - "keep", "mask" (no loss) or "drop". mask_void_turns: no loss for episodes with a turn
    that has neither code nor an answer."""

    drop_uniform_groups: bool = False
    truncated: str = "keep"
    mask_void_turns: bool = False

    def __post_init__(self):
        if self.truncated not in TRUNCATION_MODES:
            raise ValueError(
                f"truncated: expected one of {TRUNCATION_MODES}, got {self.truncated!r}"
            )


def nonuniform_group_mask(
    rewards: np.ndarray, group_ids: np.ndarray, atol: float = 1e-6
) -> np.ndarray:
    """True for episodes whose prompt group has max(R) - min(R) > atol. [B], [B] -> bool [B]."""
    rewards = np.asarray(rewards, np.float64)
    group_ids = np.asarray(group_ids)
    if rewards.shape != group_ids.shape or rewards.ndim != 1:
        raise ValueError(
            f"rewards and group_ids must both be [B], got {rewards.shape}, {group_ids.shape}"
        )
    _, idx = np.unique(group_ids, return_inverse=True)
    idx = idx.reshape(-1)
    n = idx.max(initial=-1) + 1
    hi = np.full(n, -np.inf)
    lo = np.full(n, np.inf)
    np.maximum.at(hi, idx, rewards)
    np.minimum.at(lo, idx, rewards)
    return (hi - lo)[idx] > atol


def episode_filter(
    cfg: FilterConfig,
    rewards: np.ndarray,
    group_ids: np.ndarray,
    truncated: np.ndarray | None = None,
    void_turn: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(keep [B], train [B]) for the configured filters; `truncated` and `void_turn` are bool [B]
    flags, required only when the matching filter is on."""
    b = np.shape(rewards)[0]
    keep = np.ones(b, bool)
    train = np.ones(b, bool)
    if cfg.drop_uniform_groups:
        keep &= nonuniform_group_mask(rewards, group_ids)
    if cfg.truncated != "keep":
        if truncated is None:
            raise ValueError(f"truncated={cfg.truncated!r} needs the `truncated` [B] flags")
        flags = np.asarray(truncated, bool).reshape(b)
        if cfg.truncated == "drop":
            keep &= ~flags
        else:
            train &= ~flags
    if cfg.mask_void_turns:
        if void_turn is None:
            raise ValueError("mask_void_turns needs the `void_turn` [B] flags")
        train &= ~np.asarray(void_turn, bool).reshape(b)
    return keep, train


def mask_episodes(loss_mask: np.ndarray, train: np.ndarray) -> np.ndarray:
    """loss_mask [B, T] with the rows where train [B] is False zeroed."""
    loss_mask = np.asarray(loss_mask)
    return loss_mask * np.asarray(train, loss_mask.dtype)[:, None]


def kept_indices(keep: np.ndarray, multiple_of: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the kept episodes, padded to a multiple of `multiple_of` (so the batch
    still divides the mesh and micro-batches) by repeating kept rows.

    Returns (indices [N], real [N] bool); padding rows have real = False and must get their
    loss_mask zeroed (`mask_episodes(loss_mask[indices], real)`). With nothing kept, N = 0.
    """
    if multiple_of < 1:
        raise ValueError(f"multiple_of must be >= 1, got {multiple_of}")
    idx = np.flatnonzero(np.asarray(keep, bool))
    pad = (-idx.size) % multiple_of if idx.size else 0
    padded = np.concatenate([idx, np.resize(idx, pad)])
    real = np.arange(padded.size) < idx.size
    return padded, real
