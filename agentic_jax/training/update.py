"""The update: K epochs of compiled, sharded minibatch steps on the step's graded episodes.

    (state, episodes) -> experience batch (filters, old / reference log-probs, advantages)
                      -> ppo_epochs x minibatches of `run.step_fn` -> (state, metrics)
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import jax
import numpy as np

from agentic_jax.rl.experience import make_experience, minibatches
from agentic_jax.rl.state import TrainState, reference_state
from agentic_jax.rollout import Episode, RolloutBatch
from agentic_jax.training.builders import Run
from agentic_jax.utils.timing import CompileCount

logger = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite updates; the last good checkpoint is kept."""


class UpdateResult(NamedTuple):
    state: TrainState
    metrics: dict[str, float]      # averaged over the update's minibatch steps
    skipped_in_a_row: int          # consecutive non-finite steps, carried to the next update


def update(run: Run, state: TrainState, episodes: list[Episode], step: int, *,
           skipped_in_a_row: int = 0) -> UpdateResult:
    """PPO epochs over this host's ``episodes`` (every host calls it with its own share).

    Raises `TrainingDiverged` after more than ``training.max_skipped_updates`` consecutive
    non-finite steps.
    """
    t = run.cfg.training
    rollout = RolloutBatch.from_episodes(episodes, length=t.max_length,
                                         pad_id=run.policy.pad_id)
    batch, stats, lengths = make_experience(
        rollout, run.experience, graphdef=run.policy.graphdef, state=state.params,
        ref_state=reference_state(state, run.cfg.rl.needs_reference),
        batch_sharding=run.batch_sharding)
    if batch is None:
        return UpdateResult(state, {**stats, "skipped": 1.0}, skipped_in_a_row)
    if t.skip_zero_gradient and zero_gradient(batch, run.cfg.loss):
        return _zero_gradient_update(run, state, batch, stats)
    rng = np.random.default_rng([run.cfg.seed, step])
    params, opt_state = state.params, state.opt_state
    packing = packing_options(t, run.row_multiple, lengths)
    sums: dict[str, float] = {}
    shapes = []   # one [rows, width] a minibatch step
    compiled = CompileCount(run.step_fn)
    for _ in range(t.ppo_epochs):
        for mb in minibatches(batch, t.minibatches, rng, run.batch_sharding, **packing):
            shapes.append(mb.tokens.shape)
            params, opt_state, metrics = compiled.call(run.step_fn, params, opt_state, mb)
            metrics = jax.device_get(metrics)
            skipped_in_a_row = _count_skips(metrics, skipped_in_a_row, t.max_skipped_updates)
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
    out = {k: v / len(shapes) for k, v in sums.items()}
    out.update(stats, zero_gradient=0.0, **_compile_metrics(compiled),
               **slot_metrics(shapes, lengths, t.ppo_epochs))
    return UpdateResult(state.replace(params=params, opt_state=opt_state), out,
                        skipped_in_a_row)


def packing_options(training: Any, row_multiple: int, lengths: np.ndarray) -> dict[str, Any]:
    """`minibatches`' packing arguments for ``training`` (the run's TrainingConfig): each
    minibatch's episodes (``lengths`` tokens) packed into rows of ``training.pack_width``
    tokens (0: ``training.max_length``), the row count padded by `packed_row_count` to a
    multiple of the data shards x micro-batches (the run's ``row_multiple`` over the
    minibatches); none where ``training.pack_sequences`` is off."""
    if not training.pack_sequences:
        return {}
    return dict(lengths=lengths, pack_width=training.pack_width or training.max_length,
                row_multiple=row_multiple // training.minibatches)


def slot_metrics(shapes: list[tuple[int, ...]], lengths: np.ndarray, epochs: int
                 ) -> dict[str, float]:
    """What the update's steps computed, from their minibatches' [rows, width] ``shapes``:
    update_rows, the mean rows an optimizer step (packed rows, padding included), and
    update_fill, the share of the token slots (rows x width) that held an episode's token
    (``lengths``, every episode once an epoch; the repeats that pad a batch to the mesh count
    as episodes). Absent on steps whose update ran no forward (a zero gradient, a skip)."""
    slots = sum(int(np.prod(shape)) for shape in shapes)
    return {"update_rows": sum(shape[0] for shape in shapes) / len(shapes),
            "update_fill": float(np.sum(lengths)) * epochs / slots}


def zero_gradient(batch: Any, loss: Any) -> bool:
    """Whether the update's loss has an exactly zero gradient: every trained token's advantage
    is 0 (GRPO's advantages when every group got a single reward, as in most steps of sparse
    rewards: 12 of 12 in GSM8K without a warm start) and no other term weighs in (no entropy
    bonus, value loss or KL to a reference), with finite log-probs and importance weights
    where the loss trains. Decided in a single process only (with several, each holds a share
    of the batch and all must agree): there the full step runs."""
    if jax.process_count() > 1 or loss.entropy_coef or loss.value_coef:
        return False
    if loss.kl_coef and batch.ref_logprobs is not None:
        return False
    advantages, mask, *rest = jax.device_get(
        (batch.advantages, batch.loss_mask)
        + tuple(x for x in (batch.old_logprobs, batch.sampler_logprobs, batch.is_weights)
                if x is not None))
    trained = np.asarray(mask) > 0
    if np.any(np.asarray(advantages)[trained]):
        return False
    # A non-finite log-prob or weight where the loss trains makes the full step's loss NaN
    # (0 x inf), which skips that update and counts towards TrainingDiverged: the full step
    # decides those.
    return all(np.isfinite(np.asarray(x)[trained]).all() for x in rest)


def _zero_gradient_update(run: Run, state: TrainState, batch: Any, stats: dict[str, float]
                          ) -> UpdateResult:
    """The update of a batch whose loss has a zero gradient (`zero_gradient`): each of its
    ppo_epochs x minibatches optimizer steps applied to that zero gradient without the forward
    and backward passes (`rl.step.make_zero_gradient_step`): the same weights and optimizer
    state as the full steps, in a fraction of a second. Its metrics are the ones known
    without the forward: the loss, its gradient norm and clipped fraction are 0, and so is
    approx_kl where the old log-probs are this update's own; entropy and the sampler mismatch
    are not measured (zero_gradient = 1 marks the step)."""
    t = run.cfg.training
    params, opt_state = state.params, state.opt_state
    steps, rates = t.ppo_epochs * t.minibatches, []
    compiled = CompileCount(run.zero_step_fn)
    for _ in range(steps):
        params, opt_state, lr = compiled.call(run.zero_step_fn, params, opt_state)
        rates.append(lr)
    mask = np.asarray(jax.device_get(batch.loss_mask))
    out = {"loss": 0.0, "policy_loss": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "skipped": 0.0,
           "tokens": float(mask.sum()) / t.minibatches, "zero_gradient": 1.0}
    if batch.old_logprobs is None:   # the update's own forward: ratio 1
        out["approx_kl"] = 0.0
    rates = [float(r) for r in jax.device_get(rates)]
    if min(rates) >= 0:   # the mean over the optimizer steps, as the full update logs it
        out["lr"] = sum(rates) / steps
    out.update(stats, **_compile_metrics(compiled))
    # a finite step: the count of non-finite ones in a row starts again
    return UpdateResult(state.replace(params=params, opt_state=opt_state), out, 0)


def _compile_metrics(compiled: CompileCount) -> dict[str, float]:
    """The update's calls that compiled its step (a new packed row count compiles the train
    step again: seconds inside that step's update time) as timing metrics."""
    compiles, seconds = compiled.take()
    return {"time_update_compiles": float(compiles), "time_update_compile_s": seconds}


def _count_skips(metrics: dict[str, Any], in_a_row: int, limit: int) -> int:
    if float(metrics.get("skipped", 0.0)) <= 0:
        return 0
    in_a_row += 1
    logger.warning("non-finite loss or gradient: update skipped (%d in a row)", in_a_row)
    if in_a_row > limit:
        raise TrainingDiverged(f"{in_a_row} consecutive non-finite updates; stopping with the "
                               "last good checkpoint")
    return in_a_row
