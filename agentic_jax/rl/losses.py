"""Policy-gradient and value losses and the PPO objective, as pure functions over [B, T]
(the KL estimators are in `agentic_jax.rl.kl`).

Conventions. Index t of every [B, T] array refers to token t chosen from the prefix < t:
logprobs[:, t] = log pi(tokens[:, t] | tokens[:, :t]) and values[:, t] = V(tokens[:, :t]).
`loss_mask` is 1 on model-generated tokens only, so prompt, tool-output and padding tokens are
excluded from every term.

Every term is aggregated into a `Pooled(sum, denom)` by `agentic_jax.rl.aggregation`, so that
micro-batches pool exactly (`objective(..., loss_denom)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from agentic_jax.rl.aggregation import AGGREGATIONS, Pooled, aggregate
from agentic_jax.rl.kl import KL_ESTIMATORS, kl_estimate

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """How the loss is built (hashable: the step compiles against it).

    policy_loss: a key of POLICY_LOSSES, the one registry of policy losses (config key
      ``rl.policy_loss`` when the config has one): a new loss is a function and an entry there.
    clip_low, clip_high: ratio clipped to [1 - clip_low, 1 + clip_high] (clip_high > clip_low is
      DAPO's "clip higher").
    dual_clip: c > 1 caps the loss of negative-advantage tokens at -c * A (None: off).
    value_coef, value_clip: weight of the value loss and its clip range around old values (None:
      unclipped).
    entropy_coef: weight of the entropy bonus (subtracted from the loss).
    kl_coef, kl_estimator: weight and estimator of the KL-to-reference loss term (used when the
      batch has ref_logprobs and kl_coef > 0; for KL in the reward use `kl_penalized_rewards`).
    policy_coef: weight of the policy loss (0 trains a separate critic with the same step).
    aggregation: one of AGGREGATIONS.
    temperature: sampling temperature; logits are divided by it before the log-softmax.
    """

    policy_loss: str = "ppo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    value_coef: float = 0.5
    value_clip: float | None = 0.2
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    policy_coef: float = 1.0
    aggregation: str = "token_mean"
    temperature: float = 1.0

    def __post_init__(self):
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(f"policy_loss: expected one of {sorted(POLICY_LOSSES)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator: expected one of {sorted(KL_ESTIMATORS)}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation: expected one of {AGGREGATIONS}")
        if not (0.0 <= self.clip_low < 1.0 and self.clip_high >= 0.0):
            raise ValueError("clip_low must be in [0, 1) and clip_high >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 or None, got {self.dual_clip}")
        if self.temperature <= 0.0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


# ---------------------------------------------------------------------------- per-token terms


def logprobs_and_entropy(logits: Array, targets: Array) -> tuple[Array, Array]:
    """(log p[target], H = -sum_v p_v log p_v) from one log-softmax pass over the vocabulary:
    [B, T, V], [B, T] -> ([B, T], [B, T]) float32. The [B, T, V] pass dominates the loss's cost, so it is done once."""
    chex.assert_equal_shape_prefix([logits, targets], targets.ndim)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    chosen = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return chosen, -(jnp.exp(logp) * logp).sum(axis=-1)


class PolicyTerms(NamedTuple):
    loss: Array  # [B, T]
    clipped: Array  # [B, T] 1.0 where a clip bound set the gradient to zero


def ppo_clip_loss(
    logprobs: Array, old_logprobs: Array, advantages: Array, cfg: LossConfig
) -> PolicyTerms:
    """Clipped surrogate with asymmetric range and optional dual clip.

    rho = exp(logp - logp_old),  l = max(-rho A, -clip(rho, 1 - clip_low, 1 + clip_high) A)
    dual clip (c, Ye et al. 2020): for A < 0, l = min(l, -c A).
    """
    ratio = jnp.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    loss = jnp.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if cfg.dual_clip is not None:
        cap = -cfg.dual_clip * advantages
        dual = (advantages < 0) & (loss > cap)
        loss = jnp.where(dual, cap, loss)
        was_clipped = was_clipped | dual
    return PolicyTerms(loss, was_clipped.astype(jnp.float32))


def reinforce_loss(
    logprobs: Array, old_logprobs: Array, advantages: Array, cfg: LossConfig
) -> PolicyTerms:
    """On-policy REINFORCE without importance weights: l = -A logp. With A = 1 on the target
    tokens this is token cross-entropy, which is how supervised warm starts use the step."""
    del old_logprobs, cfg
    return PolicyTerms(-advantages * logprobs, jnp.zeros_like(logprobs))


POLICY_LOSSES: dict[str, Callable[..., PolicyTerms]] = {
    "ppo": ppo_clip_loss,
    "reinforce": reinforce_loss,
}


def value_loss(
    values: Array, returns: Array, old_values: Array | None, clip: float | None
) -> Array:
    """0.5 (V - G)^2, or with old values and a clip eps the PPO clipped form
    0.5 max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2). [B, T]."""
    err = jnp.square(values - returns)
    if old_values is None or clip is None:
        return 0.5 * err
    v_clipped = old_values + jnp.clip(values - old_values, -clip, clip)
    return 0.5 * jnp.maximum(err, jnp.square(v_clipped - returns))


# ---------------------------------------------------------------------------- metrics


def explained_variance_stats(values: Array, returns: Array, loss_mask: Array) -> dict[str, Array]:
    """Sufficient statistics (sums over model tokens) for `explained_variance_from_stats`."""
    m = loss_mask.astype(jnp.float32)
    resid = returns - values
    return {
        "n": m.sum(),
        "ret": (m * returns).sum(),
        "ret_sq": (m * jnp.square(returns)).sum(),
        "res": (m * resid).sum(),
        "res_sq": (m * jnp.square(resid)).sum(),
    }


def explained_variance_from_stats(stats: dict[str, Array]) -> Array:
    """1 - Var(G - V) / Var(G) over model tokens (0 when Var(G) = 0)."""
    n = jnp.maximum(stats["n"], 1.0)
    var_ret = stats["ret_sq"] / n - jnp.square(stats["ret"] / n)
    var_res = stats["res_sq"] / n - jnp.square(stats["res"] / n)
    return jnp.where(var_ret > 1e-12, 1.0 - var_res / jnp.maximum(var_ret, 1e-12), 0.0)


def explained_variance(values: Array, returns: Array, loss_mask: Array) -> Array:
    """1 - Var(G - V) / Var(G) over tokens with loss_mask = 1."""
    return explained_variance_from_stats(explained_variance_stats(values, returns, loss_mask))


# ---------------------------------------------------------------------------- the PPO objective


def loss_terms(
    cfg: LossConfig,
    loss_mask: Array,
    logprobs: Array,
    old_logprobs: Array | None,
    advantages: Array,
    entropy: Array,
    *,
    values: Array | None = None,
    returns: Array | None = None,
    old_values: Array | None = None,
    ref_logprobs: Array | None = None,
    sampler_logprobs: Array | None = None,
    is_weights: Array | None = None,
) -> dict[str, Pooled]:
    """Every term of the PPO objective and its metrics as Pooled sums. All inputs [B, T].

    Loss terms (cfg.aggregation): policy_loss, entropy, value_loss (when values are given),
    kl_ref (when ref_logprobs are given). Token-mean metrics: approx_kl = mean k3 of
    KL(pi_old || pi), clip_frac, logprob_mismatch = mean |logp - logp_sampler| (sampler_logprobs,
    else old_logprobs). Terms of micro-batches pool exactly by adding sums and denominators.
    is_weights (off-policy importance weights, no gradient) scale the policy loss per token.

    old_logprobs None: the proximal policy is the one being optimised, before its one
    optimizer step on this batch, so its log-probs are this forward's own (without gradient;
    the ratio is exactly 1). The sampler-trainer gap then comes from this forward too:
    mismatch_kl (mean k3 of KL(mu || pi), `off_policy.mismatch_metrics`) with sampler_logprobs.
    """
    chex.assert_equal_shape([x for x in (loss_mask, logprobs, old_logprobs, advantages,
                                         entropy) if x is not None])
    # Neutral values off the mask: a where() after the fact would still send inf * 0 = NaN
    # gradients back from e.g. exp(ref - logp) on a tool-output token with a junk reference.
    on = loss_mask > 0
    current = jax.lax.stop_gradient(logprobs)
    proximal_is_current = old_logprobs is None
    if proximal_is_current:
        old_logprobs = current

    def off_mask(x: Array | None, neutral: Array | float) -> Array | None:
        return None if x is None else jnp.where(on, x, neutral)

    old_logprobs = off_mask(old_logprobs, current)
    advantages = off_mask(advantages, 0.0)
    ref_logprobs = off_mask(ref_logprobs, current)
    sampler_logprobs = off_mask(sampler_logprobs, current)
    if values is not None:
        returns = off_mask(returns, jax.lax.stop_gradient(values))
        old_values = off_mask(old_values, jax.lax.stop_gradient(values))

    def as_loss(per_token: Array) -> Pooled:
        return aggregate(per_token, loss_mask, cfg.aggregation)

    def as_metric(per_token: Array) -> Pooled:
        return aggregate(per_token, loss_mask, "token_mean")

    policy = POLICY_LOSSES[cfg.policy_loss](logprobs, old_logprobs, advantages, cfg)
    if is_weights is not None:
        policy = policy._replace(loss=policy.loss * jax.lax.stop_gradient(off_mask(is_weights,
                                                                                   0.0)))
    sampled = old_logprobs if sampler_logprobs is None else sampler_logprobs
    terms = {
        "policy_loss": as_loss(policy.loss),
        "entropy": as_loss(entropy),
        "approx_kl": as_metric(kl_estimate(old_logprobs, logprobs, "k3")),
        "clip_frac": as_metric(policy.clipped),
        "logprob_mismatch": as_metric(jnp.abs(jax.lax.stop_gradient(logprobs) - sampled)),
    }
    if proximal_is_current and sampler_logprobs is not None:
        # KL(mu || pi) at mu's tokens: mu is the sampler, pi the trainer.
        terms["mismatch_kl"] = as_metric(kl_estimate(sampler_logprobs, current, "k3"))
    if values is not None:
        if returns is None:
            raise ValueError("loss_terms: values given without returns")
        terms["value_loss"] = as_loss(value_loss(values, returns, old_values, cfg.value_clip))
    if ref_logprobs is not None:
        terms["kl_ref"] = as_loss(kl_estimate(logprobs, ref_logprobs, cfg.kl_estimator))
    return terms


def objective(terms: dict[str, Pooled], cfg: LossConfig, loss_denom: Array | None = None) -> Array:
    """L = (c_pg S_pg - c_ent S_ent + c_v S_v + c_kl S_kl) / D over the Pooled loss terms (absent
    terms count 0). D is each term's own denominator, or `loss_denom` - the full batch's
    `aggregation_denominator` - so that a micro-batch's L and gradient are its exact share of the
    full batch's and they add up over micro-batches."""
    weights = {
        "policy_loss": cfg.policy_coef,
        "entropy": -cfg.entropy_coef,
        "value_loss": cfg.value_coef,
        "kl_ref": cfg.kl_coef,
    }
    loss = jnp.zeros((), jnp.float32)
    for name, weight in weights.items():
        if name in terms and weight:
            term = terms[name]
            denom = term.denom if loss_denom is None else loss_denom
            loss = loss + weight * Pooled(term.sum, denom).mean()
    return loss
