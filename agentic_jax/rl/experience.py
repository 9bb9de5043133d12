"""From rewarded rollouts to a training batch: filters, old / reference log-probs, advantages."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_jax.rl import advantages as adv_lib
from agentic_jax.rl import filters as filter_lib
from agentic_jax.rl import losses
from agentic_jax.rl.step import TrainBatch, compute_logprobs
from agentic_jax.rollout import RolloutBatch


@dataclasses.dataclass(frozen=True)
class ExperienceConfig:
    """estimator: a key of ADVANTAGE_ESTIMATORS. kl_coef / kl_estimator / kl_in_reward: the KL
    to the reference policy, folded into the token rewards when kl_in_reward (else it is a loss
    term). row_multiple: kept rows are padded to a multiple of it (data shards x micro-batches
    x minibatches)."""

    estimator: str = "gae"
    advantage: adv_lib.AdvantageConfig = adv_lib.AdvantageConfig()
    filters: filter_lib.FilterConfig = filter_lib.FilterConfig()
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False
    row_multiple: int = 1
    compute_dtype: str | None = None


def make_train_batch(
    rollout: RolloutBatch,
    cfg: ExperienceConfig,
    *,
    graphdef: nnx.GraphDef,
    state: nnx.State,
    ref_state: nnx.State | None = None,
    batch_sharding: Any = None,
) -> tuple[TrainBatch | None, dict[str, float]]:
    """Builds the update's batch; None when the filters leave nothing to learn from.

    Old log-probs and values are recomputed by the trainer's own forward pass (so the PPO ratio
    starts at exactly 1); the sampler's log-probs ride along to measure the mismatch.
    """
    keep, train = filter_lib.episode_filter(
        cfg.filters, rollout.rewards, rollout.group_ids, rollout.truncated, rollout.void_turn)
    idx, real = filter_lib.kept_indices(keep, cfg.row_multiple)
    stats = {"kept_frac": float(keep.mean()) if len(keep) else 0.0,
             "trained_frac": float((keep & train).mean()) if len(keep) else 0.0}
    if idx.size == 0:
        return None, stats
    rows = rollout.select(idx)
    loss_mask = filter_lib.mask_episodes(rows.loss_mask, train[idx] & real)

    def put(x):
        x = jnp.asarray(x)
        return x if batch_sharding is None else jax.device_put(x, batch_sharding)

    tokens, positions = put(rows.tokens), put(rows.positions)
    old_logprobs, values, _ = compute_logprobs(graphdef, state, tokens, positions,
                                               compute_dtype=cfg.compute_dtype)
    ref_logprobs = None
    if ref_state is not None and cfg.kl_coef > 0:
        ref_logprobs, _, _ = compute_logprobs(graphdef, ref_state, tokens, positions,
                                              compute_dtype=cfg.compute_dtype)
    mask = put(loss_mask)
    token_rewards = None
    if ref_logprobs is not None and cfg.kl_in_reward:
        kl = losses.kl_estimate(old_logprobs, ref_logprobs, cfg.kl_estimator)
        token_rewards = -cfg.kl_coef * kl * mask
    estimator = adv_lib.get_advantage_estimator(cfg.estimator)
    advantages, returns = estimator(
        put(rows.rewards), mask, cfg.advantage, values=values,
        group_ids=put(rows.group_ids), token_rewards=token_rewards)
    batch = TrainBatch(
        tokens=tokens, positions=positions, loss_mask=mask, old_logprobs=old_logprobs,
        advantages=advantages, returns=returns, old_values=values,
        ref_logprobs=None if cfg.kl_in_reward else ref_logprobs,
        sampler_logprobs=put(rows.sampler_logprobs))
    return batch, stats


def minibatches(batch: TrainBatch, num: int, rng: np.random.Generator,
                batch_sharding: Any = None):
    """Yields ``num`` row-disjoint minibatches of a shuffled batch."""
    n = batch.tokens.shape[0]
    if n % num:
        raise ValueError(f"batch of {n} rows does not split into {num} minibatches")
    order = rng.permutation(n)
    size = n // num
    for i in range(num):
        sel = jnp.asarray(np.sort(order[i * size:(i + 1) * size]))

        def take(x):
            if x is None:
                return None
            y = jnp.take(x, sel, axis=0)
            return y if batch_sharding is None else jax.device_put(y, batch_sharding)

        yield jax.tree.map(take, batch, is_leaf=lambda x: x is None)
