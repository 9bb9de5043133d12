"""The published policy on benchmarks: its tool-loop episodes as the `Sample`s that
`agentic_jax.evaluation.evaluate_benchmarks` scores (avg@K, pass@k, maj@K, intervals, files
under ``DIR/eval/``), from the evaluate command and during training (``eval.*``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from agentic_jax.config.groups import BenchmarkEvalConfig
from agentic_jax.data import Problem
from agentic_jax.episodes.policy import Policy
from agentic_jax.episodes.sampling import sample_episodes
from agentic_jax.evaluation import Sample, evaluate_benchmarks
from agentic_jax.evaluation.report import headline
from agentic_jax.parallel import is_main_process
from agentic_jax.rollout import SamplingParams

logger = logging.getLogger(__name__)
EVAL_DIR = "eval"


def benchmark_sampler(policy: Policy, *, sampling: SamplingParams, tools: bool = True):
    """``sample(problems, k)`` -> [len(problems)][k] `Sample`s of the published policy (every
    host gets every sample; all hosts must call it together)."""
    def sample(problems: Sequence[Problem], k: int) -> list[list[Sample]]:
        episodes = sample_episodes(policy, problems, num_samples=k, tools=tools,
                                   sampling=sampling)
        return [[Sample(e.text, tool_calls=e.num_tool_calls, used_code=e.num_tool_calls > 0,
                        response_length=len(e.response_tokens))
                 for e in episodes[i * k:(i + 1) * k]] for i in range(len(problems))]
    return sample


def run_benchmarks(policy: Policy, workdir: str, settings: BenchmarkEvalConfig, *,
                   step: int | None = None, history: bool = False) -> dict[str, dict]:
    """Evaluates ``policy.problems.benchmarks`` with ``settings`` and writes
    ``workdir/eval/`` (process 0); ``history`` appends the headline figures at ``step`` to
    ``eval/history.jsonl`` and redraws ``history.png``."""
    sampling = SamplingParams(temperature=settings.temperature, top_p=settings.top_p)
    return evaluate_benchmarks(
        policy.problems.benchmarks, benchmark_sampler(policy, sampling=sampling),
        os.path.join(workdir, EVAL_DIR), num_samples=settings.num_samples, step=step,
        history=history, write=is_main_process())


def evaluate_in_training(policy: Policy, workdir: str, step: int,
                         total_steps: int) -> dict[str, float]:
    """At step 0, every ``eval.every_steps`` and at the last step (nothing when
    ``eval.every_steps`` is 0): the benchmarks evaluated and added to the history; returns
    {"eval/<name>/avg@K", ".../pass@K", ".../maj@K"} for the step's metrics ({} otherwise)."""
    settings = policy.cfg.eval
    every = settings.every_steps
    if not every or not policy.problems.benchmarks or (step % every and step != total_steps):
        return {}
    return headline_metrics(run_benchmarks(policy, workdir, settings, step=step, history=True))


def headline_metrics(results: Mapping[str, Mapping]) -> dict[str, float]:
    """avg@K, pass@K and maj@K of every benchmark, as "eval/<name>/<metric>"."""
    return {f"eval/{name}/{key}": float(value) for name, result in results.items()
            for key, value in headline(result).items()}
