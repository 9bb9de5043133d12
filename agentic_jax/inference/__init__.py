"""The inference policy of a run (model, weights, tokenizer, template, sandbox and tool
settings; no training data). A run is opened as one by `agentic_jax.episodes.open.open_run`
(which may read the run's problems, for a pretrained model's defaults: nothing here does)."""

from agentic_jax.inference.policy import (
    InferencePolicy, build_inference, publish, run_tokenizer, sampler_weights, tool_controller)
from agentic_jax.inference.prompts import chat_prompt, encode_prompt

__all__ = ["InferencePolicy", "build_inference", "chat_prompt", "encode_prompt", "publish",
           "run_tokenizer", "sampler_weights", "tool_controller"]
