"""Evaluation of a policy on a problem set: accuracy with and without tools, pass@k, code use,
tool calls and response length, overall and per stage."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import jax
import numpy as np

from agentic_jax.reward import grade_batch
from agentic_jax.rollout import AgentConfig, AgentLoop, Episode, SamplingParams, ToolController


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    batch_size: int = 32
    temperature: float = 0.0
    num_samples: int = 1         # k for pass@k (sampled at `temperature`, or 1.0 when greedy)
    max_tool_calls: int = 4
    timeout_ms: int = 500


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(
    problems: Sequence[Any],
    *,
    agent_factory: Callable[[ToolController, AgentConfig], AgentLoop],
    make_prompt: Callable[[Any, bool], list[int]],
    agent_cfg: AgentConfig,
    cfg: EvalConfig,
    tools: bool,
    seed: int = 0,
    stages: Sequence[str] | None = None,
    gather: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    job_offset: int = 0,
    job_total: int | None = None,
) -> dict[str, float]:
    """Runs every problem ``cfg.num_samples`` times and aggregates.

    Args:
      agent_factory: builds an AgentLoop for a controller and loop config (shares the sampler).
      make_prompt: (problem, tools_allowed) -> prompt tokens.
      tools: False is the direct-answer setting (tools forbidden, prompt without the tool format).
      stages: the stage names per-stage accuracy is reported under (default: the problems').
      gather: on several hosts, each evaluates its share of the problems and ``gather``
        (`agentic_jax.parallel.gather_rows`) joins the per-episode results before aggregation.
      job_offset / job_total: where this share's episodes sit among all hosts' (episode j draws
        with key j of one split, so sampled evaluations do not depend on the split or chunks).
    """
    mode = "fixed" if tools else "forbidden"
    controller = ToolController(max_tool_calls=cfg.max_tool_calls, timeout_ms=cfg.timeout_ms,
                                mode=mode)
    k = max(1, cfg.num_samples)
    temperature = cfg.temperature if k == 1 else (cfg.temperature or 1.0)
    loop_cfg = dataclasses.replace(agent_cfg, sampling=SamplingParams(temperature=temperature))
    agent = agent_factory(controller, loop_cfg)
    jobs = [p for p in problems for _ in range(k)]
    episodes: list[Episode] = []
    rng = jax.random.key(seed)
    # Room after the last episode for the padding rows of a final, partial chunk.
    total = (len(jobs) if job_total is None else job_total) + cfg.batch_size
    for start in range(0, len(jobs), cfg.batch_size):
        chunk = list(jobs[start:start + cfg.batch_size])
        pad = cfg.batch_size - len(chunk)
        chunk_padded = chunk + [chunk[-1]] * pad  # fixed batch shape: one compilation
        eps, _ = agent.run([make_prompt(p, tools) for p in chunk_padded], rng,
                           difficulties=[p.difficulty for p in chunk_padded],
                           stages=[p.stage for p in chunk_padded],
                           row_offset=job_offset + start, total_rows=total)
        episodes.extend(eps[:len(chunk)])
    stages = sorted({p.stage for p in problems}) if stages is None else list(stages)
    table = eval_table(jobs, episodes, stages)
    if gather is not None:
        table = gather(table)
    return summarize_table(table, stages, k)


def eval_table(jobs: Sequence[Any], episodes: Sequence[Episode],
               stages: Sequence[str]) -> dict[str, np.ndarray]:
    """Grades the episodes (``jobs[i]`` is the problem of ``episodes[i]``): one row each."""
    infos = grade_batch([e.text for e in episodes], [p.answer for p in jobs])
    index = {s: i for i, s in enumerate(stages)}
    return {
        "correct": np.asarray([i.correct for i in infos], np.float32),
        "calls": np.asarray([e.num_tool_calls for e in episodes], np.float32),
        "fails": np.asarray([e.num_tool_failures for e in episodes], np.float32),
        "response_length": np.asarray([len(e.response_tokens) for e in episodes], np.float32),
        "stage": np.asarray([index.get(p.stage, -1) for p in jobs], np.int32),
    }


def summarize_table(table: dict[str, np.ndarray], stages: Sequence[str],
                    k: int) -> dict[str, float]:
    """Aggregate metrics of an `eval_table` whose rows come in groups of ``k`` per problem."""
    correct, calls = table["correct"] > 0, table["calls"]
    n = len(correct)
    out = {
        "accuracy": float(correct.mean()) if n else 0.0,
        "code_use_rate": float((calls > 0).mean()) if n else 0.0,
        "tool_calls": float(calls.mean()) if n else 0.0,
        "exec_success_rate": (float(1.0 - table["fails"].sum() / calls.sum())
                              if calls.sum() else 0.0),
        "response_length": float(table["response_length"].mean()) if n else 0.0,
        "num_problems": float(n // k),
    }
    for i in sorted(set(table["stage"].tolist())):
        name = stages[i] if 0 <= i < len(stages) else "other"
        out[f"accuracy/{name}"] = float(correct[table["stage"] == i].mean())
    if k > 1 and n:
        per_problem = correct.reshape(-1, k).sum(axis=1)
        for kk in sorted({1, k}):
            out[f"pass@{kk}"] = float(np.mean([pass_at_k(k, int(c), kk) for c in per_problem]))
    return out

