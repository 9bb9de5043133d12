"""The inference policy of a run (model, weights, tokenizer, template, sandbox and tool
settings; no training data) and `open_run`, the one way serving, evaluation and the apps open
a run."""

from agentic_jax.inference.open import has_checkpoints, open_config, open_run, run_config
from agentic_jax.inference.policy import (
    InferencePolicy, build_inference, publish, run_tokenizer, sampler_weights, tool_controller)
from agentic_jax.inference.prompts import chat_prompt, encode_prompt

__all__ = ["InferencePolicy", "build_inference", "chat_prompt", "encode_prompt",
           "has_checkpoints", "open_config", "open_run", "publish", "run_config",
           "run_tokenizer", "sampler_weights", "tool_controller"]
