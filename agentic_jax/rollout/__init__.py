"""Rollouts: the jit-compiled KV-cache sampler and the multi-turn tool loop."""

from agentic_jax.rollout.agent import AgentConfig, AgentLoop
from agentic_jax.rollout.controller import ToolController, ToolDecision
from agentic_jax.rollout.episode import Episode, RolloutBatch
from agentic_jax.rollout.generate import generate
from agentic_jax.rollout.sampler import DecodeState, Sampler, SamplingParams

__all__ = [
    "AgentConfig",
    "AgentLoop",
    "DecodeState",
    "Episode",
    "RolloutBatch",
    "Sampler",
    "SamplingParams",
    "ToolController",
    "ToolDecision",
    "generate",
]
