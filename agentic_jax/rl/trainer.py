"""The RL training loop: rollouts with tools -> rewards -> advantages -> sharded PPO updates.

One `Trainer` owns a run directory: ``checkpoints/`` (orbax), ``metrics.jsonl``,
``tensorboard/``, ``config.json`` and, at the end, ``summary.json`` and the PNG curves.
Constructing it on a directory with checkpoints resumes from the newest intact one.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
from flax import nnx

from agentic_jax.data import Problem, prompts
from agentic_jax.data.scheduler import CurriculumScheduler, SchedulerConfig
from agentic_jax.data.sources import load_source
from agentic_jax.parallel import (
    batch_sharding,
    create_sharded_model,
    gather_rows,
    gather_texts,
    make_mesh,
    mesh_from_config,
    param_shardings,
    per_host_copy,
    process_slice,
    put_rows,
)
from agentic_jax.reward import RewardConfig, grade_batch
from agentic_jax.rl import builders, evaluation
from agentic_jax.rl.experience import make_train_batch, minibatches
from agentic_jax.rl.optim import make_optimizer
from agentic_jax.rl.rollout_metrics import episode_table, table_metrics
from agentic_jax.rl.step import init_opt_state, make_train_step, train_shardings
from agentic_jax.rollout import AgentConfig, AgentLoop, RolloutBatch, Sampler, SamplingParams
from agentic_jax.rollout import ToolController
from agentic_jax.utils import Checkpointer

logger = logging.getLogger(__name__)


class CodeResult(NamedTuple):
    """What the warm start needs of a snippet's run."""

    ok: bool
    stdout: str


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite updates; the last good checkpoint is kept."""


class Trainer:
    """Builds every component of a run from its config and runs it.

    Args:
      config: a `configs/math_ppo.py` config.
      workdir: the run directory (created if missing).
    """

    def __init__(self, config: ml_collections.ConfigDict, workdir: str):
        builders.validate(config)
        self.config, self.workdir = config, workdir
        self.mesh = mesh_from_config(config.mesh)
        self.num_processes = jax.process_count()
        batch_shards = self.mesh.shape["data"] * self.mesh.shape["fsdp"]
        if batch_shards % self.num_processes:
            raise builders.ConfigError(
                f"mesh: the batch axes (data x fsdp = {batch_shards}) must span the "
                f"{self.num_processes} processes, so that each feeds its own rows")
        if config.training.batch_size % self.num_processes:
            raise builders.ConfigError(
                f"training.batch_size: expected a multiple of the {self.num_processes} "
                f"processes (each rolls out whole prompt groups), got "
                f"{config.training.batch_size}")
        self.tokenizer = builders.tokenizer(config)
        self.pad_id = _pad_id(self.tokenizer)
        self.model = self._build_model()
        self.graphdef, state = nnx.split(self.model)
        t = config.training
        self.optimizer = make_optimizer(
            lr=t.lr, warmup_steps=t.warmup_steps, total_steps=t.total_steps,
            max_grad_norm=t.max_grad_norm, weight_decay=t.weight_decay,
            end_lr_ratio=t.end_lr_ratio)
        self.shardings = train_shardings(state, self.optimizer, self.mesh,
                                         offload_opt_state=bool(t.offload_optimizer))
        self.state = state
        self.opt_state = self._init_opt_state()
        self.ref_state = None
        self.row_multiple = batch_shards * t.micro_batches * t.minibatches
        # Rows each process contributes to a batch come in multiples of this.
        self.local_row_multiple = self.row_multiple // self.num_processes
        self.batch_sharding = batch_sharding(self.mesh, 2)
        self.step_fn = make_train_step(
            self.graphdef, self.optimizer, builders.loss_config(config), self.mesh,
            t.micro_batches, shardings=self.shardings,
            compute_dtype=None if config.model.dtype == config.model.param_dtype
            else config.model.dtype)
        self.experience_cfg = builders.experience_config(config, self.local_row_multiple)
        self.reward_cfg = RewardConfig(
            format_penalty=config.rl.format_penalty,
            tool_failure_penalty=config.rl.tool_failure_penalty,
            overlong_penalty=config.rl.overlong_penalty)
        self.train_problems, self.test_problems = self._load_problems()
        # Every host checks every prompt the run can draw, so a bad one stops them all here.
        longest = max(len(self.make_prompt(p)) for p in self.train_problems + self.test_problems)
        if longest >= t.max_length:
            raise builders.ConfigError(f"training.max_length: expected more than the longest "
                                       f"prompt ({longest} tokens), got {t.max_length}")
        self.scheduler = CurriculumScheduler(
            self.train_problems,
            SchedulerConfig(threshold=config.data.scheduler_threshold,
                            window=config.data.scheduler_window,
                            min_samples=min(64, config.data.scheduler_window),
                            stages=tuple(s for s in config.data.stages)),
            seed=config.seed)
        e = config.environment
        self.controller = ToolController(max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout,
                                         mode=e.tool_mode)
        from agentic_jax.sandbox import Sandbox

        self.sandbox = Sandbox(builders.sandbox_config(config))
        self.sampler = Sampler(self.model, max_len=t.max_length)
        self.rollout_shardings = None
        if self.num_processes > 1:
            # Each host samples with its own copy of the policy on its local devices.
            local_mesh = make_mesh(1, -1, 1, devices=jax.local_devices())
            self.rollout_shardings = param_shardings(state, local_mesh)
            self.sync_sampler()
        self.stage_names = sorted({p.stage for p in self.train_problems + self.test_problems})
        self.agent_cfg = AgentConfig(
            max_length=t.max_length, max_output_tokens=e.max_output_tokens,
            sampling=SamplingParams(temperature=config.rollout.temperature,
                                    top_p=config.rollout.top_p, top_k=config.rollout.top_k))
        self.checkpointer = Checkpointer(
            os.path.join(workdir, "checkpoints"), every_steps=config.checkpoint.every_steps,
            keep=config.checkpoint.keep, async_save=config.checkpoint.async_save)
        self.step = 0
        self._skipped = 0  # consecutive non-finite updates

    # ------------------------------------------------------------------ construction

    def _build_model(self):
        cfg = self.config
        if cfg.model.path:
            from agentic_jax.models import from_pretrained

            m = cfg.model
            return from_pretrained(m.path, dtype=m.dtype, param_dtype=m.param_dtype,
                                   mesh=self.mesh, value_head=bool(m.value_head), remat=m.remat,
                                   attention_impl=m.attention_impl,
                                   scan_unroll=int(m.scan_unroll))
        model_cfg = builders.model_config(cfg, len(self.tokenizer))
        return create_sharded_model(model_cfg, self.mesh, seed=cfg.seed)

    def _init_opt_state(self):
        init = jax.jit(functools.partial(init_opt_state, self.optimizer),
                       out_shardings=self.shardings.opt_state)
        return init(self.state)

    def _load_problems(self) -> tuple[list[Problem], list[Problem]]:
        d = self.config.data
        stages, kinds = tuple(d.stages), tuple(d.kinds)
        if d.source == "curriculum":
            def pick(split):
                problems = load_source("curriculum", split=split, seed=self.config.seed,
                                       test_fraction=d.test_fraction)
                return [p for p in problems
                        if p.stage in stages and p.difficulty <= d.max_difficulty
                        and (not kinds or p.kind in kinds)]
            train, test = pick("train"), pick("test")
        else:
            train = load_source(d.source, split="train", seed=self.config.seed)
            test = load_source(d.source, split="test", seed=self.config.seed)
        if not train:
            raise builders.ConfigError(f"data: no training problems for data.source="
                                       f"{d.source!r}, data.stages={stages}")
        test = test[:d.eval_size] if test else train[:d.eval_size]
        return train, test

    def make_prompt(self, problem: Problem, allow_tools: bool = True) -> list[int]:
        text = prompts.format_prompt(problem.question, template=self.config.data.template,
                                     tokenizer=self.tokenizer, allow_tools=allow_tools)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def make_agent(self, controller: ToolController, cfg: AgentConfig) -> AgentLoop:
        return AgentLoop(self.sampler, self.tokenizer, self.sandbox, controller, cfg)

    # ------------------------------------------------------------------ checkpoints

    @property
    def needs_reference(self) -> bool:
        """A frozen reference policy is kept (and checkpointed) only when KL is penalised."""
        return self.config.rl.kl_coef > 0

    def checkpoint_state(self) -> dict[str, Any]:
        """The array part of a checkpoint (also the restore target's structure)."""
        tree = {"params": nnx.to_pure_dict(self.state), "opt_state": self.opt_state}
        if self.needs_reference:
            ref = self.state if self.ref_state is None else self.ref_state
            tree["ref_params"] = nnx.to_pure_dict(ref)
        return tree

    def _checkpoint_meta(self) -> dict[str, Any]:
        return {"step": self.step, "scheduler": self.scheduler.state_dict(),
                "controller": self.controller.state_dict()}

    def save(self, *, force: bool = False) -> bool:
        return self.checkpointer.maybe_save(self.step, self.checkpoint_state(),
                                            self._checkpoint_meta(), force=force)

    def _placed(self, params: dict[str, Any]) -> nnx.State:
        """A model state holding ``params`` (a pure dict) with the run's shardings."""
        state = jax.tree.map(lambda x: x, self.state)
        nnx.replace_by_pure_dict(state, params)
        return jax.device_put(state, self.shardings.state)

    def _set_params(self, params: dict[str, Any]) -> None:
        self.state = self._placed(params)
        self.sync_sampler()

    def sync_sampler(self) -> None:
        """Points the sampler at the current policy. On several hosts every host gets a copy on
        its own devices, resharded device to device (every process must call it)."""
        if self.rollout_shardings is None:
            self.sampler.update_params(self.state)
        else:
            self.sampler.update_params(per_host_copy(self.state, self.rollout_shardings))

    def put_rows(self, local_tree: Any) -> Any:
        """This process's rows of a batch -> global arrays split over the mesh's batch axes."""
        return put_rows(local_tree, self.batch_sharding)

    def freeze_reference(self) -> None:
        """Snapshots the current policy as the KL reference (a copy: training donates state)."""
        if self.needs_reference:
            self.ref_state = jax.tree.map(lambda x: x.copy(), self.state)

    def restore(self) -> bool:
        """Loads the newest intact checkpoint of this run (True) or leaves a fresh run (False)."""
        restored = self.checkpointer.restore_latest(self.checkpoint_state())
        if restored is None:
            return False
        tree = restored.state
        self._set_params(tree["params"])
        self.opt_state = jax.device_put(tree["opt_state"], self.shardings.opt_state)
        if "ref_params" in tree:
            self.ref_state = self._placed(tree["ref_params"])
        self.step = restored.step
        self.scheduler.load_state_dict(restored.meta.get("scheduler", {}))
        self.controller.load_state_dict(restored.meta.get("controller", {}))
        logger.info("resumed from step %d (%s)", self.step, self.checkpointer.directory)
        return True

    def init_from(self, directory: str) -> None:
        """Starts from the policy parameters of another run's newest intact checkpoint."""
        with Checkpointer(directory, every_steps=1, keep=1, async_save=False) as source:
            restored = source.restore_latest(self.checkpoint_state())
        if restored is None:
            raise FileNotFoundError(f"checkpoint.init_from={directory!r}: no restorable "
                                    "checkpoint there")
        self._set_params(restored.state["params"])

    # ------------------------------------------------------------------ one RL step

    def rollout(self, step: int) -> tuple[RolloutBatch, list, list[Problem], dict[str, float]]:
        """Samples the step's problems, runs the tool loop and grades every episode.

        Every host draws the same problems; each rolls out and grades its contiguous share of
        the episodes (whole prompt groups) and returns only those. The curriculum scheduler is
        updated with every host's grades, so it stays the same everywhere.
        """
        g = self.config.rl.group_size
        problems = self.scheduler.sample(self.config.training.batch_size)
        jobs = [p for p in problems for _ in range(g)]
        group_ids = np.repeat(np.arange(len(problems)), g)
        share = process_slice(len(jobs))
        local_jobs = jobs[share]
        rng = jax.random.fold_in(jax.random.key(self.config.seed), step)
        controller_before = self.controller.state_dict()
        episodes, timing = self.make_agent(self.controller, self.agent_cfg).run(
            [self.make_prompt(p) for p in local_jobs], rng,
            difficulties=[p.difficulty for p in local_jobs],
            stages=[p.stage for p in local_jobs], row_offset=share.start, total_rows=len(jobs))
        t0 = time.perf_counter()
        infos = grade_batch(
            [e.text for e in episodes], [p.answer for p in local_jobs], cfg=self.reward_cfg,
            num_tool_calls=[e.num_tool_calls for e in episodes],
            num_tool_failures=[e.num_tool_failures for e in episodes],
            response_lengths=[e.num_model_tokens for e in episodes],
            max_length=self.config.training.max_length)
        timing["reward_s"] = time.perf_counter() - t0
        rollout = RolloutBatch.from_episodes(
            episodes, length=self.config.training.max_length, pad_id=self.pad_id,
            rewards=[i.reward for i in infos], group_ids=group_ids[share])
        correct = gather_rows(np.asarray([i.correct for i in infos], np.float32))
        self.scheduler.update(list(zip(jobs, correct.tolist())))
        if self.num_processes > 1:
            self._sync_controller(controller_before, episodes, local_jobs)
        return rollout, list(zip(episodes, infos)), local_jobs, timing

    def _sync_controller(self, before: dict[str, Any], episodes: list, jobs: list) -> None:
        """Replays every host's episodes onto the controller's pre-rollout state, so that tool
        budgets stay the same on every host."""
        index = {name: i for i, name in enumerate(self.stage_names)}
        rows = gather_rows({
            "budget": np.asarray([e.tool_budget for e in episodes], np.int32),
            "stage": np.asarray([index.get(p.stage, -1) for p in jobs], np.int32),
            "calls": np.asarray([e.num_tool_calls for e in episodes], np.int32),
            "failures": np.asarray([e.num_tool_failures for e in episodes], np.int32)})
        names = [self.stage_names[i] if i >= 0 else "default" for i in rows["stage"]]
        self.controller.load_state_dict(before)
        self.controller.replay(rows["budget"], list(zip(names, rows["calls"], rows["failures"])))

    def run_code(self, codes: list[str]) -> list[CodeResult]:
        """Runs snippets in the sandbox; on several hosts each runs its share and every host gets
        every result (so all build the same warm-start examples)."""
        if self.num_processes == 1:
            return [CodeResult(r.ok, r.stdout) for r in self.sandbox.run_batch(codes)]
        local = self.sandbox.run_batch(codes[process_slice(len(codes))]) if codes else []
        ok = gather_rows(np.asarray([r.ok for r in local], bool))
        stdout = gather_texts([r.stdout if r.ok else "" for r in local])
        return [CodeResult(bool(o), out) for o, out in zip(ok, stdout)]

    def update(self, rollout: RolloutBatch, step: int) -> dict[str, float]:
        """PPO epochs over the step's batch; returns the averaged update metrics."""
        batch, stats = make_train_batch(
            rollout, self.experience_cfg, graphdef=self.graphdef, state=self.state,
            ref_state=self.ref_state, batch_sharding=self.batch_sharding)
        if batch is None:
            return {**stats, "skipped": 1.0}
        t = self.config.training
        rng = np.random.default_rng([self.config.seed, step])
        sums: dict[str, float] = {}
        n = 0
        for _ in range(t.ppo_epochs):
            for mb in minibatches(batch, t.minibatches, rng, self.batch_sharding):
                self.state, self.opt_state, metrics = self.step_fn(self.state, self.opt_state, mb)
                metrics = jax.device_get(metrics)
                self._check_finite(metrics)
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                n += 1
        self.sync_sampler()
        out = {k: v / n for k, v in sums.items()}
        out.update(stats)
        return out

    def _check_finite(self, metrics: dict[str, Any]) -> None:
        if float(metrics.get("skipped", 0.0)) > 0:
            self._skipped += 1
            logger.warning("non-finite loss or gradient: update skipped (%d in a row)",
                           self._skipped)
            if self._skipped > self.config.training.max_skipped_updates:
                raise TrainingDiverged(
                    f"{self._skipped} consecutive non-finite updates; stopping with the last "
                    f"good checkpoint in {self.checkpointer.directory}")
        else:
            self._skipped = 0

    def train_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        rollout, graded, jobs, timing = self.rollout(step)
        t1 = time.perf_counter()
        update = self.update(rollout, step)
        t2 = time.perf_counter()
        table = gather_rows(episode_table(graded, jobs, self.stage_names))
        metrics = table_metrics(table, self.stage_names)
        metrics.update(update)
        metrics["kl"] = update.get("kl_ref", update.get("approx_kl", 0.0))
        tokens = float(gather_rows(rollout.lengths).sum())
        metrics.update(
            tokens_per_sec=tokens / max(t2 - t0, 1e-9),
            time_rollout_s=t1 - t0, time_tools_s=timing.get("tool_wait_s", 0.0),
            time_reward_s=timing.get("reward_s", 0.0), time_update_s=t2 - t1,
            accelerator_idle_frac=timing.get("accelerator_idle_frac", 0.0),
            stage=self.scheduler.current_stage)
        metrics.update(self.controller.metrics())
        return metrics

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, problems: list[Problem] | None = None, *, tools: bool,
                 num_samples: int = 1) -> dict[str, float]:
        problems = self.test_problems if problems is None else problems
        share = process_slice(len(problems))
        num_problems, problems = len(problems), problems[share]  # this host's share
        e = self.config.environment
        cfg = evaluation.EvalConfig(
            batch_size=max(1, self.config.training.batch_size * self.config.rl.group_size
                           // self.num_processes),
            temperature=self.config.rollout.eval_temperature, num_samples=num_samples,
            max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout)
        return evaluation.evaluate(problems, agent_factory=self.make_agent,
                                   make_prompt=self.make_prompt, agent_cfg=self.agent_cfg,
                                   cfg=cfg, tools=tools, seed=self.config.seed,
                                   stages=self.stage_names, gather=gather_rows,
                                   job_offset=share.start * max(1, num_samples),
                                   job_total=num_problems * max(1, num_samples))

    def close(self) -> None:
        self.checkpointer.close()
        self.sandbox.close()


def _pad_id(tokenizer: Any) -> int:
    for tok in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tok is not None:
            return int(tok)
    return 0
