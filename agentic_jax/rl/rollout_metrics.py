"""Per-step metrics of graded episodes: the curves the scaling-law result is about."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def episode_metrics(graded: Sequence[tuple[Any, Any]], problems: Sequence[Any]) -> dict[str, float]:
    """Accuracy, reward, code use, tool statistics and lengths of one step's episodes.

    Args:
      graded: (Episode, RewardInfo) pairs.
      problems: the problem of each episode (for per-stage accuracy).
    """
    if not graded:
        return {}
    eps = [e for e, _ in graded]
    infos = [i for _, i in graded]
    calls = np.asarray([e.num_tool_calls for e in eps], float)
    fails = np.asarray([e.num_tool_failures for e in eps], float)
    correct = np.asarray([i.correct for i in infos], float)
    out = {
        "reward": float(np.mean([i.reward for i in infos])),
        "accuracy": float(correct.mean()),
        "code_use_rate": float((calls > 0).mean()),
        "exec_success_rate": float(1.0 - fails.sum() / calls.sum()) if calls.sum() else 0.0,
        "tool_calls": float(calls.mean()),
        "response_length": float(np.mean([len(e.response_tokens) for e in eps])),
        "model_tokens": float(np.mean([e.num_model_tokens for e in eps])),
        "answer_rate": float(np.mean([i.extracted is not None for i in infos])),
        "truncated_rate": float(np.mean([e.truncated for e in eps])),
        "void_turn_rate": float(np.mean([e.void_turn for e in eps])),
    }
    with_code = correct[calls > 0]
    without = correct[calls == 0]
    if with_code.size:
        out["accuracy_with_code"] = float(with_code.mean())
    if without.size:
        out["accuracy_without_code"] = float(without.mean())
    stages = sorted({p.stage for p in problems})
    if len(stages) > 1:
        for stage in stages:
            sel = np.asarray([p.stage == stage for p in problems])
            out[f"accuracy/{stage}"] = float(correct[sel].mean())
    return out
