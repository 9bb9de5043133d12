"""A whole training run: resume or warm start, RL steps with metrics and checkpoints, final
held-out evaluation with and without tools, plots and a summary."""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections
from tqdm.auto import tqdm

from agentic_jax.parallel.distributed import agree, is_main_process
from agentic_jax.rl.trainer import Trainer
from agentic_jax.rl.warmstart import run_warm_start
from agentic_jax.utils import MetricsWriter, read_metrics

INITIAL_EVAL = "initial_eval.json"
SUMMARY = "summary.json"
SUMMARY_KEYS = ("reward", "accuracy", "code_use_rate", "tool_calls", "response_length", "kl")


def _write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _evaluate_both(trainer: Trainer) -> dict[str, dict[str, float]]:
    return {"tools": trainer.evaluate(tools=True), "direct": trainer.evaluate(tools=False)}


def _start(trainer: Trainer, config: ml_collections.ConfigDict, progress: bool) -> dict:
    """A fresh run: warm start (unless a checkpoint or pretrained model is given), the
    evaluation of the starting policy, and the step-0 checkpoint."""
    info: dict[str, Any] = {}
    if config.checkpoint.init_from:
        trainer.init_from(config.checkpoint.init_from)
        info["init_from"] = config.checkpoint.init_from
    elif config.warmstart.enabled and not config.model.path:
        info.update(run_warm_start(trainer, progress=progress))
    info["initial"] = _evaluate_both(trainer)
    trainer.freeze_reference()
    trainer.save(force=True)
    return info


def _say(line: str, bar: Any = None) -> None:
    """One line for the person watching the run (through the progress bar when there is one)."""
    if bar is not None:
        bar.write(line)
    else:
        print(line, flush=True)


def _summary_line(step: int, m: dict[str, Any]) -> str:
    parts = [f"step {step}"]
    for k in SUMMARY_KEYS:
        if k in m and isinstance(m[k], (int, float)):
            parts.append(f"{k} {m[k]:.3f}")
    return " | ".join(parts)


def train(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True) -> dict:
    """Runs (or resumes) training in ``workdir``; returns the summary (also in summary.json)."""
    main = is_main_process()
    trainer = Trainer(config, workdir)  # validates everything before writing anything
    config_path = os.path.join(workdir, "config.json")
    try:
        num_params = sum(x.size for x in jax.tree.leaves(trainer.state))
        if main and not os.path.exists(config_path):
            _write_json(config_path, {"config": json.loads(config.to_json_best_effort()),
                                      "num_params": int(num_params)})
        resumed = trainer.restore()
        if resumed:
            _say(f"resuming from step {trainer.step} ({trainer.checkpointer.directory})")
        init_path = os.path.join(workdir, INITIAL_EVAL)
        # Process 0 decides (a file may show up on one host's view of the disk before another's).
        if resumed and agree(os.path.exists(init_path)):
            info = _read_json(init_path)
        else:
            info = _start(trainer, config, progress)
            if main:
                _write_json(init_path, info)
        writer = MetricsWriter(workdir, enabled=main, tensorboard=config.logging.tensorboard,
                               resume_step=trainer.step)
        total = config.training.total_steps
        bar = tqdm(total=total, initial=trainer.step, desc="rl", disable=not progress)
        with writer:
            while trainer.step < total:
                step = trainer.step + 1
                metrics = trainer.train_step(step)
                trainer.step = step
                metrics["num_params"] = num_params
                if step % config.logging.every_steps == 0 or step == total:
                    writer.write(step, metrics)
                    _say(_summary_line(step, metrics), bar if progress else None)
                trainer.save()
                bar.update(1)
        bar.close()
        trainer.save(force=True)
        trainer.checkpointer.wait()
        summary = _finish(trainer, config, workdir, info, num_params)
    finally:
        trainer.close()
    return summary


def _finish(trainer: Trainer, config, workdir: str, info: dict, num_params: int) -> dict:
    final = _evaluate_both(trainer)
    records, _ = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    initial = info["initial"]
    summary = {
        "num_params": int(num_params),
        "steps": trainer.step,
        "initial": initial,
        "final": final,
        "accuracy_gain_tools": final["tools"]["accuracy"] - initial["tools"]["accuracy"],
        "code_use_rate_start": initial["tools"]["code_use_rate"],
        "code_use_rate_end": final["tools"]["code_use_rate"],
        "warmstart": {k: v for k, v in info.items() if k.startswith("warmstart")},
    }
    if is_main_process():
        _write_json(os.path.join(workdir, SUMMARY), summary)
        if config.logging.plots and records:
            from agentic_jax.scaling import plot_run_curves

            plot_run_curves({os.path.basename(workdir.rstrip("/")): records},
                            os.path.join(workdir, "curves.png"))
    return summary
