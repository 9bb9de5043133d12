"""Advantage estimators, registered by name: GAE (PPO with a critic), GRPO, Reinforce++.

Every estimator has the same signature

    estimator(rewards [B], loss_mask [B, T], cfg, *, values=None, group_ids=None,
              token_rewards=None) -> (advantages [B, T], returns [B, T])

`rewards` is the outcome reward of each episode. `loss_mask` is 1 on tokens the policy generated
and 0 on prompt, tool-output and padding tokens. An episode's decision steps are its model tokens
t_1 < t_2 < ... < t_n; tool-output tokens between them are part of the environment's transition,
so every recurrence below runs over model tokens only (the "next" state of t_i is t_{i+1}, however
many tool tokens lie between). The outcome reward is paid on the last model token t_n;
`token_rewards` [B, T] (e.g. -beta * KL to a reference, see `kl.kl_penalized_rewards`) is added
on every model token. Outputs are zero wherever loss_mask is 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
    """Hyperparameters of the estimators (each reads the fields it needs).

    gamma, lam: discount and GAE lambda, per model token.
    whiten: GAE only - normalise advantages to zero mean, unit std over the batch's model tokens.
    eps: added to standard deviations before dividing.
    normalize_std: GRPO only - divide by the group std (False: Dr. GRPO's mean-only centring).
    baseline: Reinforce++ only - "none", or "group" to subtract each prompt group's mean outcome
      reward before computing returns (Reinforce++-baseline).
    """

    gamma: float = 1.0
    lam: float = 1.0
    whiten: bool = True
    eps: float = 1e-6
    normalize_std: bool = True
    baseline: str = "none"


Estimator = Callable[..., tuple[Array, Array]]


def last_token_mask(loss_mask: Array) -> Array:
    """1.0 at each row's last model token, else 0: mask_t * [sum_{s >= t} mask_s == 1]. [B, T]."""
    from_right = jnp.cumsum(loss_mask[:, ::-1], axis=1)[:, ::-1]
    return loss_mask * (from_right == 1)


def token_level_rewards(
    rewards: Array, loss_mask: Array, token_rewards: Array | None = None
) -> Array:
    """r_t = token_rewards_t * mask_t + R * [t is the last model token]. [B], [B, T] -> [B, T]."""
    r = rewards[:, None].astype(jnp.float32) * last_token_mask(loss_mask)
    if token_rewards is not None:
        r = r + token_rewards.astype(jnp.float32) * loss_mask
    return r


def masked_whiten(x: Array, mask: Array, eps: float) -> Array:
    """(x - mean) / (std + eps), moments over entries with mask = 1; masked entries -> 0."""
    n = jnp.maximum(mask.sum(), 1.0)
    mean = (x * mask).sum() / n
    var = (jnp.square(x - mean) * mask).sum() / n
    return (x - mean) / (jnp.sqrt(var) + eps) * mask


def _reverse_masked_scan(step: Callable, init, xs: tuple[Array, ...], mask: Array) -> Array:
    """Runs `carry, y = step(carry, x)` from t = T-1 down to 0 over [B, T] inputs.

    Where mask = 0 the carry passes through untouched and y = 0, which is what makes tool-output
    tokens invisible to the recurrence.
    """

    def body(carry, inputs):
        *x, m = inputs
        new_carry, y = step(carry, x)
        keep = m > 0
        carry = jax.tree.map(lambda n, o: jnp.where(keep, n, o), new_carry, carry)
        return carry, jnp.where(keep, y, 0.0)

    time_major = tuple(a.T for a in xs) + (mask.T,)
    _, ys = lax.scan(body, init, time_major, reverse=True)
    return ys.T


def _check_inputs(rewards: Array, loss_mask: Array) -> None:
    chex.assert_rank(rewards, 1)
    chex.assert_rank(loss_mask, 2)
    chex.assert_equal(rewards.shape[0], loss_mask.shape[0])


def gae(
    rewards: Array,
    loss_mask: Array,
    cfg: AdvantageConfig,
    *,
    values: Array | None = None,
    group_ids: Array | None = None,
    token_rewards: Array | None = None,
) -> tuple[Array, Array]:
    """Generalised advantage estimation over model tokens.

    With model tokens t_1 < ... < t_n and V_{t_{n+1}} = 0 (terminal):
        delta_i = r_{t_i} + gamma * V_{t_{i+1}} - V_{t_i}
        A_i     = delta_i + gamma * lam * A_{i+1},      A_{n+1} = 0
        G_i     = A_i + V_{t_i}                          (the value target)
    computed as one reverse `lax.scan` over t. `values` [B, T] is V(prefix < t), the critic's
    estimate at the state where token t is chosen. With cfg.whiten the advantages (not the
    returns) are normalised over the batch's model tokens.
    """
    del group_ids
    _check_inputs(rewards, loss_mask)
    if values is None:
        raise ValueError("gae: `values` [B, T] from a critic is required")
    chex.assert_equal_shape([values, loss_mask])
    mask = loss_mask.astype(jnp.float32)
    values = values.astype(jnp.float32) * mask
    r = token_level_rewards(rewards, mask, token_rewards)

    def step(carry, x):
        next_value, next_adv = carry
        r_t, v_t = x
        adv = r_t + cfg.gamma * next_value - v_t + cfg.gamma * cfg.lam * next_adv
        return (v_t, adv), adv

    zeros = jnp.zeros(rewards.shape[0], jnp.float32)
    adv = _reverse_masked_scan(step, (zeros, zeros), (r, values), mask)
    returns = (adv + values) * mask
    if cfg.whiten:
        adv = masked_whiten(adv, mask, cfg.eps)
    return adv, returns


def _group_moments(x: Array, group_ids: Array) -> tuple[Array, Array, Array]:
    """Per-element group mean, unbiased group std, and whether the group's values all equal
    (exactly, so float rounding in the mean cannot turn a uniform group into +-1). [B]."""
    b = x.shape[0]
    _, idx = jnp.unique(group_ids, size=b, return_inverse=True)
    idx = idx.reshape(b)
    count = jax.ops.segment_sum(jnp.ones_like(x), idx, num_segments=b)[idx]
    mean = jax.ops.segment_sum(x, idx, num_segments=b)[idx] / count
    sq = jax.ops.segment_sum(jnp.square(x - mean), idx, num_segments=b)[idx]
    std = jnp.sqrt(sq / jnp.maximum(count - 1.0, 1.0))
    uniform = (
        jax.ops.segment_max(x, idx, num_segments=b)[idx]
        == jax.ops.segment_min(x, idx, num_segments=b)[idx]
    )
    return mean, std, uniform


def grpo(
    rewards: Array,
    loss_mask: Array,
    cfg: AdvantageConfig,
    *,
    values: Array | None = None,
    group_ids: Array | None = None,
    token_rewards: Array | None = None,
) -> tuple[Array, Array]:
    """Group-normalised outcome rewards (GRPO).

    For episode i in prompt group g (the group_size samples of one prompt):
        A_i = (R_i - mean_g R) / (std_g R + eps)      (std unbiased; cfg.normalize_std=False
                                                       drops the division)
    broadcast to every model token of episode i. Returns are R_i on model tokens (no critic).
    A group whose rewards are all equal (a group of one included) has A = 0. `token_rewards`
    are not supported: put the KL in the loss for GRPO.
    """
    del values
    _check_inputs(rewards, loss_mask)
    if group_ids is None:
        raise ValueError("grpo: `group_ids` [B] naming each episode's prompt group is required")
    if token_rewards is not None:
        raise ValueError("grpo: token_rewards are not supported; use the KL loss term instead")
    chex.assert_equal_shape([rewards, group_ids])
    mask = loss_mask.astype(jnp.float32)
    r = rewards.astype(jnp.float32)
    mean, std, uniform = _group_moments(r, group_ids)
    centred = r - mean
    adv = centred / (std + cfg.eps) if cfg.normalize_std else centred
    adv = jnp.where(uniform, 0.0, adv)
    return adv[:, None] * mask, r[:, None] * mask


def reinforce_pp(
    rewards: Array,
    loss_mask: Array,
    cfg: AdvantageConfig,
    *,
    values: Array | None = None,
    group_ids: Array | None = None,
    token_rewards: Array | None = None,
) -> tuple[Array, Array]:
    """Reinforce++: discounted token returns, normalised over the batch.

    With b = mean_g R over the episode's prompt group when cfg.baseline == "group", else 0,
    r_{t_n} gets R - b, every model token gets token_rewards (e.g. -beta KL_t), and
        G_i = r_{t_i} + gamma * G_{i+1},                 G_{n+1} = 0
        A_i = (G_i - mean G) / (std G + eps)             moments over all model tokens of the batch.
    Returns are G (before normalisation).
    """
    del values
    _check_inputs(rewards, loss_mask)
    mask = loss_mask.astype(jnp.float32)
    r = rewards.astype(jnp.float32)
    if cfg.baseline == "group":
        if group_ids is None:
            raise ValueError("reinforce_pp: baseline='group' needs `group_ids` [B]")
        r = r - _group_moments(r, group_ids)[0]
    elif cfg.baseline != "none":
        raise ValueError(f"reinforce_pp: baseline must be 'none' or 'group', got {cfg.baseline!r}")
    token_r = token_level_rewards(r, mask, token_rewards)

    def step(next_return, x):
        (r_t,) = x
        g = r_t + cfg.gamma * next_return
        return g, g

    returns = _reverse_masked_scan(step, jnp.zeros(r.shape[0]), (token_r,), mask)
    return masked_whiten(returns, mask, cfg.eps), returns


ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {
    "gae": gae,
    "grpo": grpo,
    "reinforce_pp": reinforce_pp,
}


def get_advantage_estimator(name: str) -> Estimator:
    """The estimator registered as `name` (see ADVANTAGE_ESTIMATORS)."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; expected one of {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
