"""The inference policy: a model with its weights published to a rollout engine, its tokenizer,
prompt template, sandbox and tool settings. What sampling and grading need; nothing of a run's
training data.

Only `agentic_jax.config.read_config` reads the config; everything here takes its typed
record. Training builds the same pieces and adds its problems (`agentic_jax.training.builders`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from agentic_jax.data import Problem
from agentic_jax.inference.prompts import chat_prompt, encode_prompt
from agentic_jax.parallel import (
    Placement, create_sharded_model, make_mesh, param_shardings, per_host_copy, split_devices)
from agentic_jax.parallel.placement import copy_across
from agentic_jax.config import ConfigError, RunConfig
from agentic_jax.rollout import (
    AgentConfig, AgentLoop, RolloutService, ToolController, build_service)
from agentic_jax.rollout.engine import Engine
from agentic_jax.rollout.environment import Tool, build_tools


@dataclasses.dataclass(frozen=True)
class InferencePolicy:
    """A policy ready to sample: ``engine`` holds the weights it samples with (set by
    `publish`); ``rollout_shardings`` lays out the sampler's own copy of them: on the
    sampler's devices when placement is disaggregated (``mesh.rollout_devices``), on each
    host's devices when there are several processes, else None (the engine reads the
    trainer's arrays). ``step``: the checkpoint step of the weights (None: as built)."""

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
    rollout_shardings: Any
    merge: Any = None  # with LoRA: the compiled state -> merged sampler weights (`publish`)
    step: int | None = None

    def make_prompt(self, problem: Problem, allow_tools: bool = True) -> list[int]:
        return encode_prompt(self.cfg, self.tokenizer, problem, allow_tools)

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return chat_prompt(self.cfg, self.tokenizer, messages)

    def controller(self, mode: str = "fixed") -> ToolController:
        """A tool controller with the run's budget and timeout (``mode`` "fixed": calls
        allowed; "forbidden": the direct-answer setting; "adaptive": training's)."""
        return tool_controller(self.cfg, mode)

    @functools.cached_property
    def tools(self) -> tuple[Tool, ...]:
        """The run's tools (``environment.tools``), built once: a tool keeps an episode's
        memory in the per-episode ``state`` the loop hands it, so loops can share them."""
        e = self.cfg.environment
        return tuple(build_tools(e.tools, sandbox=self.sandbox, stateful=e.stateful))

    def rollout_service(self, cfg: AgentConfig | None = None) -> RolloutService:
        """A fresh open rollout loop over the engine with the run's tools, end ids and (with
        ``constrain_code``) code constraint; ``cfg``: settings other than ``agent_cfg``'s."""
        return build_service(self.engine, self.tokenizer, cfg or self.agent_cfg, self.tools)

    def agent(self, controller: ToolController, cfg: AgentConfig | None = None) -> AgentLoop:
        """The batch tool loop (`rollout_service`) with the episodes' budgets from
        ``controller``."""
        cfg = cfg or self.agent_cfg
        return AgentLoop(self.rollout_service(cfg), controller, cfg, sandbox=self.sandbox)

    def close(self) -> None:
        self.sandbox.close()


def build_inference(cfg: RunConfig, tokenizer: Any = None
                    ) -> tuple[InferencePolicy, nnx.State]:
    """The policy's components and its initial model state (preset init or HF weights),
    published. ``tokenizer``: the run's, when the caller has loaded it already."""
    try:  # the devices are known only here: a recorded config may come from a larger machine
        placement = split_devices(cfg.rollout_devices)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    mesh = make_mesh(*cfg.mesh, devices=placement.train)
    tokenizer = run_tokenizer(cfg) if tokenizer is None else tokenizer
    model = _model(cfg, mesh, len(tokenizer))
    model_cfg = model.cfg
    sampler_graphdef, merge = _merged_sampling(model)
    graphdef, params = nnx.split(model)
    del model  # the state is passed around from here on
    sampled = params if merge is None else merge(params)
    policy = InferencePolicy(
        cfg=cfg, model_cfg=model_cfg, mesh=mesh, tokenizer=tokenizer, pad_id=_pad_id(tokenizer),
        graphdef=graphdef,
        state_shardings=param_shardings(params, mesh),
        engine=Engine.from_split(sampler_graphdef or graphdef, sampled, cfg.engine,
                                 placement.rollout_mesh() if placement.disaggregated else None),
        sandbox=_sandbox(cfg), agent_cfg=_agent_config(cfg, tokenizer),
        rollout_shardings=_rollout_shardings(sampled, placement),
        merge=merge)
    publish(policy, params)
    return policy, params


def publish(policy: InferencePolicy, params: nnx.State, version: int | None = None) -> None:
    """Points the rollout engine at ``params`` (`sampler_weights`); its tokens record
    ``version`` from now on (None: unchanged)."""
    policy.engine.update_params(sampler_weights(policy, params), version)


def sampler_weights(policy: InferencePolicy, params: nnx.State) -> nnx.State:
    """The weights the engine samples with for the policy's ``params``: with LoRA, their merged
    weights; disaggregated, a copy on the sampler's devices; on several hosts each gets a copy
    on its own devices. Copies move device to device (every process must call it)."""
    if policy.merge is not None:
        params = policy.merge(params)
    if policy.rollout_shardings is None:
        return params
    if jax.process_count() == 1:  # disaggregated: the sampler's own devices
        return copy_across(params, policy.rollout_shardings)
    return per_host_copy(params, policy.rollout_shardings)


def tool_controller(cfg: RunConfig, mode: str) -> ToolController:
    e = cfg.environment
    return ToolController(max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout, mode=mode)


def run_tokenizer(cfg: RunConfig):
    """The run's tokenizer: ``cfg.tokenizer_path``'s, else the built-in one."""
    from agentic_jax.data.tokenizer import builtin_tokenizer, load_tokenizer

    return load_tokenizer(cfg.tokenizer_path) if cfg.tokenizer_path else builtin_tokenizer()


def _rollout_shardings(sampled: nnx.State, placement: Placement) -> nnx.State | None:
    if placement.disaggregated:
        return param_shardings(sampled, placement.rollout_mesh())
    if jax.process_count() > 1:
        return param_shardings(sampled, make_mesh(1, -1, 1, devices=jax.local_devices()))
    return None


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


def _pad_id(tokenizer: Any) -> int:
    for tok in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tok is not None:
            return int(tok)
    return 0
