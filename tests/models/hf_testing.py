"""Helpers for the Hugging Face parity tests: tiny random torch models and their outputs."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from flax import nnx


def randomise(model: torch.nn.Module, seed: int = 0) -> None:
    """Weights large enough that a layout or RoPE mistake shows up far above float32 noise,
    and logits well separated, so argmax is not decided by rounding."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.1 * noise if "norm" in name else 0.15 * noise)


def build(config: transformers.PretrainedConfig, seed: int = 0) -> torch.nn.Module:
    """A randomised float32 eager-attention model of `config`."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager")
    randomise(model, seed)
    return model.eval()


def logits_of(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()


def load_logits(directory, tokens: np.ndarray) -> np.ndarray:
    """Logits of the directory as transformers loads it (float32)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager")
    return logits_of(model, tokens)


def greedy(model: torch.nn.Module, prompt: list[int], max_new_tokens: int) -> list[int]:
    """HF greedy continuation of one unpadded prompt, with no end-of-sequence token."""
    config = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), generation_config=config)
    return out[0, len(prompt):].tolist()


forward = nnx.jit(lambda model, tokens: model.forward(tokens))
