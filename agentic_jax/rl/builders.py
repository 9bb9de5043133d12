"""Turning a training config into the objects a run needs (one place for every config field)."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import ml_collections

from agentic_jax.rl import advantages as adv_lib
from agentic_jax.rl import filters as filter_lib
from agentic_jax.rl.experience import ExperienceConfig
from agentic_jax.rl.losses import LossConfig

logger = logging.getLogger(__name__)

ALGORITHMS = {"ppo": "gae", "grpo": "grpo", "reinforce_pp": "reinforce_pp"}


class ConfigError(ValueError):
    """A config value that cannot work; the message names the field and what was expected."""


def _require(ok: bool, field: str, expected: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{field}: expected {expected}, got {value!r}")


def validate(config: ml_collections.ConfigDict) -> None:
    """Checks the values the rest of the run relies on, before anything is written."""
    t, e, r = config.training, config.environment, config.rl
    for name in ("batch_size", "total_steps", "max_length", "ppo_epochs", "minibatches",
                 "micro_batches"):
        _require(int(t[name]) > 0, f"training.{name}", "a positive integer", t[name])
    _require(t.lr > 0, "training.lr", "a positive number", t.lr)
    _require(0 <= t.warmup_steps < t.total_steps, "training.warmup_steps",
             f"an integer in [0, training.total_steps={t.total_steps})", t.warmup_steps)
    _require(int(t.length_bucket) >= 0, "training.length_bucket",
             "an integer >= 0 (0: batches keep training.max_length columns)", t.length_bucket)
    _require(t.max_grad_norm > 0, "training.max_grad_norm", "a positive number", t.max_grad_norm)
    _require(e.timeout > 0, "environment.timeout", "a positive number of ms", e.timeout)
    _require(e.memory_limit > 0, "environment.memory_limit", "a positive number of MB",
             e.memory_limit)
    _require(e.max_tool_calls >= 0, "environment.max_tool_calls", "an integer >= 0",
             e.max_tool_calls)
    _require(r.algorithm in ALGORITHMS, "rl.algorithm", f"one of {sorted(ALGORITHMS)}",
             r.algorithm)
    _require(r.group_size >= 1, "rl.group_size", "an integer >= 1", r.group_size)
    if r.algorithm == "ppo":
        _require(bool(config.model.value_head), "model.value_head",
                 "True for rl.algorithm='ppo' (GAE needs the critic)", config.model.value_head)
    if config.model.path:
        _require(os.path.isdir(config.model.path), "model.path",
                 "an existing Hugging Face checkpoint directory", config.model.path)
    if config.checkpoint.init_from:
        _require(os.path.isdir(config.checkpoint.init_from), "checkpoint.init_from",
                 "an existing checkpoint directory", config.checkpoint.init_from)
    from agentic_jax.data.prompts import TEMPLATES

    _require(config.data.template in TEMPLATES, "data.template", f"one of {TEMPLATES}",
             config.data.template)
    _require(int(config.model.scan_unroll) >= 1, "model.scan_unroll", "an integer >= 1",
             config.model.scan_unroll)
    _require(0 < config.data.test_fraction < 1, "data.test_fraction", "a value in (0, 1)",
             config.data.test_fraction)


def loss_config(config: ml_collections.ConfigDict) -> LossConfig:
    r = config.rl
    return LossConfig(
        policy_loss="ppo",
        clip_low=float(r.clip_low),
        clip_high=float(r.clip_high),
        dual_clip=float(r.dual_clip) if r.dual_clip else None,
        value_coef=float(r.vf_coef) if config.model.value_head else 0.0,
        value_clip=float(r.value_clip) if r.value_clip else None,
        entropy_coef=float(r.entropy_coef),
        kl_coef=0.0 if r.kl_in_reward else float(r.kl_coef),
        kl_estimator=r.kl_estimator,
        aggregation=r.loss_agg,
    )


def experience_config(config: ml_collections.ConfigDict, row_multiple: int) -> ExperienceConfig:
    r = config.rl
    return ExperienceConfig(
        estimator=ALGORITHMS[r.algorithm],
        advantage=adv_lib.AdvantageConfig(gamma=float(r.gamma), lam=float(r.lam)),
        filters=filter_lib.FilterConfig(
            drop_uniform_groups=bool(r.filter_equal_groups),
            truncated="mask" if r.mask_truncated else "keep",
            mask_void_turns=bool(r.mask_void_turns),
        ),
        kl_coef=float(r.kl_coef),
        kl_estimator=r.kl_estimator,
        kl_in_reward=bool(r.kl_in_reward),
        row_multiple=row_multiple,
        length_multiple=int(config.training.length_bucket),
        compute_dtype=None if config.model.dtype == config.model.param_dtype else config.model.dtype,
    )


def sandbox_config(config: ml_collections.ConfigDict):
    from agentic_jax.sandbox import SandboxConfig

    e = config.environment
    return SandboxConfig(timeout_ms=int(e.timeout), memory_mb=int(e.memory_limit),
                         whitelist=tuple(e.whitelist),
                         num_workers=int(e.num_workers) or None)


def tokenizer(config: ml_collections.ConfigDict):
    from agentic_jax.data.tokenizer import builtin_tokenizer, load_tokenizer

    path = config.tokenizer.path or config.model.path
    return load_tokenizer(path) if path else builtin_tokenizer()


def model_config(config: ml_collections.ConfigDict, vocab_size: int):
    """The ModelConfig of a preset run (HF checkpoints bring their own)."""
    from agentic_jax.models import PRESETS, get_preset

    m = config.model
    _require(m.preset in PRESETS, "model.preset", f"one of {sorted(PRESETS)}", m.preset)
    cfg = get_preset(m.preset)
    if m.preset.startswith("tiny"):
        cfg = dataclasses.replace(cfg, vocab_size=vocab_size)
    return dataclasses.replace(
        cfg, dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat,
        attention_impl=m.attention_impl, value_head=bool(m.value_head),
        scan_unroll=int(m.scan_unroll),
        max_seq_len=max(cfg.max_seq_len, int(config.training.max_length)))
