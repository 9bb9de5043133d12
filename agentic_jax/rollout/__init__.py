"""Rollouts: the jit-compiled KV-cache sampler, the multi-turn tool loop and the episode record."""

from agentic_jax.rollout.agent import AgentConfig, AgentLoop, Phase, RolloutResult, RowSpec
from agentic_jax.rollout.controller import ToolController, ToolDecision
from agentic_jax.rollout.episode import Episode, RolloutBatch
from agentic_jax.rollout.generate import generate
from agentic_jax.rollout.sampler import DecodeOut, DecodeState, Sampler, SamplingParams

__all__ = [
    "AgentConfig",
    "AgentLoop",
    "DecodeOut",
    "DecodeState",
    "Episode",
    "Phase",
    "RolloutBatch",
    "RolloutResult",
    "RowSpec",
    "Sampler",
    "SamplingParams",
    "ToolController",
    "ToolDecision",
    "generate",
]
