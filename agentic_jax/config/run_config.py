"""The one reader of a run's config: each group becomes a typed, checked record.

Every group of ``configs/math_ppo.py`` feeds dataclasses whose field names are the group's keys:
the loop's own records below (`TrainingConfig`, `DataConfig`, ...) and the libraries' configs
(`LossConfig`, `FilterConfig`, `AdvantageConfig`, `SamplingParams`, ...) through `read_group`.
Values are checked in each dataclass's ``__post_init__``; `read_group` turns a failed check into
one `ConfigError` line that names the config field. Nothing else in the project reads
``config.*``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, NamedTuple, TypeVar

import ml_collections

from agentic_jax.errors import UserError
from agentic_jax.config.groups import (
    BenchmarkEvalConfig, CheckpointConfig, DataConfig, EnvironmentConfig, LoggingConfig,
    ModelSpec, RLConfig, StalenessConfig, TrainingConfig, WarmStartConfig)

T = TypeVar("T")

# The truncation cap rl.is_level="auto" applies when rl.is_cap leaves it open: token-level
# truncated importance sampling at C = 2, verl's default (rollout_is_threshold).
AUTO_IS_CAP = 2.0


class ConfigError(UserError):
    """A config value that cannot work; the message names the field and what was expected."""


_FIELD_PREFIX = re.compile(r"^(?:\w+\.)?(\w+)(?: must|:)")


def read_group(cls: type[T], group: Any, name: str, **values: Any) -> T:
    """``cls`` built from the keys of config ``group`` that are its fields, plus ``values``
    (derived fields, which take precedence). A failed check becomes a `ConfigError` that names
    ``name.field``."""
    if group is None:
        _raise(f"{name}: the config has no {name!r} group (a run recorded before it existed: "
               f"pass --config=configs/math_ppo.py to supply it)")
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: _plain(group[k]) for k in group if k in fields}
    kwargs.update(values)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        m = _FIELD_PREFIX.match(message)
        if m and m.group(1) in fields:
            message = message[m.start(1):]
            return _raise(f"{name}.{message}")
        return _raise(f"{name}: {message}")


def _checkpoint_dir(model: Any) -> str:
    """``model.path`` as a Hugging Face directory: a ``.gguf`` file or a built-in checkpoint
    preset (``smollm2-135m``) is converted once into a cached one (`models.builtin`)."""
    from agentic_jax.models.builtin import checkpoint_dir

    try:
        return checkpoint_dir(str(model.preset), str(model.path))
    except (FileNotFoundError, ValueError, ImportError) as err:
        field = "path" if model.path else "preset"
        return _raise(f"model.{field}: {err}")


def _processes() -> int:
    import jax

    return jax.process_count()


def _on_off_auto(value: Any, name: str) -> bool | str:
    """A setting that is on, off or decided at run time: a bool, or "auto" / "true" / "false"
    (a command line gives strings)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("auto", "true", "false"):
        return {"auto": "auto", "true": True, "false": False}[text]
    return _raise(f"{name}: expected auto, true or false, got {value!r}")


def _raise(message: str):
    raise ConfigError(message)


def _plain(value: Any) -> Any:
    """Config values as the dataclasses take them (lists and tuples as tuples)."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole run's config, read and checked once (`read_config`).

    Besides the loop's own records it holds the libraries' configs, each built from the
    group keys of its field names: ``loss`` / ``advantage`` / ``filters`` / ``reward`` from
    ``rl.*``, ``sampling`` from ``rollout.*``. ``mesh`` is (data, fsdp, tensor) over the
    trainer's devices: all of them when ``rollout_devices`` is 0 (colocated), else all but the
    last ``rollout_devices``, which the sampler gets (`agentic_jax.parallel.placement`).
    """

    seed: int
    model: ModelSpec
    tokenizer_path: str
    training: TrainingConfig
    rl: RLConfig
    loss: Any  # agentic_jax.rl.losses.LossConfig
    advantage: Any  # agentic_jax.rl.advantages.AdvantageConfig
    filters: Any  # agentic_jax.rl.filters.FilterConfig
    off_policy: Any  # agentic_jax.rl.off_policy.OffPolicyConfig
    staleness: StalenessConfig
    reward: Any  # agentic_jax.reward.RewardConfig
    sampling: Any  # agentic_jax.rollout.SamplingParams
    engine: Any  # agentic_jax.rollout.engine.EngineConfig (sampling set per rollout)
    eval_temperature: float
    data: DataConfig
    environment: EnvironmentConfig
    warmstart: WarmStartConfig
    mesh: tuple[int, int, int]
    rollout_devices: int
    checkpoint: CheckpointConfig
    logging: LoggingConfig
    eval: BenchmarkEvalConfig

    def __post_init__(self):
        if self.rl.algorithm == "ppo" and not self.model.value_head:
            raise ConfigError("model.value_head: expected True for rl.algorithm='ppo' (GAE "
                              "needs the critic), got False")
        if self.eval_temperature < 0:
            raise ConfigError(f"rollout.eval_temperature: expected a number >= 0, got "
                              f"{self.eval_temperature}")
        if (self.data.decontaminate and not self.eval.benchmarks
                and self.data.source == "curriculum"):
            raise ConfigError("data.decontaminate: expected eval.benchmarks to name the "
                              "evaluation sets to decontaminate against (or a dataset "
                              "data.source, whose held-out split is one), got True with none")
        if self.training.pack_sequences and self.loss.aggregation != "token_mean":
            raise ConfigError(f"training.pack_sequences: expected False with rl.aggregation="
                              f"{self.loss.aggregation!r} (a packed row holds several "
                              "sequences; packing keeps token_mean exact), got True")
        if self.rollout_devices < 0:  # the device count is checked when the policy is built
            raise ConfigError(f"mesh.rollout_devices: expected a number >= 0, got "
                              f"{self.rollout_devices}")
        if self.rl.async_mode != "sync" and _processes() > 1:
            raise ConfigError(f"rl.async_mode: expected 'sync' with {_processes()} processes "
                              f"(overlapped rollouts run in one process), got "
                              f"{self.rl.async_mode!r}")


def read_config(config: ml_collections.ConfigDict) -> RunConfig:
    """Every group of ``config`` as typed records; the first bad value raises `ConfigError`."""
    from agentic_jax.reward import RewardConfig
    from agentic_jax.rl.advantages import AdvantageConfig
    from agentic_jax.rl.filters import FilterConfig
    from agentic_jax.rl.losses import LossConfig
    from agentic_jax.rl.off_policy import OffPolicyConfig
    from agentic_jax.rollout.engine import EngineConfig
    from agentic_jax.rollout.engine.types import SamplingParams

    model = read_group(ModelSpec, config.model, "model", path=_checkpoint_dir(config.model))
    rl = read_group(RLConfig, config.rl, "rl")
    training = read_group(TrainingConfig, config.training, "training",
                          recompute_old_logprobs=_on_off_auto(
                              config.training.get("recompute_old_logprobs", "auto"),
                              "training.recompute_old_logprobs"))
    r, ro = config.rl, config.rollout
    sampling = read_group(SamplingParams, ro, "rollout")
    staleness = read_group(StalenessConfig, ro, "rollout")
    # 0: one slot per episode of a step (every host rolls out its share of them)
    num_slots = int(ro.num_slots) or max(1, training.batch_size * rl.group_size
                                         // _processes())
    # 0: 2048, or room for every slot's decode step and one prefill chunk beside it.
    step_tokens = int(ro.get("step_tokens", 0)) or max(
        2048, num_slots * (int(ro.get("speculative_tokens", 0)) + 1)
        + int(ro.get("prefill_chunk", 256)))
    return RunConfig(
        seed=int(config.seed),
        model=model,
        tokenizer_path=str(config.tokenizer.path or model.path),
        training=training,
        rl=rl,
        loss=read_group(
            LossConfig, r, "rl",
            dual_clip=float(r.dual_clip) or None, value_clip=float(r.value_clip) or None,
            value_coef=float(r.value_coef) if model.value_head else 0.0,
            # With the KL in the reward, the loss has no KL term of its own.
            kl_coef=0.0 if rl.kl_in_reward else float(rl.kl_coef)),
        advantage=read_group(AdvantageConfig, r, "rl"),
        filters=read_group(FilterConfig, r, "rl"),
        off_policy=read_group(OffPolicyConfig, r, "rl",
                              **resolve_off_policy(r, rl, staleness, model,
                                                 ro.get("dtype", "auto")).values),
        staleness=staleness,
        reward=read_group(RewardConfig, r, "rl",
                          use_verification=rl.reward_check == "verify"),
        sampling=sampling,
        engine=read_group(
            EngineConfig, ro, "rollout", sampling=sampling, max_seq_len=training.max_length,
            num_slots=num_slots, step_tokens=step_tokens,
            kv_pages=int(ro.kv_pages) or None, kv_cache_mb=float(ro.kv_cache_mb) or None,
            layer_arrays=_on_off_auto(ro.get("layer_arrays", "auto"), "rollout.layer_arrays"),
            reuse_programs=_on_off_auto(ro.get("reuse_programs", "auto"),
                                        "rollout.reuse_programs")),
        eval_temperature=float(config.rollout.eval_temperature),
        data=read_group(DataConfig, config.data, "data"),
        environment=read_group(EnvironmentConfig, config.environment, "environment"),
        warmstart=read_group(WarmStartConfig, config.warmstart, "warmstart"),
        mesh=(int(config.mesh.data), int(config.mesh.fsdp), int(config.mesh.tensor)),
        rollout_devices=int(config.mesh.get("rollout_devices", 0)),
        checkpoint=read_group(CheckpointConfig, config.checkpoint, "checkpoint"),
        logging=read_group(LoggingConfig, config.logging, "logging"),
        eval=read_group(BenchmarkEvalConfig, config.get("eval"), "eval"),
    )


class OldLogprobsChoice(NamedTuple):
    """What ``training.recompute_old_logprobs`` comes to: ``recompute`` (a forward pass of
    their own before the update) and ``line``, the choice in words."""

    recompute: bool
    line: str


def resolve_old_logprobs(cfg: RunConfig) -> OldLogprobsChoice:
    """The proximal policy's log-probs (PPO's pi_old) are those of the weights before the
    update. When one optimizer step consumes the whole batch (``training.ppo_epochs`` = 1,
    ``minibatches`` = 1) with no critic, those are the weights the step's own forward runs
    with, so that forward (without gradient) gives them and a separate pass before it is
    redundant: the update is the same up to float rounding (the ratio is exactly 1 instead of
    1 +- 1e-7), one forward of the batch cheaper. TRL's GRPOTrainer does the same with one
    iteration a generation. `ExperienceConfig.needs_old_logprobs` says what else needs them
    first (GAE, importance weights, KL in the reward). "auto" skips the pass where it is
    redundant; False asks for that and is refused where it is not."""
    from agentic_jax.rl.experience import ExperienceConfig

    t, setting = cfg.training, cfg.training.recompute_old_logprobs
    if setting is True:
        return OldLogprobsChoice(True, "")
    why = ExperienceConfig(estimator=cfg.rl.estimator, kl_coef=cfg.rl.kl_coef,
                           kl_in_reward=cfg.rl.kl_in_reward,
                           off_policy=cfg.off_policy).needs_old_logprobs()
    if t.ppo_epochs != 1 or t.minibatches != 1:
        why = (f"training.ppo_epochs={t.ppo_epochs} x minibatches={t.minibatches} optimizer "
               "steps use them after the first")
    elif cfg.model.value_head:
        why = "the critic's old values come from the same pass"
    if setting is False and why:
        _raise(f"training.recompute_old_logprobs: expected true or auto here ({why}), got "
               "false")
    if why:
        return OldLogprobsChoice(True, "")
    return OldLogprobsChoice(False, "old log-probs: from the update's own forward (one "
                             "optimizer step a batch, no critic); no pass of their own")


class OffPolicyChoice(NamedTuple):
    """What ``rl.is_level`` comes to: ``values`` (is_level, is_cap) for `OffPolicyConfig`
    (empty when the config names a level itself) and ``line``, the choice in words (empty when
    it is not "auto")."""

    values: dict[str, Any]
    line: str


def resolve_off_policy(r: Any, rl: RLConfig, staleness: StalenessConfig,
                       model: ModelSpec, sampler_dtype: str = "auto") -> OffPolicyChoice:
    """``rl.is_level="auto"`` (group ``r``): token-level truncated importance weights (cap
    ``rl.is_cap``, else AUTO_IS_CAP) when the sampler's policy can differ from the trainer's,
    "none" when it cannot. They differ when rollouts overlap updates (``rl.async_mode`` other
    than sync with ``rollout.max_staleness`` > 0: tokens up to that many versions old) or the
    forward runs below float32 (the engine's paged decode and the trainer's full forward round
    differently enough to matter), or the sampler alone does (``rollout.dtype``,
    ``sampler_dtype`` here). Sampler devices of their own (``mesh.rollout_devices``) get
    the trainer's weights after every update, so they alone do not count."""
    from agentic_jax.rl.off_policy import IS_LEVELS

    level = r.get("is_level", "none")
    if level != "auto":
        if level not in IS_LEVELS:
            _raise(f"rl.is_level: expected one of {('auto', *IS_LEVELS)}, got {level!r}")
        return OffPolicyChoice({}, "")
    if rl.async_mode != "sync" and staleness.max_staleness > 0:
        why = (f"rl.async_mode={rl.async_mode!r} samples with weights up to "
               f"rollout.max_staleness={staleness.max_staleness} updates old")
    elif model.dtype != "float32":
        why = f"model.dtype={model.dtype!r}: the sampler and the trainer round differently"
    elif sampler_dtype not in ("auto", model.dtype):
        why = f"rollout.dtype={sampler_dtype!r}: the sampler rounds below the trainer"
    else:
        return OffPolicyChoice({"is_level": "none"}, "off-policy correction: rl.is_level=auto "
                               "-> 'none' (the sampler has the trainer's weights)")
    cap = float(r.is_cap) or AUTO_IS_CAP
    return OffPolicyChoice(
        {"is_level": "token", "is_cap": cap},
        f"off-policy correction: rl.is_level=auto -> 'token', is_cap={cap} ({why}); "
        "--config.rl.is_level=none turns it off")
