"""Off-policy correction for tokens the sampler drew with older (or numerically different)
weights than the trainer's, and the sampler-trainer mismatch metrics. Pure functions over
[B, T] arrays.

Three policies meet in an update: the behaviour policy mu that sampled the tokens (the engine's
log-probs, recorded per token), the proximal policy pi_prox (the trainer's weights before the
update; its log-probs are recomputed by the trainer, `experience.make_train_batch`) and the policy
pi being optimised. The PPO ratio pi / pi_prox is clipped as usual; the importance weight

    w_t = pi_prox(y_t) / mu(y_t) = exp(lp_prox_t - lp_mu_t)

corrects for mu != pi_prox (stale weights under asynchrony, different numerics in any mode):

    token level       w_t                                    (decoupled PPO, Hilton et al. 2022)
    sequence level    w_b = exp(sum_t m_bt (lp_prox - lp_mu))  for every token of row b
    truncated         w <- min(w, C)                          (truncated IS, cap C = is_cap)
    masked            tokens (rows at sequence level) with w outside [1/tau, tau] get no policy
                      loss (tau = is_mask)

The policy loss of token t becomes w_t * l_t (w without gradient). When mu = pi_prox the weights
are exactly 1 (exp(0)).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

IS_LEVELS = ("none", "token", "sequence")


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """is_level: one of IS_LEVELS ("none": no weights, the loss as without correction; a run's
    config may also say "auto", which `agentic_jax.config.resolve_off_policy` turns into one
    of these). is_cap: C >= 1 truncates the weights at C (0: uncapped). is_mask: tau > 1 drops the policy
    loss of tokens (or rows) whose weight lies outside [1/tau, tau] (0: off)."""

    is_level: str = "none"
    is_cap: float = 0.0
    is_mask: float = 0.0

    def __post_init__(self):
        if self.is_level not in IS_LEVELS:
            raise ValueError(f"is_level: expected one of {IS_LEVELS}, got {self.is_level!r}")
        if not (self.is_cap == 0 or self.is_cap >= 1):
            raise ValueError(f"is_cap: expected 0 (uncapped) or a cap >= 1, got {self.is_cap}")
        if not (self.is_mask == 0 or self.is_mask > 1):
            raise ValueError(f"is_mask: expected 0 (off) or a threshold > 1, got {self.is_mask}")

    @property
    def enabled(self) -> bool:
        return self.is_level != "none"


class ISWeights(NamedTuple):
    """weights: float32 [B, T], 0 off the loss mask and on masked tokens. clipped / masked:
    bool [B, T], tokens whose weight the cap lowered / the threshold removed."""

    weights: Array
    clipped: Array
    masked: Array


def importance_weights(old_logprobs: Array, sampler_logprobs: Array, loss_mask: Array,
                       cfg: OffPolicyConfig) -> ISWeights:
    """The module docstring's weights for ``cfg`` (is_level must not be "none"); all [B, T]."""
    if not cfg.enabled:
        raise ValueError("importance_weights: is_level is 'none'")
    on = loss_mask > 0
    log_w = jnp.where(on, old_logprobs.astype(jnp.float32) - sampler_logprobs, 0.0)
    if cfg.is_level == "sequence":
        log_w = jnp.broadcast_to(log_w.sum(axis=1, keepdims=True), log_w.shape)
    w = jnp.exp(log_w)
    masked = jnp.zeros_like(on)
    if cfg.is_mask:
        bound = jnp.log(jnp.float32(cfg.is_mask))
        masked = on & (jnp.abs(log_w) > bound)
    clipped = jnp.zeros_like(on)
    if cfg.is_cap:
        clipped = on & ~masked & (w > cfg.is_cap)
        w = jnp.minimum(w, cfg.is_cap)
    return ISWeights(jnp.where(on & ~masked, w, 0.0), clipped, masked)


def weight_metrics(is_weights: ISWeights, loss_mask: Array) -> dict[str, Array]:
    """is_weight_mean / is_weight_max over the kept model tokens, is_clipped_frac /
    is_masked_frac over all model tokens."""
    on = loss_mask > 0
    kept = on & ~is_weights.masked
    n_on, n_kept = jnp.maximum(on.sum(), 1), jnp.maximum(kept.sum(), 1)
    return {
        "is_weight_mean": jnp.where(kept, is_weights.weights, 0.0).sum() / n_kept,
        "is_weight_max": jnp.where(kept, is_weights.weights, 0.0).max(initial=0.0),
        "is_clipped_frac": is_weights.clipped.sum() / n_on,
        "is_masked_frac": is_weights.masked.sum() / n_on,
    }


def mismatch_metrics(trainer_logprobs: Array, sampler_logprobs: Array,
                     loss_mask: Array) -> dict[str, Array]:
    """The sampler-trainer gap over model tokens: mismatch_kl = mean k3 estimate of
    KL(mu || pi_prox), (r - 1) - log r with r = pi_prox / mu (the tokens are mu's samples), and
    mismatch_max_abs = max |lp_prox - lp_mu|."""
    on = loss_mask > 0
    d = jnp.where(on, trainer_logprobs.astype(jnp.float32) - sampler_logprobs, 0.0)
    k3 = jnp.expm1(d) - d
    return {"mismatch_kl": jnp.where(on, k3, 0.0).sum() / jnp.maximum(on.sum(), 1),
            "mismatch_max_abs": jnp.abs(d).max(initial=0.0)}
