"""The one-line model summary and the defaults for RL from a pretrained checkpoint."""

import dataclasses

import pytest

from agentic_jax.models import get_preset
from agentic_jax.models.pretrained import (LORA_LR, LORA_WARMSTART_LR, PRETRAINED_LR, WARMSTART_LR,
                                           model_summary, pretrained_defaults)


def test_summary_names_family_size_dtype_vocab_context_and_rope():
    cfg = get_preset("llama-3.2-1b", dtype="bfloat16")
    assert model_summary(cfg, "/ckpt/llama") == (
        "model: llama 1.24B parameters, bfloat16 over float32, vocab 128256, context 131072, "
        "rope llama3 x32 (from /ckpt/llama)")
    lora = dataclasses.replace(get_preset("qwen2.5-7b"), lora_rank=16)
    assert model_summary(lora) == (
        "model: qwen2 7.62B parameters (LoRA r=16: 40.37M trainable), float32, vocab 152064, "
        "context 32768, rope default")


def test_defaults_fit_the_prompt_and_the_template():
    cfg = get_preset("qwen2.5-1.5b")
    chat = pretrained_defaults(cfg, has_chat_template=True, longest_prompt=151)
    assert chat == {"training.lr": PRETRAINED_LR, "data.template": "chat",
                    "training.max_length": 704, "warmstart.enabled": False,
                    "warmstart.steps": 25, "warmstart.batch_size": 8,
                    "warmstart.lr": WARMSTART_LR, "model.remat": "full"}
    base = pretrained_defaults(dataclasses.replace(cfg, lora_rank=8), has_chat_template=False,
                               longest_prompt=40, response_tokens=88)
    assert base == {"training.lr": LORA_LR, "data.template": "zero", "training.max_length": 128,
                    "warmstart.enabled": False, "warmstart.steps": 25,
                    "warmstart.batch_size": 8, "warmstart.lr": LORA_WARMSTART_LR,
                    "model.remat": "full"}


def test_defaults_refuse_prompts_the_context_cannot_hold():
    cfg = dataclasses.replace(get_preset("tiny-1m"), max_seq_len=256)
    assert pretrained_defaults(cfg, has_chat_template=True, longest_prompt=200)[
        "training.max_length"] == 256
    with pytest.raises(ValueError, match="leaves no room for a response"):
        pretrained_defaults(cfg, has_chat_template=True, longest_prompt=256)
    with pytest.raises(ValueError, match="must be positive"):
        pretrained_defaults(cfg, has_chat_template=True, longest_prompt=0)
