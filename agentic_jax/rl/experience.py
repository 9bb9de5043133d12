"""From rewarded rollouts to a training batch: filters, old / reference log-probs, advantages."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_jax.parallel.distributed import gather_rows, host_max, put_rows
from agentic_jax.rl import advantages as adv_lib
from agentic_jax.rl import filters as filter_lib
from agentic_jax.rl import off_policy
from agentic_jax.rl.forward import compute_logprobs, scored_columns
from agentic_jax.rl.kl import kl_estimate
from agentic_jax.rl.step import TrainBatch
from agentic_jax.rollout import RolloutBatch

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ExperienceConfig:
    """estimator: a key of ADVANTAGE_ESTIMATORS. kl_coef / kl_estimator / kl_in_reward: the KL
    to the reference policy, folded into the token rewards when kl_in_reward (else it is a loss
    term). row_multiple: kept rows are padded to a multiple of it (data shards x micro-batches
    x minibatches). length_multiple: the batch is cut to its longest episode rounded up to this
    many tokens (0 keeps training.max_length columns). off_policy: the importance weights of the
    sampler's tokens (`off_policy`). recompute_old_logprobs: False leaves the batch's
    old_logprobs None, to be taken from the update's own forward; `single_update_exact` says
    when that gives the same update."""

    estimator: str = "gae"
    advantage: adv_lib.AdvantageConfig = adv_lib.AdvantageConfig()
    filters: filter_lib.FilterConfig = filter_lib.FilterConfig()
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False
    row_multiple: int = 1
    length_multiple: int = 32
    compute_dtype: str | None = None
    off_policy: off_policy.OffPolicyConfig = off_policy.OffPolicyConfig()
    recompute_old_logprobs: bool = True

    def __post_init__(self):
        if not self.recompute_old_logprobs:
            why = self.needs_old_logprobs()
            if why:
                raise ValueError(f"recompute_old_logprobs=False: {why}")

    def needs_old_logprobs(self) -> str:
        """Why the batch needs the old log-probs before the update, in words ("" if it does
        not, given one optimizer step on it and no critic)."""
        if self.estimator == "gae":
            return "GAE's advantages need the critic's values, from the same forward"
        if self.off_policy.enabled:
            return "the importance weights compare them with the sampler's"
        if self.kl_coef > 0 and self.kl_in_reward:
            return "the KL in the reward is taken from them"
        return ""


def make_train_batch(rollout: RolloutBatch, cfg: ExperienceConfig,
                     **kwargs: Any) -> tuple[TrainBatch | None, dict[str, float]]:
    """`make_experience` without the rows' lengths: (the update's batch or None, its stats)."""
    batch, stats, _ = make_experience(rollout, cfg, **kwargs)
    return batch, stats


def make_experience(
    rollout: RolloutBatch,
    cfg: ExperienceConfig,
    *,
    graphdef: nnx.GraphDef,
    state: nnx.State,
    ref_state: nnx.State | None = None,
    batch_sharding: Any = None,
) -> tuple[TrainBatch | None, dict[str, float], np.ndarray | None]:
    """(the update's batch, its stats, every row's token count in the global batch's row order,
    on every host); the batch and the lengths are None when the filters leave nothing to learn
    from.

    Old log-probs and values are recomputed by the trainer's own forward pass (so the PPO ratio
    starts at exactly 1); the sampler's log-probs ride along to measure the mismatch
    (mismatch_kl, mismatch_max_abs) and, with ``cfg.off_policy``, weigh the tokens
    (is_weights; is_weight_mean / max, is_clipped_frac, is_masked_frac). Without
    ``cfg.recompute_old_logprobs`` that pass is skipped (old_logprobs and old_values None, no
    critic): the update's one forward gives them, and the mismatch, itself.
    """
    selected, stats = _select_rows(rollout, cfg)
    if selected is None:
        return None, stats, None
    rows, group_ids, loss_mask = selected

    def put(x):
        return jnp.asarray(x) if batch_sharding is None else put_rows(x, batch_sharding)

    tokens, positions, mask = put(rows.tokens), put(rows.positions), put(loss_mask)
    scored = scored_columns(mask, batch_sharding)  # the LM head runs on these columns only
    mesh = getattr(batch_sharding, "mesh", None)
    score = functools.partial(compute_logprobs, graphdef, tokens=tokens, positions=positions,
                              compute_dtype=cfg.compute_dtype, mesh=mesh, scored=scored)
    old_logprobs = values = None
    if cfg.recompute_old_logprobs:
        old_logprobs, values, _ = score(state)
    ref_logprobs = None
    if ref_state is not None and cfg.kl_coef > 0:
        ref_logprobs, _, _ = score(ref_state)
    token_rewards = None
    if ref_logprobs is not None and cfg.kl_in_reward:
        kl = kl_estimate(old_logprobs, ref_logprobs, cfg.kl_estimator)
        token_rewards = -cfg.kl_coef * kl * mask
    estimator = adv_lib.get_advantage_estimator(cfg.estimator)
    advantages, returns = estimator(
        put(rows.rewards), mask, cfg.advantage, values=values,
        group_ids=put(group_ids), token_rewards=token_rewards)
    sampler_logprobs = put(rows.sampler_logprobs)
    corrected = (None, {})
    if old_logprobs is not None:
        corrected = _off_policy_terms(old_logprobs, sampler_logprobs, mask, cfg.off_policy)
    stats.update({k: float(v) for k, v in jax.device_get(corrected[1]).items()})
    batch = TrainBatch(
        tokens=tokens, positions=positions, loss_mask=mask, old_logprobs=old_logprobs,
        advantages=advantages, returns=returns, old_values=values,
        ref_logprobs=None if cfg.kl_in_reward else ref_logprobs,
        sampler_logprobs=sampler_logprobs, is_weights=corrected[0], scored=scored)
    return batch, stats, np.asarray(gather_rows(rows.lengths.astype(np.int32)))


@functools.partial(jax.jit, static_argnames="cfg")
def _off_policy_terms(old_logprobs, sampler_logprobs, mask, cfg: off_policy.OffPolicyConfig):
    """(importance weights [B, T] or None, the mismatch and weight metrics)."""
    stats = off_policy.mismatch_metrics(old_logprobs, sampler_logprobs, mask)
    if not cfg.enabled:
        return None, stats
    weights = off_policy.importance_weights(old_logprobs, sampler_logprobs, mask, cfg)
    return weights.weights, {**stats, **off_policy.weight_metrics(weights, mask)}


def _select_rows(rollout: RolloutBatch, cfg: ExperienceConfig):
    """The filters' rows, padded to a row count and cut to a width every host agrees on ->
    ((rows, group_ids, loss_mask) or None when no row is kept, kept/trained fractions)."""
    keep, train = filter_lib.episode_filter(
        cfg.filters, rollout.rewards, rollout.group_ids, rollout.truncated, rollout.void_turn)
    idx, real = filter_lib.kept_indices(keep, cfg.row_multiple)
    # On several hosts each contributes its own rows; they agree on the row count and width.
    flags = gather_rows({"keep": keep, "trained": keep & train})
    stats = {"kept_frac": float(flags["keep"].mean()) if len(flags["keep"]) else 0.0,
             "trained_frac": float(flags["trained"].mean()) if len(flags["keep"]) else 0.0}
    num_rows = host_max(idx.size)
    if num_rows == 0:
        return None, stats
    idx, real = _pad_rows(idx, real, num_rows)
    longest = host_max(int(rollout.lengths[idx].max()))
    rows = rollout.select(idx).trimmed(cfg.length_multiple, longest)
    # Padding rows get groups of their own: repeats must not weigh in a group's statistics.
    group_ids = rows.group_ids.copy()
    group_ids[~real] = -1 - np.arange(int((~real).sum()))
    return (rows, group_ids, filter_lib.mask_episodes(rows.loss_mask, train[idx] & real)), stats


def _pad_rows(idx: np.ndarray, real: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Extends the kept rows to ``n`` with masked repeats (row 0 when none was kept)."""
    extra = n - idx.size
    if extra <= 0:
        return idx, real
    fill = np.resize(idx if idx.size else np.zeros(1, np.int64), extra)
    return np.concatenate([idx, fill]), np.concatenate([real, np.zeros(extra, bool)])


@functools.lru_cache(maxsize=None)
def _row_taker(sharding: Any):
    """A compiled row gather that lays its result out with ``sharding`` (rows may move
    between devices and hosts)."""
    def take(tree, sel):
        return jax.tree.map(lambda x: x[sel], tree)

    return jax.jit(take) if sharding is None else jax.jit(take, out_shardings=sharding)


def minibatches(batch: TrainBatch, num: int, rng: np.random.Generator,
                batch_sharding: Any = None, *, lengths: np.ndarray | None = None,
                pack_width: int = 0, row_multiple: int = 1):
    """Yields ``num`` row-disjoint minibatches of a shuffled batch (the same on every host:
    ``rng`` is seeded alike everywhere).

    With ``pack_width`` each minibatch's episodes (``lengths[i]`` tokens of row i) are packed
    into rows of that many tokens (`pack_plan`, `pack_rows`): the same episodes in fewer rows,
    told apart by segment ids. The number of rows is rounded up to ``row_multiple``.
    """
    n = batch.tokens.shape[0]
    if n % num:
        raise ValueError(f"batch of {n} rows does not split into {num} minibatches")
    if pack_width and lengths is None:
        raise ValueError("minibatches: packing needs the rows' lengths")
    order = rng.permutation(n)
    size = n // num
    take = _row_taker(batch_sharding)
    for i in range(num):
        rows = np.sort(order[i * size:(i + 1) * size]).astype(np.int32)
        if not pack_width:
            yield take(batch, rows)
            continue
        plan = pack_plan(lengths[rows], pack_width, row_multiple)
        packed = _packer(batch_sharding)(batch, rows[plan.rows], plan.cols, plan.segment_ids)
        if batch.scored is not None:  # the packed rows' own
            packed = packed.replace(scored=scored_columns(packed.loss_mask, batch_sharding))
        yield packed


class PackPlan(NamedTuple):
    """Where each token of the packed rows comes from: ``rows`` / ``cols`` [R, W] index the
    episode (a row of the minibatch) and its token; ``segment_ids`` [R, W] number the episodes
    of a packed row from 1, with 0 on the padding (whose indices point at token 0 of row 0)."""

    rows: np.ndarray
    cols: np.ndarray
    segment_ids: np.ndarray


def packed_row_count(rows: int, row_multiple: int = 1) -> int:
    """The row count ``rows`` filled packed rows are padded to. The padding step grows with
    the count (1 row below 16, 2 below 32, 4 below 64, ...), rounded down to a multiple of
    ``row_multiple`` (data shards x micro-batches; at least one of those): padding stays
    under an eighth of the rows where ``row_multiple`` fits in the step (a padding row costs
    a filled row's forward and backward), and a run meets few counts, each compiling the
    train step once. Rounded to multiples of 8 instead, SmolLM2's GRPO update of 18 filled rows computed
    24 and took 1.37x as long (docs/performance.md)."""
    rows = int(rows)
    step = 1 << max(0, rows.bit_length() - 4)
    multiple = row_multiple * max(1, step // row_multiple)
    return max(multiple, -(-rows // multiple) * multiple)


def pack_plan(lengths: np.ndarray, width: int, row_multiple: int = 1) -> PackPlan:
    """First-fit decreasing: episodes of ``lengths`` tokens, longest first, each into the first
    packed row of ``width`` tokens with room for it. The row count is padded
    (`packed_row_count`) to a multiple of ``row_multiple`` (data shards x micro-batches),
    padding rows holding no episode."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > width):
        raise ValueError(f"pack_plan: episode lengths {lengths.min()}..{lengths.max()} do not "
                         f"fit rows of {width} tokens")
    free: list[int] = []
    placed: list[list[int]] = []
    for i in sorted(range(lengths.size), key=lambda i: (-lengths[i], i)):
        row = next((r for r, room in enumerate(free) if room >= lengths[i]), None)
        if row is None:
            free.append(width)
            placed.append([])
            row = len(free) - 1
        free[row] -= int(lengths[i])
        placed[row].append(i)
    count = packed_row_count(len(placed), row_multiple)
    rows = np.zeros((count, width), np.int32)
    cols = np.zeros((count, width), np.int32)
    segment_ids = np.zeros((count, width), np.int32)
    for r, episodes in enumerate(placed):
        at = 0
        for seg, i in enumerate(episodes, start=1):
            n = int(lengths[i])
            rows[r, at:at + n] = i
            cols[r, at:at + n] = np.arange(n)
            segment_ids[r, at:at + n] = seg
            at += n
    return PackPlan(rows, cols, segment_ids)


@functools.lru_cache(maxsize=None)
def _packer(sharding: Any):
    """A compiled gather of a batch's tokens into packed rows (`pack_rows`) laid out with
    ``sharding``."""
    return jax.jit(pack_rows) if sharding is None else jax.jit(pack_rows, out_shardings=sharding)


def pack_rows(batch: TrainBatch, rows: Array, cols: Array, segment_ids: Array) -> TrainBatch:
    """The batch's tokens gathered into packed rows: ``rows`` / ``cols`` [R, W] name each
    token's source row and column, ``segment_ids`` [R, W] its episode within the packed row
    (0: padding, which is masked out of every loss term). Positions come along, so each episode
    keeps its own; attention stays within a segment."""
    real = segment_ids > 0

    def gather(x):
        if x is None:
            return None
        return x[rows, cols]

    # The scored columns are the unpacked rows' (`minibatches` finds the packed rows' own).
    packed = jax.tree.map(gather, batch.replace(scored=None))
    return packed.replace(loss_mask=jnp.where(real, packed.loss_mask, 0.0),
                          segment_ids=segment_ids)
