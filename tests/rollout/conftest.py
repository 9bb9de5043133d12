"""Fixtures the tool-loop tests share: the built-in tokenizer and a tiny random model on it."""

import pytest
from flax import nnx

from agentic_jax.data.tokenizer import builtin_tokenizer
from agentic_jax.models import ModelConfig, Transformer


@pytest.fixture(scope="module")
def tok():
    return builtin_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    cfg = ModelConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, value_head=True)
    return Transformer(cfg, rngs=nnx.Rngs(4))
