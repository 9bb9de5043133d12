"""Rewards for math answers: final-answer extraction, safe equivalence grading, a verification
layer, and episode rewards (pure outcome by default). No JAX here: grading runs on host threads."""

from agentic_jax.reward.extract import extract_answer
from agentic_jax.reward.grader import grade_answer
from agentic_jax.reward.rewards import (
    RewardConfig,
    RewardInfo,
    compute_reward,
    grade_batch,
    overlong_penalty,
)
from agentic_jax.reward.verify import VerificationResult, verify

__all__ = [
    "RewardConfig",
    "RewardInfo",
    "VerificationResult",
    "compute_reward",
    "extract_answer",
    "grade_answer",
    "grade_batch",
    "overlong_penalty",
    "verify",
]
