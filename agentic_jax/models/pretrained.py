"""What a run on a pretrained checkpoint needs to say and to choose: a one-line summary of the
model and the training defaults that suit a pretrained model rather than a tiny one."""

from __future__ import annotations

from typing import Any

from agentic_jax.errors import UserError
from agentic_jax.models.config import ModelConfig

# Full fine-tuning of a pretrained policy with RL moves in steps of about 1e-6 (verl's and
# OpenRLHF's GRPO/PPO recipes for 1.5B-7B models); adapters start at zero and need ~10-20x more.
PRETRAINED_LR = 1e-6
LORA_LR = 2e-5
LENGTH_MULTIPLE = 64
# A pretrained model's warm start, when one is asked for (``--config.warmstart.enabled=True``):
# 25 steps of 8 examples, each seen once, at a supervised fine-tuning lr. On SmolLM2-135M
# (``:smollm2-135m-tools``, README) this took code use at temperature 1 from 1/32 to 6/32.
# The LoRA value is the usual 10x for adapters that start at zero, not measured here.
WARMSTART_STEPS, WARMSTART_BATCH_SIZE = 25, 8
WARMSTART_LR = 1e-4
LORA_WARMSTART_LR = 1e-3


def model_summary(cfg: ModelConfig, source: str | None = None) -> str:
    """One line: family, parameters (and trainable adapters), dtype, vocab, context, RoPE.

    e.g. "model: qwen3 0.44B parameters (LoRA r=16: 10.09M trainable), bfloat16 over float32,
    vocab 151936, context 40960, rope yarn x4 (from /ckpt/Qwen3-0.6B)".
    """
    parts = [f"model: {cfg.family} {_count(cfg.num_params() - cfg.num_lora_params())} parameters"]
    if cfg.lora_rank:
        parts[0] += f" (LoRA r={cfg.lora_rank}: {_count(cfg.num_lora_params())} trainable)"
    dtype = cfg.dtype if cfg.dtype == cfg.param_dtype else f"{cfg.dtype} over {cfg.param_dtype}"
    rope = "rope default" if cfg.rope_type == "default" else \
        f"rope {cfg.rope_type} x{cfg.rope_factor:g}"
    parts += [dtype, f"vocab {cfg.vocab_size}", f"context {cfg.max_seq_len}", rope]
    line = ", ".join(parts)
    return f"{line} (from {source})" if source else line


def _count(n: int) -> str:
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(n)


def pretrained_defaults(cfg: ModelConfig, *, has_chat_template: bool, longest_prompt: int,
                        response_tokens: int = 512) -> dict[str, Any]:
    """Config values (dotted keys) for RL from a pretrained checkpoint.

    - training.lr: PRETRAINED_LR, or LORA_LR when only adapters train;
    - data.template: "chat" when the tokenizer has a chat template, else "zero" (the plain
      instruction prompt for base models);
    - training.max_length: longest_prompt + response_tokens rounded up to LENGTH_MULTIPLE (and
      at most the model's context), so that no episode is cut by the template's length;
    - warmstart.enabled: False (a model may already use the tool; a chat model that never
      does can be warm-started in its own format, ``:smollm2-135m-tools``), and the warm
      start's size and lr at a pretrained model's scale (WARMSTART_*) in case it is turned on,
      instead of the tiny model's 3,500 steps at 3e-3;
    - model.remat: "full": each layer is recomputed in the backward pass instead of keeping its
      activations (attention probabilities [B, H, T, T] among them); for SmolLM2-135M this takes
      an update of 8 x 384 tokens from 11.4 GB to 3.6 GB (tools/bench_update_memory.py).
    """
    if longest_prompt <= 0 or response_tokens <= 0:
        raise ValueError(f"pretrained_defaults: longest_prompt and response_tokens must be "
                         f"positive, got {longest_prompt} and {response_tokens}")
    wanted = longest_prompt + response_tokens
    max_length = min(-(-wanted // LENGTH_MULTIPLE) * LENGTH_MULTIPLE, cfg.max_seq_len)
    if max_length <= longest_prompt:
        raise UserError(f"pretrained_defaults: the longest prompt ({longest_prompt} tokens) "
                        f"leaves no room for a response in the model's context "
                        f"({cfg.max_seq_len})")
    return {
        "training.lr": LORA_LR if cfg.lora_rank else PRETRAINED_LR,
        "data.template": "chat" if has_chat_template else "zero",
        "training.max_length": max_length,
        "warmstart.enabled": False,
        "warmstart.steps": WARMSTART_STEPS,
        "warmstart.batch_size": WARMSTART_BATCH_SIZE,
        "warmstart.lr": LORA_WARMSTART_LR if cfg.lora_rank else WARMSTART_LR,
        "model.remat": "full",
    }
