"""The run loop's own typed config records, one per config group (field names = the group's
keys); `agentic_jax.config.read_config` builds them. Each checks its values in
``__post_init__`` with errors that start with the field's name."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from agentic_jax.errors import UserError

ALGORITHMS = {"ppo": "gae", "grpo": "grpo", "reinforce_pp": "reinforce_pp"}  # -> estimator
REWARD_CHECKS = ("grade", "verify")
ASYNC_MODES = ("sync", "one_step_off", "fully_async")


def check(ok: bool, field: str, expected: str, value: Any) -> None:
    """Raises ``UserError("field: expected ..., got value")`` unless ``ok``."""
    if not ok:
        raise UserError(f"{field}: expected {expected}, got {value!r}")


def split_names(obj: Any, *fields: str) -> None:
    """Normalises tuple-of-names fields of a frozen record: a command-line value such as
    ``--config.data.kinds=product,power`` arrives as one comma-separated string (or a
    one-element tuple holding it), which becomes ("product", "power")."""
    for field in fields:
        value = getattr(obj, field)
        entries = (value,) if isinstance(value, str) else tuple(value)
        object.__setattr__(obj, field, tuple(
            n.strip() for entry in entries for n in str(entry).split(",") if n.strip()))


def _positive(obj: Any, *names: str) -> None:
    for n in names:
        check(int(getattr(obj, n)) > 0, n, "a positive integer", getattr(obj, n))


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """``training.*``: the update's batch, schedule and lengths (see configs/math_ppo.py)."""

    batch_size: int
    lr: float
    end_lr_ratio: float
    warmup_steps: int
    max_grad_norm: float
    weight_decay: float
    total_steps: int
    max_length: int
    length_bucket: int
    ppo_epochs: int
    minibatches: int
    micro_batches: int
    max_skipped_updates: int
    offload_optimizer: bool
    # Update minibatches packed into rows of pack_width tokens (several episodes a row, apart
    # by segment ids) instead of one right-padded episode a row.
    pack_sequences: bool = False
    # The packed rows' width in tokens (0: max_length; unused without pack_sequences). Wider
    # rows fit more episodes whose length is just over half of max_length (each fills a
    # max_length row alone), for somewhat more attention a token and activations a row.
    pack_width: int = 0
    # Old log-probs by a forward pass of their own before the update (True), from the update's
    # own forward (False: exact only for one optimizer step a batch), or "auto" (the second
    # where it is exact; `agentic_jax.config.resolve_old_logprobs`).
    recompute_old_logprobs: bool | str = "auto"
    # A batch whose loss has an exactly zero gradient (every trained token's advantage 0 and
    # no other loss term) steps the optimizer on that zero gradient without the forward and
    # backward passes: the same weights, without the step's entropy and mismatch metrics.
    skip_zero_gradient: bool = True

    def __post_init__(self):
        _positive(self, "batch_size", "total_steps", "max_length", "ppo_epochs", "minibatches",
                  "micro_batches")
        check(isinstance(self.skip_zero_gradient, bool), "skip_zero_gradient", "True or False",
              self.skip_zero_gradient)
        check(self.lr > 0, "lr", "a positive number", self.lr)
        check(0 <= self.warmup_steps < self.total_steps, "warmup_steps",
              f"an integer in [0, training.total_steps={self.total_steps})", self.warmup_steps)
        check(self.length_bucket >= 0, "length_bucket",
              "an integer >= 0 (0: batches keep training.max_length columns)", self.length_bucket)
        check(self.max_grad_norm > 0, "max_grad_norm", "a positive number", self.max_grad_norm)
        check(isinstance(self.pack_width, int) and not isinstance(self.pack_width, bool)
              and (self.pack_width == 0 or self.pack_width >= self.max_length), "pack_width",
              f"0 (training.max_length) or an integer >= training.max_length="
              f"{self.max_length} (an episode fits a row)", self.pack_width)
        check(self.max_skipped_updates >= 0, "max_skipped_updates", "an integer >= 0",
              self.max_skipped_updates)

    def optimizer_args(self) -> dict[str, Any]:
        """The keyword arguments of `agentic_jax.rl.optim.make_optimizer`."""
        return dict(lr=self.lr, warmup_steps=self.warmup_steps, total_steps=self.total_steps,
                    max_grad_norm=self.max_grad_norm, weight_decay=self.weight_decay,
                    end_lr_ratio=self.end_lr_ratio)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """``model.*``: which model (a preset, or a local Hugging Face directory) and its numerics.

    ``path`` is the Hugging Face directory the model loads from (`config.run_config` resolves a
    ``.gguf`` file or a built-in checkpoint preset to its cached conversion)."""

    preset: str
    path: str
    dtype: str
    param_dtype: str
    remat: str
    attention_impl: str
    scan_unroll: int
    value_head: bool
    # LoRA (0: off): adapters of this rank on lora_targets, scaled by lora_alpha / lora_rank;
    # only they (and the value head) train, and checkpoints hold only them.
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                     "up_proj", "down_proj")
    # A pretrained model takes the pretrained defaults for keys the command line leaves
    # (`agentic_jax.episodes.model_defaults`), leaving response_tokens after the longest prompt.
    auto_defaults: bool = False
    response_tokens: int = 512

    def __post_init__(self):
        from agentic_jax.models import PRESETS
        from agentic_jax.models.config import LORA_TARGETS

        split_names(self, "lora_targets")
        check(isinstance(self.lora_rank, int) and self.lora_rank >= 0, "lora_rank",
              "an integer >= 0 (0: off)", self.lora_rank)
        check(self.lora_alpha > 0, "lora_alpha", "a positive number", self.lora_alpha)
        check(isinstance(self.response_tokens, int) and self.response_tokens > 0,
              "response_tokens", "a positive integer", self.response_tokens)
        check(bool(self.lora_targets) and set(self.lora_targets) <= set(LORA_TARGETS),
              "lora_targets", f"a non-empty subset of {LORA_TARGETS}", self.lora_targets)

        if self.path:
            check(os.path.isdir(self.path), "path",
                  "an existing Hugging Face checkpoint directory or .gguf file", self.path)
        else:
            from agentic_jax.models.builtin import BUILTIN_CHECKPOINTS

            check(self.preset in PRESETS, "preset",
                  f"one of {sorted(PRESETS) + sorted(BUILTIN_CHECKPOINTS)}", self.preset)
        check(self.scan_unroll >= 1, "scan_unroll", "an integer >= 1", self.scan_unroll)

    @property
    def compute_dtype(self) -> str | None:
        """The dtype parameters are cast to for the forward (None: they are used as stored)."""
        return None if self.dtype == self.param_dtype else self.dtype


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """``rl.*`` read by the loop itself; the rest of the group feeds `LossConfig`,
    `AdvantageConfig`, `FilterConfig` and `RewardConfig` by name."""

    algorithm: str
    group_size: int
    kl_coef: float
    kl_estimator: str
    kl_in_reward: bool
    reward_check: str
    # How rollouts overlap the update (`agentic_jax.training.async_rollouts`); one of ASYNC_MODES.
    async_mode: str = "sync"
    # Dynamic sampling: only prompt groups whose accuracy lies in [low, high] train; more are
    # drawn until the batch is full, at most max_oversample x training.batch_size prompts.
    # (0, 1) keeps every group.
    accuracy_band: tuple[float, float] = (0.0, 1.0)
    max_oversample: float = 1.0

    def __post_init__(self):
        check(self.algorithm in ALGORITHMS, "algorithm", f"one of {sorted(ALGORITHMS)}",
              self.algorithm)
        check(self.group_size >= 1, "group_size", "an integer >= 1", self.group_size)
        check(self.kl_coef >= 0, "kl_coef", "a number >= 0", self.kl_coef)
        check(self.reward_check in REWARD_CHECKS, "reward_check", f"one of {REWARD_CHECKS}",
              self.reward_check)
        check(self.async_mode in ASYNC_MODES, "async_mode", f"one of {ASYNC_MODES}",
              self.async_mode)
        band = tuple(self.accuracy_band)
        check(len(band) == 2 and 0.0 <= band[0] <= band[1] <= 1.0, "accuracy_band",
              "(low, high) with 0 <= low <= high <= 1", self.accuracy_band)
        check(self.max_oversample >= 1.0, "max_oversample", "a number >= 1",
              self.max_oversample)

    @property
    def dynamic_sampling(self) -> bool:
        """Whether groups are filtered by accuracy (a band narrower than [0, 1])."""
        return tuple(self.accuracy_band) != (0.0, 1.0)

    @property
    def estimator(self) -> str:
        """The advantage estimator the algorithm uses (a key of ADVANTAGE_ESTIMATORS)."""
        return ALGORITHMS[self.algorithm]

    @property
    def needs_reference(self) -> bool:
        """A frozen reference policy is kept (and checkpointed) only when KL is penalised."""
        return self.kl_coef > 0


@dataclasses.dataclass(frozen=True)
class StalenessConfig:
    """``rollout.max_staleness`` / ``rollout.partial`` (with ``rl.async_mode``): no token an
    update uses was sampled by a policy more than max_staleness versions older than the
    trainer's; partial: what in-flight episodes do when new weights arrive mid-rollout
    ("continue" | "abort", `agentic_jax.rollout.AgentConfig.partial`)."""

    max_staleness: int = 1
    partial: str = "continue"
    # fully_async: the next step's episodes enter the engine as the tail of the steps in flight
    # frees decode slots (`agentic_jax.training.stream`); False: a step's rollout starts after the
    # previous one's last episode.
    stream_steps: bool = True

    def __post_init__(self):
        from agentic_jax.rollout.agent import PARTIAL_MODES

        check(isinstance(self.max_staleness, int) and self.max_staleness >= 0,
              "max_staleness", "an integer >= 0", self.max_staleness)
        check(self.partial in PARTIAL_MODES, "partial", f"one of {PARTIAL_MODES}", self.partial)
        check(isinstance(self.stream_steps, bool), "stream_steps", "True or False",
              self.stream_steps)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``data.*``: where problems come from, the held-out split and the prompt template."""

    source: str
    stages: tuple[str, ...]
    max_difficulty: float
    kinds: tuple[str, ...]
    test_fraction: float
    eval_size: int
    template: str
    scheduler_threshold: float
    scheduler_window: int
    scheduler_ahead: float
    levels: tuple[int, ...]
    decontaminate: bool

    def __post_init__(self):
        from agentic_jax.data.curriculum import kinds
        from agentic_jax.data.problem import STAGES
        from agentic_jax.data.prompts import TEMPLATES

        split_names(self, "stages", "kinds")
        if self.source == "curriculum":
            check(bool(self.stages) and set(self.stages) <= set(STAGES), "stages",
                  f"a non-empty subset of {STAGES}", self.stages)
            known = [k for stage in self.stages for k in kinds(stage)]
            check(set(self.kinds) <= set(known), "kinds",
                  f"kinds of data.stages={self.stages} (empty: all of them), from {known}",
                  self.kinds)
        else:  # a dataset's problems are all of the stage "external"
            check("external" in self.stages, "stages",
                  f"('external',) for data.source={self.source!r}", self.stages)
        check(self.template in TEMPLATES, "template", f"one of {TEMPLATES}", self.template)
        check(0 < self.test_fraction < 1, "test_fraction", "a value in (0, 1)",
              self.test_fraction)
        check(self.eval_size >= 1, "eval_size", "an integer >= 1", self.eval_size)
        check(bool(self.stages), "stages", "at least one stage", self.stages)
        check(0 <= self.scheduler_ahead < 0.9, "scheduler_ahead", "a value in [0, 0.9)",
              self.scheduler_ahead)
        check(all(isinstance(x, int) and 1 <= x <= 5 for x in self.levels), "levels",
              "MATH levels in 1..5 (empty: every row)", self.levels)
        check(not self.levels or self.source.startswith("file:"), "levels",
              "() unless data.source is file:PATH", self.levels)


@dataclasses.dataclass(frozen=True)
class BenchmarkEvalConfig:
    """``eval.*``: benchmarks from local files ("name=PATH,..."; empty: none), evaluated every
    ``every_steps`` RL steps (0: never during training) with ``num_samples`` samples per
    problem at ``temperature`` / ``top_p``. Named benchmarks are also what the training set is
    decontaminated against (``data.decontaminate``)."""

    benchmarks: str
    every_steps: int
    num_samples: int
    temperature: float
    top_p: float
    limit: int = 0  # the first this many problems of each benchmark (0: all)

    def __post_init__(self):
        specs = self.specs  # a malformed list is an error here, before anything runs
        for name, path in specs.items():
            check(os.path.exists(path), "benchmarks", f"an existing file or directory for "
                  f"{name!r}", path)
        check(self.every_steps >= 0, "every_steps", "an integer >= 0 (0: off)",
              self.every_steps)
        check(not self.every_steps or bool(specs), "every_steps",
              "0 while eval.benchmarks is empty", self.every_steps)
        check(self.num_samples >= 1, "num_samples", "an integer >= 1", self.num_samples)
        check(self.temperature >= 0, "temperature", "a number >= 0", self.temperature)
        check(0 < self.top_p <= 1, "top_p", "a value in (0, 1]", self.top_p)
        check(isinstance(self.limit, int) and self.limit >= 0, "limit", "an integer >= 0 (0: all)",
              self.limit)

    @property
    def specs(self) -> dict[str, str]:
        """benchmark name -> path."""
        from agentic_jax.data.benchmarks import parse_benchmark_specs

        try:
            return parse_benchmark_specs(self.benchmarks)
        except ValueError as err:
            raise UserError(f"benchmarks: {str(err).partition(': ')[2]}") from None


@dataclasses.dataclass(frozen=True)
class EnvironmentConfig:
    """``environment.*``: the sandbox's limits and the tool budget (timeout in ms, memory_limit
    in MB, as the config has them), and the episodes' tools (`rollout.environment.build_tools`:
    "python", "calculator", or "module:attribute")."""

    timeout: int
    memory_limit: int
    whitelist: tuple[str, ...]
    max_tool_calls: int
    num_workers: int
    tool_mode: str
    max_output_tokens: int
    stateful: bool
    tools: tuple[str, ...] = ("python",)

    def __post_init__(self):
        from agentic_jax.rollout.controller import MODES
        from agentic_jax.rollout.environment import build_tools

        split_names(self, "tools", "whitelist")  # e.g. --config.environment.tools=python,calculator
        try:   # names, imports and the protocol checked now, not at the first rollout
            build_tools(self.tools)
        except ValueError as err:
            raise UserError(str(err)) from None

        check(self.timeout > 0, "timeout", "a positive number of ms", self.timeout)
        check(self.memory_limit > 0, "memory_limit", "a positive number of MB",
              self.memory_limit)
        check(self.max_tool_calls >= 0, "max_tool_calls", "an integer >= 0",
              self.max_tool_calls)
        check(self.num_workers >= 0, "num_workers", "an integer >= 0 (0: one per CPU)",
              self.num_workers)
        check(self.tool_mode in MODES, "tool_mode", f"one of {MODES}", self.tool_mode)
        check(self.max_output_tokens >= 4, "max_output_tokens", "an integer >= 4",
              self.max_output_tokens)


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
    """``warmstart.*``: supervised steps on reference solutions before RL. ``shipped``: load the
    packaged result of this exact recipe where there is one (`training.warmstart_results.find_shipped`)
    instead of training it again. ``disjoint``: the warm start's problems (``steps`` x
    ``batch_size`` of the training set, seeded) are set aside, and RL draws from the rest.
    ``checkpoint_every``: save the phase's parameters and optimizer state every so many steps
    (and at its end) under ``WORKDIR/warmstart``, so that a run stopped inside it resumes
    there exactly; 0: never."""

    enabled: bool
    steps: int
    batch_size: int
    lr: float
    tool_fraction: float
    shipped: bool = False
    disjoint: bool = False
    checkpoint_every: int = 0

    def __post_init__(self):
        if self.enabled:
            _positive(self, "steps", "batch_size")
            check(self.lr > 0, "lr", "a positive number", self.lr)
        check(0.0 <= self.tool_fraction <= 1.0, "tool_fraction", "a value in [0, 1]",
              self.tool_fraction)
        check(isinstance(self.disjoint, bool), "disjoint", "True or False", self.disjoint)
        check(isinstance(self.checkpoint_every, int) and not isinstance(
            self.checkpoint_every, bool) and self.checkpoint_every >= 0, "checkpoint_every",
            "a whole number >= 0 (0: never)", self.checkpoint_every)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """``checkpoint.*``."""

    every_steps: int
    keep: int
    async_save: bool
    init_from: str

    def __post_init__(self):
        _positive(self, "every_steps", "keep")
        if self.init_from:
            check(os.path.isdir(self.init_from), "init_from",
                  "an existing run or checkpoint directory", self.init_from)


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    """``logging.*``. transcripts_every: a few training episodes go to transcripts.jsonl every
    this many steps (0: only the held-out ones at each evaluation)."""

    every_steps: int
    tensorboard: bool
    progress: bool
    plots: bool
    transcripts_every: int = 0

    def __post_init__(self):
        _positive(self, "every_steps")
        check(self.transcripts_every >= 0, "transcripts_every", "an integer >= 0 (0: off)",
              self.transcripts_every)
