"""Serving a Hugging Face directory (``--config.model.path``) with its chat template: the
conversation goes through the tokenizer's template, the system message included."""

import os
import shutil

import httpx
import pytest
import torch
import transformers

from agentic_jax.data.tokenizer import ASSET_DIR, builtin_tokenizer
from agentic_jax.serve import ServeLimits, load_policy
from tests.serve.serve_testing import live_server
from tests.train.train_testing import tiny_config

MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 6 * 7?"}]


def _qwen2_dir(out) -> str:
    """A random two-layer Qwen2 with the built-in tokenizer (and its ChatML template)."""
    config = transformers.Qwen2Config(
        vocab_size=896, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        eos_token_id=builtin_tokenizer().eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    for name in os.listdir(ASSET_DIR):
        shutil.copy(ASSET_DIR / name, out / name)
    return str(out)


@pytest.mark.slow
def test_a_chat_model_directory_is_served(tmp_path):
    config = tiny_config(**{"model.path": _qwen2_dir(tmp_path / "qwen2_chat"),
                            "data.template": "chat", "training.max_length": 320})
    loaded = load_policy(config, None)
    try:
        assert loaded.name == "qwen2_chat" and loaded.step is None
        with live_server(loaded.policy, ServeLimits(), model_name=loaded.name) as (url, _):
            body = httpx.post(f"{url}/v1/chat/completions", timeout=120,
                              json={"messages": MESSAGES, "max_tokens": 4}).json()
        template = loaded.policy.tokenizer.apply_chat_template(
            MESSAGES, tokenize=False, add_generation_prompt=True)
        expected = len(loaded.policy.tokenizer.encode(template, add_special_tokens=False))
    finally:
        loaded.policy.close()
    assert body["model"] == "qwen2_chat"
    assert body["usage"]["prompt_tokens"] == expected
    assert 1 <= body["usage"]["completion_tokens"] + body["usage"]["tool_output_tokens"] <= 4
