"""Estimators of KL(pi || pi_ref) per token, for the KL loss term or the KL reward penalty.

Index t refers to token t sampled from pi given the prefix < t (see `agentic_jax.rl.losses`).
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

Array = jax.Array


def _kl_k1(logprobs: Array, ref_logprobs: Array) -> Array:
    return logprobs - ref_logprobs


def _kl_k2(logprobs: Array, ref_logprobs: Array) -> Array:
    return 0.5 * jnp.square(logprobs - ref_logprobs)


def _kl_k3(logprobs: Array, ref_logprobs: Array) -> Array:
    log_ratio = ref_logprobs - logprobs
    return jnp.expm1(log_ratio) - log_ratio


KL_ESTIMATORS: dict[str, Callable[[Array, Array], Array]] = {
    "k1": _kl_k1,
    "k2": _kl_k2,
    "k3": _kl_k3,
}


def kl_estimate(logprobs: Array, ref_logprobs: Array, estimator: str = "k3") -> Array:
    """Per-token estimate of KL(pi || pi_ref) at tokens sampled from pi. [B, T].

    With log r = logp_ref - logp (Schulman, "Approximating KL divergence"):
      k1 = -log r           unbiased, high variance, can be negative
      k2 = (log r)^2 / 2    biased, low variance
      k3 = (r - 1) - log r  unbiased, >= 0
    """
    try:
        fn = KL_ESTIMATORS[estimator]
    except KeyError:
        raise ValueError(f"kl_estimator: expected one of {sorted(KL_ESTIMATORS)}") from None
    return fn(logprobs.astype(jnp.float32), ref_logprobs.astype(jnp.float32))


def kl_penalized_rewards(
    logprobs: Array, ref_logprobs: Array, loss_mask: Array, kl_coef: float, estimator: str = "k1"
) -> Array:
    """Token rewards for KL in the reward: -kl_coef * KL_t on model tokens, 0 elsewhere. [B, T].

    Pass the result as `token_rewards` to an advantage estimator (the outcome reward is added on
    the last model token there).
    """
    chex.assert_equal_shape([logprobs, ref_logprobs, loss_mask])
    return -kl_coef * kl_estimate(logprobs, ref_logprobs, estimator) * loss_mask
