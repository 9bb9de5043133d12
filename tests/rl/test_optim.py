"""make_optimizer against a direct numpy AdamW with clipping, warmup and cosine decay."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agentic_jax.rl import current_lr, make_optimizer


def _schedule(step, lr, warmup, total, end_ratio):
    if step < warmup:
        return lr * step / warmup
    progress = (step - warmup) / (total - warmup)
    return lr * (end_ratio + (1 - end_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def test_matches_reference_adamw_with_clipping_and_schedule():
    lr, warmup, total, wd, b1, b2, eps, clip = 0.1, 3, 10, 0.05, 0.9, 0.95, 1e-8, 1.0
    opt = make_optimizer(
        lr,
        warmup,
        total,
        max_grad_norm=clip,
        weight_decay=wd,
        b1=b1,
        b2=b2,
        eps=eps,
        end_lr_ratio=0.1,
    )
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(3, 2)), "bias": rng.normal(size=(2,))}
    state = opt.init(jax.tree.map(jnp.asarray, params))
    p = jax.tree.map(jnp.asarray, params)
    ref = {k: v.copy() for k, v in params.items()}
    mu = {k: np.zeros_like(v) for k, v in params.items()}
    nu = {k: np.zeros_like(v) for k, v in params.items()}
    for step in range(total):
        scale = 10.0 if step % 2 == 0 else 0.1  # alternate clipped / unclipped gradients
        grads = {k: rng.normal(size=v.shape) * scale for k, v in params.items()}
        updates, state = opt.update(jax.tree.map(jnp.asarray, grads), state, p)
        p = optax.apply_updates(p, updates)
        norm = math.sqrt(sum((g**2).sum() for g in grads.values()))
        factor = min(1.0, clip / norm)
        eta = _schedule(step, lr, warmup, total, 0.1)
        for k, grad in grads.items():
            g = grad * factor
            mu[k] = b1 * mu[k] + (1 - b1) * g
            nu[k] = b2 * nu[k] + (1 - b2) * g**2
            m_hat, v_hat = mu[k] / (1 - b1 ** (step + 1)), nu[k] / (1 - b2 ** (step + 1))
            decay = wd * ref[k] if k == "w" else 0.0  # no decay on biases
            ref[k] = ref[k] - eta * (m_hat / (np.sqrt(v_hat) + eps) + decay)
        assert float(current_lr(state)) == pytest.approx(eta, rel=1e-5, abs=1e-9)
        for k, expected in ref.items():
            np.testing.assert_allclose(
                p[k], expected, rtol=2e-4, atol=1e-6, err_msg=f"{k} @ {step}"
            )


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"lr": 0.0}, "lr"),
        ({"warmup_steps": 20}, "warmup_steps"),
        ({"warmup_steps": 10}, "warmup"),
        ({"total_steps": 0}, "total_steps"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"weight_decay": -1.0}, "weight_decay"),
        ({"b2": 1.0}, "b2"),
        ({"eps": 0.0}, "eps"),
        ({"end_lr_ratio": 1.5}, "end_lr_ratio"),
    ],
)
def test_argument_validation(kwargs, field):
    args = {"lr": 1e-3, "warmup_steps": 2, "total_steps": 10} | kwargs
    with pytest.raises(ValueError, match=field):
        make_optimizer(**args)


def test_no_warmup_starts_at_peak():
    opt = make_optimizer(0.5, 0, 4, end_lr_ratio=0.0)
    p = {"w": jnp.ones((2, 2))}
    state = opt.init(p)
    _, state = opt.update(p, state, p)
    assert float(current_lr(state)) == pytest.approx(0.5)
