"""Building a training run once from its config: the frozen record of its components (`Run`)
and the initial `TrainState`.

Only `agentic_jax.config.read_config` reads the config; everything here takes its typed
records. A run's policy is `agentic_jax.episodes.policy.Policy` (the inference policy with the
run's problems); training adds the optimizer, the compiled step and the host-side scheduler and
tool controller.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding

from agentic_jax.config import ConfigError, RunConfig, resolve_old_logprobs
from agentic_jax.data import Problem
from agentic_jax.data.scheduler import CurriculumScheduler, SchedulerConfig
from agentic_jax.episodes.policy import Policy, build_policy
from agentic_jax.inference.policy import publish, sampler_weights  # noqa: F401  (the run's)
from agentic_jax.parallel import batch_sharding
from agentic_jax.rl.experience import ExperienceConfig
from agentic_jax.rl.optim import make_optimizer
from agentic_jax.rl.shardings import (
    TrainShardings, has_adapters, init_opt_state, train_shardings)
from agentic_jax.rl.state import TrainState, root_rng
from agentic_jax.rl.step import make_train_step, make_zero_gradient_step
from agentic_jax.rollout import ToolController

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Run:
    """A training run's components. ``scheduler`` and ``controller`` are the host-side state a
    checkpoint keeps as JSON; ``row_multiple`` is the global row count batches come in multiples
    of (batch shards x micro-batches x minibatches), ``local_row_multiple`` this process's."""

    policy: Policy
    optimizer: optax.GradientTransformation
    shardings: TrainShardings
    step_fn: Any
    zero_step_fn: Any  # `rl.step.make_zero_gradient_step`: step_fn's update of a zero gradient
    experience: ExperienceConfig
    batch_sharding: NamedSharding
    row_multiple: int
    local_row_multiple: int
    scheduler: CurriculumScheduler
    controller: ToolController

    @property
    def cfg(self) -> RunConfig:
        return self.policy.cfg


def build_run(cfg: RunConfig) -> tuple[Run, TrainState]:
    """Every component of a training run and its fresh `TrainState` (step 0)."""
    t, processes = cfg.training, jax.process_count()
    if t.batch_size % processes:
        raise ConfigError(f"training.batch_size: expected a multiple of the {processes} "
                          f"processes (each rolls out whole prompt groups), got {t.batch_size}")
    policy_, params = build_policy(cfg)
    mesh = policy_.mesh
    batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_shards % processes:
        policy_.close()
        raise ConfigError(f"mesh: the batch axes (data x fsdp = {batch_shards}) must span the "
                          f"{processes} processes, so that each feeds its own rows")
    optimizer = make_optimizer(**t.optimizer_args())
    shardings = train_shardings(params, optimizer, mesh, policy_.state_shardings,
                                offload_opt_state=t.offload_optimizer)
    row_multiple = batch_shards * t.micro_batches * t.minibatches
    run = Run(
        policy=policy_, optimizer=optimizer, shardings=shardings,
        step_fn=make_train_step(policy_.graphdef, optimizer, cfg.loss, mesh, t.micro_batches,
                                shardings=shardings, compute_dtype=cfg.model.compute_dtype),
        zero_step_fn=make_zero_gradient_step(optimizer, mesh, shardings=shardings),
        experience=ExperienceConfig(
            estimator=cfg.rl.estimator, advantage=cfg.advantage, filters=cfg.filters,
            kl_coef=cfg.rl.kl_coef, kl_estimator=cfg.rl.kl_estimator,
            kl_in_reward=cfg.rl.kl_in_reward, row_multiple=row_multiple // processes,
            length_multiple=t.length_bucket, compute_dtype=cfg.model.compute_dtype,
            off_policy=cfg.off_policy,
            recompute_old_logprobs=resolve_old_logprobs(cfg).recompute),
        batch_sharding=batch_sharding(mesh, 2), row_multiple=row_multiple,
        local_row_multiple=row_multiple // processes,
        scheduler=_scheduler(cfg, policy_.problems.train),
        controller=policy_.controller(cfg.environment.tool_mode))
    return run, init_state(run, params)


def init_state(run: Run, params: nnx.State) -> TrainState:
    """Step 0: fresh optimizer state and, when KL is penalised, ``params`` as the reference
    (shared until `with_reference` snapshots the starting policy; with LoRA none: the
    reference is the base model, `state.reference_state`)."""
    opt_init = jax.jit(functools.partial(init_opt_state, run.optimizer),
                       out_shardings=run.shardings.opt_state)
    return TrainState(params=params, opt_state=opt_init(params),
                      ref_params=(params if run.cfg.rl.needs_reference
                                  and not has_adapters(params) else None),
                      step=np.zeros((), np.int32), rng=root_rng(run.cfg.seed))


def _scheduler(cfg: RunConfig, train: list[Problem]) -> CurriculumScheduler:
    d = cfg.data
    return CurriculumScheduler(
        train, SchedulerConfig(threshold=d.scheduler_threshold, window=d.scheduler_window,
                               min_samples=min(64, d.scheduler_window),
                               ahead=d.scheduler_ahead, stages=d.stages),
        seed=cfg.seed)
