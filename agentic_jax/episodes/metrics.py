"""Metrics of graded episodes: the curves the scaling-law result is about, for training steps
and evaluations alike.

Metrics are computed from a table of per-episode numbers, so that on several hosts each one
contributes its episodes' rows (`agentic_jax.parallel.gather_rows`) and all agree on the result.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from agentic_jax.rollout import Episode


def episode_table(episodes: Sequence[Episode], stages: Sequence[str]) -> dict[str, np.ndarray]:
    """One row per graded episode; ``stage`` is the index of its stage in ``stages`` (every
    stage name the run can see, the same list on every host), -1 for others."""
    index = {s: i for i, s in enumerate(stages)}

    def column(values, dtype=np.float32):
        return np.asarray(list(values), dtype)

    return {
        "calls": column(e.num_tool_calls for e in episodes),
        "fails": column(e.num_tool_failures for e in episodes),
        "budget": column((e.tool_budget for e in episodes), np.int32),
        "correct": column(e.correct for e in episodes),
        "reward": column(e.reward for e in episodes),
        "answered": column(e.answered for e in episodes),
        "response_length": column(len(e.response_tokens) for e in episodes),
        "sequence_length": column(len(e.prompt_tokens) + len(e.response_tokens)
                                  for e in episodes),
        "model_tokens": column(e.num_model_tokens for e in episodes),
        "truncated": column(e.truncated for e in episodes),
        "void_turn": column(e.void_turn for e in episodes),
        "stage": column((index.get(e.stage, -1) for e in episodes), np.int32),
    }


def episode_summary(table: dict[str, np.ndarray], stages: Sequence[str], *,
                    per_stage: bool = False) -> dict[str, float]:
    """Accuracy, reward, code use, tool statistics and lengths of an `episode_table`.

    Accuracy per stage is added when the table holds several stages, or always with
    ``per_stage``.
    """
    calls, correct = table["calls"], table["correct"]
    if not len(calls):
        return {}
    out = {
        "reward": float(table["reward"].mean()),
        # 0 when every episode scored the same: no advantage, no gradient, nothing learned.
        "reward_std": float(table["reward"].std()),
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
    if per_stage or len(present) > 1:
        for i in present:
            name = stages[i] if 0 <= i < len(stages) else "other"
            out[f"accuracy/{name}"] = float(correct[table["stage"] == i].mean())
    return out
