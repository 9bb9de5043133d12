"""Evaluation of a policy on a problem set: accuracy with and without tools, pass@k, code use,
tool calls and response length, overall and per stage."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
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
) -> dict[str, float]:
    """Runs every problem ``cfg.num_samples`` times and aggregates.

    Args:
      agent_factory: builds an AgentLoop for a controller and loop config (shares the sampler).
      make_prompt: (problem, tools_allowed) -> prompt tokens.
      tools: False is the direct-answer setting (tools forbidden, prompt without the tool format).
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
    for start in range(0, len(jobs), cfg.batch_size):
        chunk = list(jobs[start:start + cfg.batch_size])
        pad = cfg.batch_size - len(chunk)
        chunk_padded = chunk + [chunk[-1]] * pad  # fixed batch shape: one compilation
        rng, key = jax.random.split(rng)
        eps, _ = agent.run([make_prompt(p, tools) for p in chunk_padded], key,
                           difficulties=[p.difficulty for p in chunk_padded],
                           stages=[p.stage for p in chunk_padded])
        episodes.extend(eps[:len(chunk)])
    return summarize(jobs, episodes, k)


def summarize(jobs: Sequence[Any], episodes: Sequence[Episode], k: int) -> dict[str, float]:
    """Aggregate metrics of graded episodes (``jobs[i]`` is the problem of ``episodes[i]``)."""
    infos = grade_batch([e.text for e in episodes], [p.answer for p in jobs])
    correct = np.asarray([i.correct for i in infos], bool)
    calls = np.asarray([e.num_tool_calls for e in episodes], float)
    fails = np.asarray([e.num_tool_failures for e in episodes], float)
    lengths = np.asarray([len(e.response_tokens) for e in episodes], float)
    out = {
        "accuracy": float(correct.mean()) if len(correct) else 0.0,
        "code_use_rate": float((calls > 0).mean()) if len(calls) else 0.0,
        "tool_calls": float(calls.mean()) if len(calls) else 0.0,
        "exec_success_rate": float(1.0 - fails.sum() / calls.sum()) if calls.sum() else 0.0,
        "response_length": float(lengths.mean()) if len(lengths) else 0.0,
        "num_problems": float(len(jobs) // k),
    }
    by_stage: dict[str, list[bool]] = defaultdict(list)
    for p, c in zip(jobs, correct):
        by_stage[p.stage].append(bool(c))
    for stage, values in by_stage.items():
        out[f"accuracy/{stage}"] = float(np.mean(values))
    if k > 1:
        per_problem = correct.reshape(-1, k).sum(axis=1)
        for kk in sorted({1, k}):
            out[f"pass@{kk}"] = float(np.mean([pass_at_k(k, int(c), kk) for c in per_problem]))
    return out
