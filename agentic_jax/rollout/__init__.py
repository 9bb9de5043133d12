"""Rollouts: the engine, the open rollout loop over it and its tools, the batch client used by
training and evaluation, and the episode record."""

from agentic_jax.rollout.agent import (
    AgentConfig, AgentLoop, RolloutResult, RowSpec, build_service, new_episode, poll_weights)
from agentic_jax.rollout.controller import ToolController, ToolDecision
from agentic_jax.rollout.episode import Episode, RolloutBatch
from agentic_jax.rollout.environment import Calculator, Feedback, PythonTool, Tool
from agentic_jax.rollout.generate import generate
from agentic_jax.rollout.engine.types import SamplingParams
from agentic_jax.rollout.live import Phase
from agentic_jax.rollout.service import RolloutService

__all__ = [
    "AgentConfig",
    "AgentLoop",
    "Calculator",
    "Episode",
    "Feedback",
    "Phase",
    "PythonTool",
    "RolloutBatch",
    "RolloutResult",
    "RolloutService",
    "RowSpec",
    "SamplingParams",
    "ToolController",
    "Tool",
    "ToolDecision",
    "build_service",
    "generate",
    "new_episode",
    "poll_weights",
]
