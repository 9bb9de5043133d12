"""The compiled PPO update: one jit over the mesh with micro-batch accumulation and skip-on-NaN.

The model crosses the jit boundary as `nnx.split(model) -> (graphdef, state)`; the step merges it
inside and scores the batch with `agentic_jax.rl.forward.policy_outputs`. Only `nnx.Param` leaves
are trained, other state passes through unchanged.

Sharding: parameters and optimizer state keep the shardings given by `train_shardings` (from
`agentic_jax.parallel.param_shardings`); batch rows are split over the ("data", "fsdp") mesh
axes and replicated over "tensor"; metrics are replicated scalars.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from agentic_jax.rl import losses
from agentic_jax.rl.aggregation import aggregation_denominator
from agentic_jax.rl.forward import cast_floats, context_mesh, policy_outputs, split_rows
from agentic_jax.rl.optim import current_lr
from agentic_jax.rl.shardings import (
    BATCH_AXES, TrainShardings, in_device_memory, params_and_rest)

Array = jax.Array


@struct.dataclass
class TrainBatch:
    """One update's data; every field has leading dim B, [B, T] unless noted.

    tokens int32: prompt + response, right padded. positions int32. loss_mask f32: 1 on
    model-generated tokens only. old_logprobs f32: logp_old(tokens[:, t] | tokens[:, :t]) (index
    0 unused), or None when this step is the batch's only optimizer step: the step's own
    forward, without gradient, is then the proximal policy (`losses.loss_terms`). advantages, returns f32. Optional: old_values f32 (clipped value loss),
    ref_logprobs f32 (KL to the reference), sampler_logprobs f32 (logprob_mismatch; defaults to
    old_logprobs), segment_ids int32 (packed rows), is_weights f32 (off-policy importance
    weights of the policy loss, `agentic_jax.rl.off_policy`; None: 1), scored int32 [B, N]
    (the columns the LM head scores, `forward.scored_columns` of loss_mask; None: all).
    """

    tokens: Array
    positions: Array
    loss_mask: Array
    old_logprobs: Array
    advantages: Array
    returns: Array
    old_values: Array | None = None
    ref_logprobs: Array | None = None
    sampler_logprobs: Array | None = None
    segment_ids: Array | None = None
    is_weights: Array | None = None
    scored: Array | None = None


def as_train_batch(batch: TrainBatch | dict[str, Array]) -> TrainBatch:
    """A TrainBatch from itself or a dict of its fields (unknown keys are an error)."""
    if isinstance(batch, TrainBatch):
        return batch
    unknown = set(batch) - set(TrainBatch.__dataclass_fields__)
    if unknown:
        raise ValueError(f"train batch: unknown fields {sorted(unknown)}")
    return TrainBatch(**batch)


# ---------------------------------------------------------------------------- the step

StepFn = Callable[[nnx.State, Any, TrainBatch], tuple[nnx.State, Any, dict[str, Array]]]


def _micro_loss(graphdef, rest, cfg: losses.LossConfig, compute_dtype, loss_denom):
    """params, micro-batch -> (objective with full-batch denominators, (terms, ev_stats))."""

    def loss_fn(params, mb: TrainBatch):
        model = nnx.merge(graphdef, cast_floats(params, compute_dtype), rest)
        logprobs, values, entropy = policy_outputs(
            model, mb.tokens, mb.positions, mb.segment_ids, cfg.temperature, mb.scored
        )
        terms = losses.loss_terms(
            cfg,
            mb.loss_mask,
            logprobs,
            mb.old_logprobs,
            mb.advantages,
            entropy,
            values=values,
            returns=mb.returns,
            old_values=mb.old_values,
            ref_logprobs=mb.ref_logprobs,
            sampler_logprobs=mb.sampler_logprobs,
            is_weights=mb.is_weights,
        )
        ev = (
            {}
            if values is None
            else losses.explained_variance_stats(
                jax.lax.stop_gradient(values), mb.returns, mb.loss_mask
            )
        )
        peaks = {}
        if mb.old_logprobs is None and mb.sampler_logprobs is not None:
            # The sampler-trainer gap's maximum (off_policy.mismatch_metrics), from this forward.
            gap = jax.lax.stop_gradient(logprobs) - mb.sampler_logprobs
            peaks["mismatch_max_abs"] = jnp.where(mb.loss_mask > 0, jnp.abs(gap), 0.0).max(
                initial=0.0)
        return losses.objective(terms, cfg, loss_denom), (terms, ev, peaks)

    return loss_fn


def _accumulate(loss_fn, params, batch: TrainBatch, micro_batches: int, mesh: Mesh | None):
    """Sum over micro-batches (lax.scan) of (objective, grads, terms, ev_stats), and the
    maximum of peaks (non-negative).

    Every micro-objective is divided by the full batch's denominators, so the sums are exactly
    the full batch's objective and gradient.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if micro_batches == 1:
        (loss, aux), grads = grad_fn(params, batch)
        return loss, grads, aux

    def split(x):
        x = split_rows(x, micro_batches)
        if mesh is None:
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(None, BATCH_AXES)))

    chunks = jax.tree.map(split, batch)
    first = jax.tree.map(lambda x: x[0], chunks)
    zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(grad_fn, params, first))

    def body(carry, mb):
        ((loss, (terms, ev, peaks)), grads), new = carry, grad_fn(params, mb)
        ((m_loss, (m_terms, m_ev, m_peaks)), m_grads) = new
        add = functools.partial(jax.tree.map, jnp.add)
        return ((loss + m_loss, (add(terms, m_terms), add(ev, m_ev),
                                 jax.tree.map(jnp.maximum, peaks, m_peaks))),
                add(grads, m_grads)), None

    ((loss, aux), grads), _ = jax.lax.scan(body, zeros, chunks)
    return loss, grads, aux


def _update_if_finite(optimizer, grads, opt_state, params, finite: Array):
    """One optimizer update, or (params, opt_state) unchanged where `finite` is False."""
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
    return keep(new_params, params), keep(new_opt_state, opt_state)


def make_train_step(
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    loss_config: losses.LossConfig,
    mesh: Mesh | None = None,
    micro_batches: int = 1,
    *,
    shardings: TrainShardings | None = None,
    compute_dtype: str | None = None,
) -> StepFn:
    """A jit-compiled `step(state, opt_state, batch) -> (state, opt_state, metrics)`.

    Minimises `losses.objective` over the batch, accumulated over `micro_batches` slices of the
    rows inside the compiled step, then applies one optimizer update to the nnx.Param leaves.
    If the objective or the gradient norm is not finite the update is skipped: state and
    opt_state come back unchanged and metrics["skipped"] = 1.

    mesh: with a mesh, `shardings` (see `train_shardings`) fixes the in/out shardings; B must be
      divisible by micro_batches * (data * fsdp). state and opt_state are donated.
    Numerics and memory are the model's: bf16 compute over float32 master weights is
    ModelConfig(dtype="bfloat16", param_dtype="float32"), rematerialisation ModelConfig.remat.
    compute_dtype: cast the parameters to it (e.g. the model's "bfloat16") before the forward,
      so that FSDP all-gathers move half the bytes; gradients and the optimizer stay in the
      parameters' own dtype.
    Metrics (float32 scalars): loss, policy_loss, entropy, approx_kl, clip_frac,
    logprob_mismatch, grad_norm, skipped, tokens; lr with a `make_optimizer` optimizer;
    value_loss and explained_variance with a value head; kl_ref with ref_logprobs in the batch;
    mismatch_kl and mismatch_max_abs when the batch has sampler_logprobs and no old_logprobs.
    """
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    if mesh is not None and shardings is None:
        raise ValueError("make_train_step: a mesh needs `shardings=train_shardings(state, ...)`")
    step = functools.partial(
        _train_step, graphdef=graphdef, optimizer=optimizer, loss_config=loss_config,
        mesh=mesh, micro_batches=micro_batches, compute_dtype=compute_dtype,
        data_shards=1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"],
        opt_on_device=None if shardings is None else in_device_memory(shardings.opt_state))
    if mesh is None:
        return jax.jit(step, donate_argnums=(0, 1))
    replicated = NamedSharding(mesh, P())
    return jax.jit(
        step,
        in_shardings=(shardings.state, shardings.opt_state, shardings.batch),
        out_shardings=(shardings.state, shardings.opt_state, replicated),
        donate_argnums=(0, 1),
    )


def make_zero_gradient_step(
    optimizer: optax.GradientTransformation,
    mesh: Mesh | None = None,
    *,
    shardings: TrainShardings | None = None,
) -> Callable[[nnx.State, Any], tuple[nnx.State, Any, Array]]:
    """A jit-compiled `step(state, opt_state) -> (state, opt_state, lr)`: the optimizer update
    `make_train_step` applies to a batch whose loss has an exactly zero gradient (every trained
    token's advantage 0 and no other loss term: `training.update.zero_gradient`), without the
    forward and backward passes. The optimizer still steps on the zero gradient (its count and
    schedule, the moments' decay, momentum from earlier steps, weight decay), so state and
    opt_state come out as the full step's would. ``lr``: the learning rate after the step
    (-1 when the optimizer has no schedule to read)."""
    step = functools.partial(
        _zero_gradient_step, optimizer=optimizer,
        opt_on_device=None if shardings is None else in_device_memory(shardings.opt_state))
    if mesh is None:
        return jax.jit(step, donate_argnums=(0, 1))
    return jax.jit(step, in_shardings=(shardings.state, shardings.opt_state),
                   out_shardings=(shardings.state, shardings.opt_state,
                                  NamedSharding(mesh, P())),
                   donate_argnums=(0, 1))


def _zero_gradient_step(state: nnx.State, opt_state, *, optimizer, opt_on_device: Any):
    """The body of `make_zero_gradient_step`'s compiled step."""
    params, rest = params_and_rest(state)
    grads = jax.tree.map(jnp.zeros_like, params)
    if opt_on_device is not None:  # offloaded: host -> device for the update, and back
        opt_state = jax.device_put(opt_state, opt_on_device)
    params, opt_state = _update_if_finite(optimizer, grads, opt_state, params, jnp.bool_(True))
    lr = current_lr(opt_state)
    return (nnx.merge_state(params, rest), opt_state,
            jnp.asarray(-1.0 if lr is None else lr, jnp.float32))


def _train_step(state: nnx.State, opt_state, batch: TrainBatch | dict[str, Array], *,
                graphdef, optimizer, loss_config: losses.LossConfig, mesh: Mesh | None,
                micro_batches: int, compute_dtype: str | None, data_shards: int,
                opt_on_device: Any):
    """The body of `make_train_step`'s compiled step."""
    batch = as_train_batch(batch)
    rows = batch.tokens.shape[0]
    if rows % (micro_batches * data_shards):
        raise ValueError(
            f"batch size {rows} must be divisible by micro_batches * data * fsdp = "
            f"{micro_batches} * {data_shards}"
        )
    chex.assert_equal_shape([batch.tokens, batch.loss_mask, batch.advantages])
    if batch.old_logprobs is None and batch.is_weights is not None:
        raise ValueError("train batch: importance weights need the proximal policy's "
                         "old_logprobs (None means this update's own forward)")
    params, rest = params_and_rest(state)
    loss_denom = aggregation_denominator(batch.loss_mask, loss_config.aggregation)
    loss_fn = _micro_loss(graphdef, rest, loss_config, compute_dtype, loss_denom)
    with context_mesh(mesh):
        loss, grads, (terms, ev, peaks) = _accumulate(loss_fn, params, batch, micro_batches,
                                                      mesh)
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    if opt_on_device is not None:  # offloaded: host -> device for the update, and back
        opt_state = jax.device_put(opt_state, opt_on_device)
    params, opt_state = _update_if_finite(optimizer, grads, opt_state, params, finite)

    metrics = {name: term.mean() for name, term in terms.items()}
    if ev:
        metrics["explained_variance"] = losses.explained_variance_from_stats(ev)
    metrics.update(peaks)
    metrics.update(loss=loss, grad_norm=grad_norm, skipped=~finite, tokens=batch.loss_mask.sum())
    lr = current_lr(opt_state)
    if lr is not None:
        metrics["lr"] = lr
    metrics = {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
    return nnx.merge_state(params, rest), opt_state, metrics
