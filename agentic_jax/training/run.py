"""A whole training run, top to bottom:

    read and check the config -> build the run once -> resume, or start (warm start or
    init_from, evaluate the starting policy, freeze the KL reference, checkpoint step 0) ->
    RL steps: COLLECT (rollout + tools + reward) -> UPDATE (PPO epochs) -> PUBLISH (new weights
    to the sampler) -> metrics, checkpoint -> final evaluation, summary and plots.

The run begins in `agentic_jax.training.start` and is evaluated and summed up by the
`agentic_jax.training.evaluators` the caller hands in; this module holds the loop of RL steps.
The `TrainState` is passed in and returned by every phase; the run directory holds
``config.json``, ``checkpoints/``, ``metrics.jsonl``, ``tensorboard/``, ``initial_eval.json``
and, at the end, ``summary.json`` and ``curves.png``; with ``eval.every_steps`` the benchmarks'
results go to ``eval/`` (``history.jsonl`` / ``history.png`` over the steps).

Crashes lose at most the steps since the last checkpoint: one run at a time holds the directory
(``run.lock``, `agentic_jax.utils.run_lock`); SIGTERM saves the step in flight and exits with
143 (`agentic_jax.training.preemption`); a checkpoint that cannot be saved stops the run with
one line naming the cause; one that does not restore is moved to ``checkpoints.corrupt/``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import ml_collections
from tqdm.auto import tqdm

from agentic_jax.config import read_config, resolve_off_policy, resolve_old_logprobs
from agentic_jax.episodes import rundir
from agentic_jax.episodes.metrics import episode_summary
from agentic_jax.episodes.policy import Policy
from agentic_jax.parallel import is_main_process
from agentic_jax.rl import state as state_lib
from agentic_jax.rl.state import TrainState
from agentic_jax.training import async_rollouts, transcripts
from agentic_jax.training.builders import Run, build_run, publish
from agentic_jax.training.console import say, summary_line, uniform_reward_warning
from agentic_jax.training.evaluators import Evaluators, final_summary
from agentic_jax.training.preemption import StopSignal
from agentic_jax.training.rollouts import collect
from agentic_jax.training.start import host_state, resume_or_start
from agentic_jax.training.update import update
from agentic_jax.utils import Checkpointer, MetricsWriter, read_metrics
from agentic_jax.utils.memory import peak_rss_mb, reset_peak_rss
from agentic_jax.utils.run_lock import WorkdirLock, describe
from agentic_jax.utils.timing import PhaseTimer

# Steps in a row of equal rewards before the run warns that it is learning nothing (the metric
# uniform_reward_steps counts them on every step).
UNIFORM_REWARD_STEPS = 3


def train(config: ml_collections.ConfigDict, workdir: str, *, evaluators: Evaluators,
          progress: bool = True) -> dict:
    """Runs (or resumes) training in ``workdir``; returns the summary (also in summary.json).

    Every config value is checked before anything is written; resuming checkpoints of another
    model or tokenizer is refused (`rundir.check_same_model`).
    """
    began = time.perf_counter()
    cfg = read_config(config)
    rundir.check_same_model(config, workdir)
    off_policy = resolve_off_policy(config.rl, cfg.rl, cfg.staleness, cfg.model,
                                    cfg.engine.dtype)
    old_logprobs = resolve_old_logprobs(cfg)  # a refused setting stops here, before any write
    # Held before the run is built: a second run on the directory stops here, in seconds.
    lock = WorkdirLock(workdir).acquire() if is_main_process() else None
    if lock is not None and lock.taken_over:
        say(f"took over {lock.path} from a run no longer running: {describe(lock.taken_over)}")
    try:
        return _train(config, cfg, workdir, off_policy, old_logprobs.line, began, progress,
                      evaluators)
    finally:
        if lock is not None:
            lock.release()


def _train(config: ml_collections.ConfigDict, cfg: Any, workdir: str, off_policy: Any,
           old_logprobs: str, began: float, progress: bool, evaluators: Evaluators) -> dict:
    run, state = build_run(cfg)
    checkpointer = None
    try:
        from agentic_jax.models.pretrained import model_summary

        say(model_summary(run.policy.model_cfg, cfg.model.path or None))
        for line in filter(None, (off_policy.line, old_logprobs)):  # what "auto" came to
            say(line)
        num_params = sum(x.size for x in jax.tree.leaves(state.params))
        needed_mb = update_memory_mb(state.params)
        say(f"update memory: weights + gradients + AdamW moments of what trains = "
            f"{needed_mb:,.0f} MB (peak RSS is in every step's metrics as peak_rss_mb)")
        if is_main_process():
            os.makedirs(workdir, exist_ok=True)
            # The values recorded are the ones this run trains with: a rerun must not apply
            # pretrained defaults to them (`agentic_jax.episodes.model_defaults`).
            record = ml_collections.ConfigDict(config.to_dict())
            if "auto_defaults" in record.model:
                record.model.auto_defaults = False
            record.rl.update(off_policy.values)  # rl.is_level="auto" as it resolved
            rundir.record_config(workdir, record, num_params)
        c = cfg.checkpoint
        checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"),
                                    every_steps=c.every_steps, keep=c.keep,
                                    async_save=c.async_save)
        state, info = resume_or_start(run, state, checkpointer, workdir, progress, evaluators)
        state = _train_loop(run, state, checkpointer, workdir, num_params, progress,
                            evaluators.benchmarks)
        summary = final_summary(run, workdir, info, num_params, state.step_int, began,
                                evaluators.held_out)
        if jax.default_backend() == "cpu" and jax.process_count() == 1:
            # Host memory holds the weights only on a one-process CPU run.
            peak, steps = summary["peak_rss_mb"], summary.get("peak_rss_mb_rl")
            if steps:
                say(f"peak RSS of the RL steps {steps:,.0f} MB = {steps / needed_mb:.2f} x "
                    f"weights + gradients + AdamW moments; of the whole process {peak:,.0f} MB "
                    f"= {peak / needed_mb:.2f} x (loading, warm start, evaluation included)")
            else:
                say(f"peak RSS {peak:,.0f} MB = {peak / needed_mb:.2f} x weights + gradients + "
                    "AdamW moments")
        return summary
    finally:
        if checkpointer is not None:
            checkpointer.close()
        run.policy.close()


def update_memory_mb(params: Any) -> float:
    """MiB an update must hold at least: every weight, and a gradient and two AdamW moments of
    each trainable one (nnx.Param: with LoRA, the adapters and the value head)."""
    from agentic_jax.rl.shardings import params_and_rest

    nbytes = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree))
    return (nbytes(params) + 3 * nbytes(params_and_rest(params)[0])) / 2**20


def _train_loop(run: Run, state: TrainState, checkpointer: Checkpointer, workdir: str,
                num_params: int, progress: bool,
                benchmarks: Callable[[Policy, str, int, int], dict[str, float]]) -> TrainState:
    cfg = run.cfg
    total = cfg.training.total_steps
    writer = MetricsWriter(workdir, enabled=is_main_process(),
                           tensorboard=cfg.logging.tensorboard, resume_step=state.step_int)
    bar = tqdm(total=total, initial=state.step_int, desc="rl", disable=not progress)
    skipped, flat = 0, _uniform_reward_steps(workdir, state.step_int)
    # The RL steps' own peak (peak_rss_mb_rl), apart from loading, warm start and the first
    # evaluation; peak_rss_mb stays the whole process's.
    before, apart = peak_rss_mb(), reset_peak_rss()
    rollouts = async_rollouts.start(run, state.step_int + 1, total, state.step_key)
    try:
        with writer, StopSignal() as stop:
            while state.step_int < total:
                step = state.step_int + 1
                state, metrics, skipped = rl_step(run, state, step, skipped, workdir, rollouts)
                metrics["num_params"] = num_params
                steps_peak = peak_rss_mb()
                metrics["peak_rss_mb"] = max(before, steps_peak)
                if apart:
                    metrics["peak_rss_mb_rl"] = steps_peak
                flat = flat + 1 if _all_equal(metrics) else 0
                metrics["uniform_reward_steps"] = flat
                if flat == UNIFORM_REWARD_STEPS:
                    say(uniform_reward_warning(flat, metrics), bar if progress else None)
                metrics.update(benchmarks(run.policy, workdir, step, total))
                if step % cfg.logging.every_steps == 0 or step == total:
                    writer.write(step, metrics)
                    say(summary_line(step, metrics), bar if progress else None)
                if step % checkpointer.every_steps == 0:  # the producer is drained then
                    state_lib.save(checkpointer, state, host_state(run))
                checkpointer.check()  # a background save that failed stops the run here
                if stop.requested():
                    state_lib.save(checkpointer, state, host_state(run), force=True)
                    checkpointer.wait()
                    raise stop.stopped(step, checkpointer.directory)
                if rollouts is not None:
                    rollouts.release(step)
                bar.update(1)
    finally:
        if rollouts is not None:
            rollouts.close()
    bar.close()
    state_lib.save(checkpointer, state, host_state(run), force=True)
    checkpointer.wait()
    return state


def rl_step(run: Run, state: TrainState, step: int, skipped: int = 0,
            workdir: str | None = None,
            rollouts: async_rollouts.RolloutPipeline | None = None
            ) -> tuple[TrainState, dict[str, Any], int]:
    """One RL step -> (state with step = ``step``, the step's metrics, non-finite updates in a
    row). With ``workdir``, every ``logging.transcripts_every`` steps a few of its episodes go
    to transcripts.jsonl. With ``rollouts`` the experience comes from its producer and the new
    weights go to it."""
    timer = PhaseTimer()
    with timer("collect"):
        experience = (collect(run, state.step_key(step)) if rollouts is None
                      else rollouts.next(step))
    every = run.cfg.logging.transcripts_every
    if workdir is not None and every and step % every == 0:
        transcripts.from_training(run.policy, workdir, step, experience.episodes,
                                  experience.problems)
    if rollouts is None:  # the engine is idle until `publish`: the update gets its memory
        run.policy.engine.sleep()
    with timer("update"):
        result = update(run, state, experience.episodes, step, skipped_in_a_row=skipped)
    with timer("publish"):
        if rollouts is None:
            publish(run.policy, result.state.params, step)
        else:
            rollouts.publish(result.state.params, step)
    metrics = episode_summary(experience.table, run.policy.problems.stages)
    metrics.update(result.metrics)
    kl = result.metrics.get("kl_ref", result.metrics.get("approx_kl"))
    if kl is not None:  # a zero-gradient step with stored old log-probs measures neither
        metrics["kl"] = kl
    tokens = float(experience.table["sequence_length"].sum())
    t = experience.timing
    metrics.update(
        tokens_per_sec=tokens / max(timer.total, 1e-9), time_rollout_s=timer["collect"],
        time_tools_s=t.get("tool_wait_s", 0.0), time_reward_s=t.get("reward_s", 0.0),
        time_update_s=timer["update"] + timer["publish"],
        accelerator_idle_frac=t.get("accelerator_idle_frac", 0.0))
    metrics.update({k: v for k, v in t.items() if k.startswith(("engine_", "time_engine_"))})
    metrics.update(experience.host_metrics)
    metrics.update(async_rollouts.staleness_metrics(experience.episodes, step))
    wall = max(timer.elapsed, 1e-9)
    sampled = (timer["collect"] if rollouts is None
               else rollouts.busy_seconds(timer.start, timer.start + wall))
    metrics.update(time_step_s=wall, time_sampler_busy_frac=sampled / wall,
                   time_trainer_busy_frac=(timer["update"] + timer["publish"]) / wall,
                   rollout_aborted_tokens=t.get("aborted_tokens", 0.0))
    return (result.state.replace(step=np.asarray(step, np.int32)), metrics,
            result.skipped_in_a_row)


def _uniform_reward_steps(workdir: str, step: int) -> int:
    """The flat-reward count a resumed run continues from: the one logged at ``step``."""
    if not step:
        return 0
    records, _ = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    logged = [r for r in records if r.get("step", step + 1) <= step]
    if not logged:
        return 0
    # Steps not logged between the last record and ``step`` are not known to be flat.
    last = logged[-1]
    return int(last.get("uniform_reward_steps", 0)) if last["step"] == step else 0


def _all_equal(m: dict[str, Any]) -> bool:
    """Every episode of the step got the same reward (float32 std of equal non-dyadic rewards,
    e.g. a format penalty of -0.1, is ~1e-8, not 0)."""
    return m.get("reward_std", 1.0) <= 1e-6 * max(1.0, abs(m.get("reward", 0.0)))
