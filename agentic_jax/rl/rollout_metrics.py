"""Per-step metrics of graded episodes: the curves the scaling-law result is about.

Metrics are computed from a table of per-episode numbers, so that on several hosts each one
contributes its episodes' rows (`agentic_jax.parallel.gather_rows`) and all agree on the result.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def episode_table(graded: Sequence[tuple[Any, Any]], problems: Sequence[Any],
                  stages: Sequence[str]) -> dict[str, np.ndarray]:
    """One row per episode: tool calls and failures, correctness, reward, lengths, flags, and the
    index of the problem's stage in ``stages``.

    Args:
      graded: (Episode, RewardInfo) pairs.
      problems: the problem of each episode.
      stages: every stage name the run can see (the same list on every host).
    """
    eps = [e for e, _ in graded]
    infos = [i for _, i in graded]
    index = {s: i for i, s in enumerate(stages)}
    return {
        "calls": np.asarray([e.num_tool_calls for e in eps], np.float32),
        "fails": np.asarray([e.num_tool_failures for e in eps], np.float32),
        "correct": np.asarray([i.correct for i in infos], np.float32),
        "reward": np.asarray([i.reward for i in infos], np.float32),
        "answered": np.asarray([i.extracted is not None for i in infos], np.float32),
        "response_length": np.asarray([len(e.response_tokens) for e in eps], np.float32),
        "model_tokens": np.asarray([e.num_model_tokens for e in eps], np.float32),
        "truncated": np.asarray([e.truncated for e in eps], np.float32),
        "void_turn": np.asarray([e.void_turn for e in eps], np.float32),
        "stage": np.asarray([index.get(p.stage, -1) for p in problems], np.int32),
    }


def table_metrics(table: dict[str, np.ndarray], stages: Sequence[str]) -> dict[str, float]:
    """Accuracy, reward, code use, tool statistics and lengths from an `episode_table`."""
    calls, correct = table["calls"], table["correct"]
    if not len(calls):
        return {}
    out = {
        "reward": float(table["reward"].mean()),
        "accuracy": float(correct.mean()),
        "code_use_rate": float((calls > 0).mean()),
        "exec_success_rate": (float(1.0 - table["fails"].sum() / calls.sum())
                              if calls.sum() else 0.0),
        "tool_calls": float(calls.mean()),
        "response_length": float(table["response_length"].mean()),
        "model_tokens": float(table["model_tokens"].mean()),
        "answer_rate": float(table["answered"].mean()),
        "truncated_rate": float(table["truncated"].mean()),
        "void_turn_rate": float(table["void_turn"].mean()),
        "num_episodes": float(len(calls)),  # what the rates are over (scaling-law weights)
    }
    with_code, without = correct[calls > 0], correct[calls == 0]
    if with_code.size:
        out["accuracy_with_code"] = float(with_code.mean())
    if without.size:
        out["accuracy_without_code"] = float(without.mean())
    present = sorted(set(table["stage"].tolist()))
    if len(present) > 1:
        for i in present:
            name = stages[i] if 0 <= i < len(stages) else "other"
            out[f"accuracy/{name}"] = float(correct[table["stage"] == i].mean())
    return out

