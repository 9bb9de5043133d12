"""AdamW with global-norm clipping and a linear-warmup, cosine-decay learning rate."""

from __future__ import annotations

import jax
import optax

Array = jax.Array


_NO_DECAY_SUFFIXES = ("bias", "scale")


def _param_name(path) -> str:
    names = [str(getattr(k, "key", getattr(k, "name", ""))) for k in path]
    names = [n for n in names if n and n != "value"]
    return names[-1] if names else ""


def _decay_mask(params):
    """Weight decay on weight matrices and embeddings only: never on biases or norm scales
    (named *bias / *scale; layer-stacked ones are 2-D too) nor on any 1-D parameter."""
    return jax.tree_util.tree_map_with_path(
        lambda path, p: p.ndim >= 2 and not _param_name(path).endswith(_NO_DECAY_SUFFIXES),
        params,
    )


def make_optimizer(
    lr: float,
    warmup_steps: int,
    total_steps: int,
    max_grad_norm: float | None = 1.0,
    weight_decay: float = 0.0,
    b1: float = 0.9,
    b2: float = 0.95,
    eps: float = 1e-8,
    end_lr_ratio: float = 0.1,
) -> optax.GradientTransformation:
    """clip_by_global_norm(max_grad_norm) -> AdamW(b1, b2, eps, weight_decay) at rate eta(s):

        eta(s) = lr * s / w                                       s < w = warmup_steps
        eta(s) = lr * (r + (1 - r) (1 + cos(pi * p)) / 2)         p = (s - w) / (total_steps - w)
    with r = end_lr_ratio. Decoupled weight decay (scaled by eta) applies to weight matrices,
    not to biases or norms. The rate of the latest update is `current_lr(opt_state)`.
    """
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if warmup_steps < 0 or total_steps <= 0 or warmup_steps >= total_steps:
        raise ValueError(
            f"need 0 <= warmup_steps < total_steps (the cosine phase must be non-empty), "
            f"got warmup_steps={warmup_steps}, total_steps={total_steps}"
        )
    if max_grad_norm is not None and max_grad_norm <= 0:
        raise ValueError(f"max_grad_norm must be > 0 or None, got {max_grad_norm}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
        raise ValueError(f"b1 and b2 must be in [0, 1), got b1={b1}, b2={b2}")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if not 0.0 <= end_lr_ratio <= 1.0:
        raise ValueError(f"end_lr_ratio must be in [0, 1], got {end_lr_ratio}")
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=lr,
        warmup_steps=warmup_steps,
        decay_steps=total_steps,
        end_value=lr * end_lr_ratio,
    )
    transforms = [] if max_grad_norm is None else [optax.clip_by_global_norm(max_grad_norm)]
    transforms += [optax.scale_by_adam(b1=b1, b2=b2, eps=eps)]
    if weight_decay:
        transforms += [optax.add_decayed_weights(weight_decay, mask=_decay_mask)]
    # Injecting the rate stores it in the optimizer state, so the step can report it.
    transforms += [
        optax.inject_hyperparams(optax.scale_by_learning_rate, static_args=("flip_sign",))(
            learning_rate=schedule
        )
    ]
    return optax.chain(*transforms)


def _is_injected_lr(path, value) -> bool:
    return isinstance(value, jax.Array) and any(
        getattr(k, "key", None) == "hyperparams" or getattr(k, "name", None) == "hyperparams"
        for k in path
    )


def current_lr(opt_state) -> Array:
    """The learning rate of the latest update of a `make_optimizer` state (the first: eta(0))."""
    return optax.tree_utils.tree_get(opt_state, "learning_rate", filtering=_is_injected_lr)
