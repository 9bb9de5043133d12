"""A tiny, fast training config shared by the training tests."""

import ml_collections

from configs.math_ppo import get_config

TIMING_KEYS = ("tokens_per_sec", "time_", "accelerator_idle_frac", "controller/", "peak_rss_mb")


def tiny_config(**overrides) -> ml_collections.ConfigDict:
    c = get_config("smoke")
    c.mesh.data = -1  # every test device, parameters replicated
    c.mesh.fsdp = 1
    c.training.batch_size = 2
    c.rl.group_size = 2
    c.training.total_steps = 4
    c.training.warmup_steps = 1
    c.training.max_length = 96
    c.warmstart.enabled = False
    c.data.eval_size = 4
    c.environment.tool_mode = "fixed"
    c.environment.num_workers = 1
    c.checkpoint.every_steps = 2
    c.checkpoint.async_save = False
    c.logging.plots = False
    for key, value in overrides.items():
        node = c
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    return c


def comparable(record: dict) -> dict:
    """A metrics record without wall-clock figures (which differ between identical runs)."""
    return {k: v for k, v in record.items() if not k.startswith(TIMING_KEYS)}


def train(config: ml_collections.ConfigDict, workdir: str, **kwargs) -> dict:
    """`agentic_jax.training.run.train` with the evaluation package's evaluators, as the train
    command runs it."""
    from agentic_jax.evaluation.benchmarks import evaluate_in_training
    from agentic_jax.evaluation.held_out import evaluate
    from agentic_jax.training.evaluators import Evaluators
    from agentic_jax.training.run import train as train_run

    kwargs.setdefault("evaluators", Evaluators(held_out=evaluate, benchmarks=evaluate_in_training))
    return train_run(config, workdir, **kwargs)
