"""Building a run once from its config: the frozen records of components training and
evaluation use (`Policy`, `Run`), and the initial `TrainState`.

Only `agentic_jax.rl.config.read_config` reads the config; everything here takes its typed
records. Evaluation builds a `Policy` (model, tokenizer, rollout engine, sandbox, problems); training
adds the optimizer, the compiled step and the host-side scheduler and tool controller.
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
from jax.sharding import Mesh, NamedSharding

from agentic_jax.data import Problem
from agentic_jax.data.scheduler import CurriculumScheduler, SchedulerConfig
from agentic_jax.parallel import (
    Placement, batch_sharding, create_sharded_model, make_mesh, param_shardings, per_host_copy,
    split_devices)
from agentic_jax.parallel.placement import copy_across
from agentic_jax.rl.config import ConfigError, RunConfig
from agentic_jax.rl.experience import ExperienceConfig
from agentic_jax.rl.optim import make_optimizer
from agentic_jax.rl.problems import Problems, check_prompts, encode_prompt, load_problems
from agentic_jax.rl.state import TrainState, restore_params, root_rng
from agentic_jax.rl.shardings import (
    TrainShardings, has_adapters, init_opt_state, train_shardings)
from agentic_jax.rl.step import make_train_step
from agentic_jax.rollout import AgentConfig, AgentLoop, ToolController
from agentic_jax.rollout.engine import Engine

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Policy:
    """What sampling and grading a policy need; evaluation builds only this.

    ``engine`` holds the weights it samples with (set by `publish`); ``rollout_shardings`` lays
    out the sampler's own copy of them: on the sampler's devices when placement is
    disaggregated (``mesh.rollout_devices``), on each host's devices when there are several
    processes, else None (the engine reads the trainer's arrays).
    """

    cfg: RunConfig
    model_cfg: Any  # agentic_jax.models.ModelConfig of the model as built
    mesh: Mesh
    tokenizer: Any
    pad_id: int
    graphdef: nnx.GraphDef
    state_shardings: Any
    engine: Engine
    sandbox: Any
    agent_cfg: AgentConfig
    problems: Problems
    rollout_shardings: Any
    merge: Any = None  # with LoRA: the compiled state -> merged sampler weights (`publish`)

    def make_prompt(self, problem: Problem, allow_tools: bool = True) -> list[int]:
        return encode_prompt(self.cfg, self.tokenizer, problem, allow_tools)

    def agent(self, controller: ToolController, cfg: AgentConfig | None = None) -> AgentLoop:
        return AgentLoop(self.engine, self.tokenizer, self.sandbox, controller,
                         cfg or self.agent_cfg)

    def close(self) -> None:
        self.sandbox.close()


@dataclasses.dataclass(frozen=True)
class Run:
    """A training run's components. ``scheduler`` and ``controller`` are the host-side state a
    checkpoint keeps as JSON; ``row_multiple`` is the global row count batches come in multiples
    of (batch shards x micro-batches x minibatches), ``local_row_multiple`` this process's."""

    policy: Policy
    optimizer: optax.GradientTransformation
    shardings: TrainShardings
    step_fn: Any
    experience: ExperienceConfig
    batch_sharding: NamedSharding
    row_multiple: int
    local_row_multiple: int
    scheduler: CurriculumScheduler
    controller: ToolController

    @property
    def cfg(self) -> RunConfig:
        return self.policy.cfg


def build_policy(cfg: RunConfig) -> tuple[Policy, nnx.State]:
    """The policy's components and its initial model state (preset init or HF weights)."""
    try:  # the devices are known only here: a recorded config may come from a larger machine
        placement = split_devices(cfg.rollout_devices)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    mesh = make_mesh(*cfg.mesh, devices=placement.train)
    tokenizer = run_tokenizer(cfg)
    problems = load_problems(cfg)
    check_prompts(cfg, tokenizer, problems)  # before anything slow is built
    model = _model(cfg, mesh, len(tokenizer))
    model_cfg = model.cfg
    sampler_graphdef, merge = _merged_sampling(model)
    graphdef, params = nnx.split(model)
    del model  # the state is passed around from here on
    sampled = params if merge is None else merge(params)
    policy_ = Policy(
        cfg=cfg, model_cfg=model_cfg, mesh=mesh, tokenizer=tokenizer, pad_id=_pad_id(tokenizer),
        graphdef=graphdef,
        state_shardings=param_shardings(params, mesh),
        engine=Engine.from_split(sampler_graphdef or graphdef, sampled, cfg.engine,
                                 placement.rollout_mesh() if placement.disaggregated else None),
        sandbox=_sandbox(cfg), agent_cfg=_agent_config(cfg, tokenizer), problems=problems,
        rollout_shardings=_rollout_shardings(sampled, placement),
        merge=merge)
    publish(policy_, params)
    return policy_, params


def restored_policy(cfg: RunConfig, workdir: str) -> tuple[Policy, int]:
    """The policy with the newest checkpoint of ``workdir`` published (its parameters only: no
    optimizer or training state is built or read), and that checkpoint's step."""
    # Colocated: without training there is nothing for the sampler to overlap with.
    policy_, params = build_policy(dataclasses.replace(cfg, rollout_devices=0))
    try:
        params, step = restore_params(workdir, params, policy_.state_shardings)
    except FileNotFoundError:
        policy_.close()
        raise FileNotFoundError(f"--workdir={workdir!r}: no restorable checkpoint") from None
    publish(policy_, params)
    return policy_, step


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
        experience=ExperienceConfig(
            estimator=cfg.rl.estimator, advantage=cfg.advantage, filters=cfg.filters,
            kl_coef=cfg.rl.kl_coef, kl_estimator=cfg.rl.kl_estimator,
            kl_in_reward=cfg.rl.kl_in_reward, row_multiple=row_multiple // processes,
            length_multiple=t.length_bucket, compute_dtype=cfg.model.compute_dtype,
            off_policy=cfg.off_policy),
        batch_sharding=batch_sharding(mesh, 2), row_multiple=row_multiple,
        local_row_multiple=row_multiple // processes,
        scheduler=_scheduler(cfg, policy_.problems.train), controller=_controller(cfg))
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


def publish(policy_: Policy, params: nnx.State, version: int | None = None) -> None:
    """Points the rollout engine at ``params`` (`sampler_weights`); its tokens record
    ``version`` from now on (None: unchanged)."""
    policy_.engine.update_params(sampler_weights(policy_, params), version)


def _rollout_shardings(sampled: nnx.State, placement: Placement) -> nnx.State | None:
    if placement.disaggregated:
        return param_shardings(sampled, placement.rollout_mesh())
    if jax.process_count() > 1:
        return param_shardings(sampled, make_mesh(1, -1, 1, devices=jax.local_devices()))
    return None


def sampler_weights(policy_: Policy, params: nnx.State) -> nnx.State:
    """The weights the engine samples with for the policy's ``params``: with LoRA, their merged
    weights; disaggregated, a copy on the sampler's devices; on several hosts each gets a copy
    on its own devices. Copies move device to device (every process must call it)."""
    if policy_.merge is not None:
        params = policy_.merge(params)
    if policy_.rollout_shardings is None:
        return params
    if jax.process_count() == 1:  # disaggregated: the sampler's own devices
        return copy_across(params, policy_.rollout_shardings)
    return per_host_copy(params, policy_.rollout_shardings)


def _merged_sampling(model: nnx.Module) -> tuple[nnx.GraphDef | None, Any]:
    """With LoRA adapters: the graph of the same model without them and a compiled map from the
    policy's state to its merged weights W + (alpha / r) A B (decoding with merged weights is
    faster than with adapters); (None, None) without adapters."""
    cfg = model.cfg
    if not cfg.lora_rank:
        return None, None
    from agentic_jax.models.lora import base_config, merge_state

    base_graphdef, abstract = nnx.split(
        nnx.eval_shape(lambda: type(model)(base_config(cfg), rngs=nnx.Rngs(0))))

    @jax.jit
    def merge(params: nnx.State) -> nnx.State:
        merged = jax.tree.map(lambda x: x, abstract)
        nnx.replace_by_pure_dict(merged, merge_state(cfg, nnx.to_pure_dict(params)))
        return merged

    return base_graphdef, merge


def run_tokenizer(cfg: RunConfig):
    """The run's tokenizer: ``cfg.tokenizer_path``'s, else the built-in one."""
    from agentic_jax.data.tokenizer import builtin_tokenizer, load_tokenizer

    return load_tokenizer(cfg.tokenizer_path) if cfg.tokenizer_path else builtin_tokenizer()


def _model(cfg: RunConfig, mesh: Mesh, vocab_size: int):
    m = cfg.model
    lora = dict(lora_rank=m.lora_rank, lora_alpha=m.lora_alpha, lora_targets=m.lora_targets)
    if m.path:
        from agentic_jax.models import from_pretrained

        return from_pretrained(m.path, dtype=m.dtype, param_dtype=m.param_dtype, mesh=mesh,
                               value_head=m.value_head, remat=m.remat,
                               attention_impl=m.attention_impl, scan_unroll=m.scan_unroll,
                               seed=cfg.seed, **lora)
    from agentic_jax.models import get_preset

    preset = get_preset(m.preset)
    if m.preset.startswith("tiny"):
        preset = dataclasses.replace(preset, vocab_size=vocab_size)
    model_cfg = dataclasses.replace(
        preset, dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat,
        attention_impl=m.attention_impl, value_head=m.value_head, scan_unroll=m.scan_unroll,
        max_seq_len=max(preset.max_seq_len, cfg.training.max_length), **lora)
    return create_sharded_model(model_cfg, mesh, seed=cfg.seed)


def _sandbox(cfg: RunConfig):
    from agentic_jax.sandbox import Sandbox, SandboxConfig

    e = cfg.environment
    return Sandbox(SandboxConfig(timeout_ms=e.timeout, memory_mb=e.memory_limit,
                                 whitelist=e.whitelist, num_workers=e.num_workers or None,
                                 stateful=e.stateful))


def _agent_config(cfg: RunConfig, tokenizer: Any) -> AgentConfig:
    return AgentConfig(max_length=cfg.training.max_length,
                       max_output_tokens=cfg.environment.max_output_tokens,
                       sampling=cfg.sampling, stateful=cfg.environment.stateful,
                       stop_ids=_stop_ids(cfg, tokenizer), partial=cfg.staleness.partial)


def _stop_ids(cfg: RunConfig, tokenizer: Any) -> tuple[int, ...]:
    """A pretrained model's end-of-response ids: its tokenizer's EOS, its
    generation_config.json's and <|im_end|> under an <|endoftext|> EOS. The built-in model
    learns to end with the built-in tokenizer's EOS alone (empty: the tokenizer's EOS)."""
    if not cfg.model.path:
        return ()
    from agentic_jax.data.tokenizer import stop_token_ids

    return stop_token_ids(tokenizer, cfg.model.path)


def _scheduler(cfg: RunConfig, train: list[Problem]) -> CurriculumScheduler:
    d = cfg.data
    return CurriculumScheduler(
        train, SchedulerConfig(threshold=d.scheduler_threshold, window=d.scheduler_window,
                               min_samples=min(64, d.scheduler_window),
                               ahead=d.scheduler_ahead, stages=d.stages),
        seed=cfg.seed)


def _controller(cfg: RunConfig) -> ToolController:
    e = cfg.environment
    return ToolController(max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout,
                          mode=e.tool_mode)


def _pad_id(tokenizer: Any) -> int:
    for tok in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tok is not None:
            return int(tok)
    return 0
