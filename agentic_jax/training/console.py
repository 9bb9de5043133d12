"""What a run prints for the person watching it: one-line messages (through the progress bar
when there is one), each logged step's headline metrics, and the warning of a run whose rewards
give no learning signal."""

from __future__ import annotations

from typing import Any

SUMMARY_KEYS = ("reward", "accuracy", "code_use_rate", "tool_calls", "response_length", "kl")


def say(line: str, bar: Any = None) -> None:
    """One line for the person watching the run (through the progress bar when there is one)."""
    if bar is not None:
        bar.write(line)
    else:
        print(line, flush=True)


def summary_line(step: int, m: dict[str, Any]) -> str:
    """The step's headline metrics on one line."""
    parts = [f"step {step}"]
    for k in SUMMARY_KEYS:
        if k in m and isinstance(m[k], (int, float)):
            parts.append(f"{k} {m[k]:.3f}")
    return " | ".join(parts)


def uniform_reward_warning(steps: int, m: dict[str, Any]) -> str:
    """Why a run whose episodes all got the same reward for ``steps`` steps learns nothing,
    and what to change."""
    head = (f"warning: every episode of the last {steps} steps got the same reward "
            f"({m.get('reward', float('nan')):.3f}; accuracy {m.get('accuracy', 0.0):.3f}, "
            f"answer rate {m.get('answer_rate', 0.0):.3f}, truncated "
            f"{m.get('truncated_rate', 0.0):.3f}): the policy gets no learning signal. ")
    if m.get("accuracy", 0.0) >= 1.0:  # solved everything: nothing left to learn here
        return head + ("It solves every problem it is given: harder ones (data.max_difficulty, "
                       "data.stages, data.kinds) or rl.accuracy_band would give it a signal")
    return head + ("Check the prompt template (data.template), training.max_length and whether "
                   "the model writes its answer in a form the grader reads (\\boxed{...})")
