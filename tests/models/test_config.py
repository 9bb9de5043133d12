"""ModelConfig validation, parameter counting and presets."""

import dataclasses

import jax
import pytest
from flax import nnx

from agentic_jax.models import PRESETS, ModelConfig, Transformer, get_preset

TINY_SIZES = {"tiny-0.1m": 0.1e6, "tiny-0.2m": 0.2e6, "tiny-1m": 1e6, "tiny-4m": 4e6, "tiny-16m": 16e6,
              "tiny-60m": 60e6}


def _cfg(**overrides) -> ModelConfig:
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                num_kv_heads=2, head_dim=8)
    return ModelConfig(**{**base, **overrides})


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_heads=3), "num_heads"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(head_dim=7), "head_dim"),
        (dict(dtype="float64"), "dtype"),
        (dict(remat="some"), "remat"),
        (dict(attention_impl="flash"), "attention_impl"),
        (dict(family="gpt2"), "family"),
        (dict(rope_type="longrope"), "rope_type"),
        (dict(lora_rank=4, lora_targets=("qkv",)), "lora_targets"),
        (dict(lora_rank=-1), "lora_rank"),
    ],
)
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        _cfg(**overrides)


def test_config_is_frozen_and_replaceable():
    cfg = _cfg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.hidden_size = 64
    assert dataclasses.replace(cfg, num_layers=3).num_layers == 3


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(qkv_bias=True), dict(tie_word_embeddings=False, value_head=True),
     dict(num_kv_heads=4, qkv_bias=True, value_head=True)],
)
def test_num_params_counts_every_parameter(overrides):
    cfg = _cfg(**overrides)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert sum(x.size for x in leaves) == cfg.num_params()


@pytest.mark.parametrize("name, target", sorted(TINY_SIZES.items()))
def test_tiny_ladder_sizes_at_vocab_1024(name, target):
    n = get_preset(name, vocab_size=1024).num_params()
    assert 0.75 * target <= n <= 1.25 * target, (name, n)


def test_real_presets_have_published_sizes():
    expected_billions = {"qwen2.5-0.5b": 0.494, "qwen2.5-1.5b": 1.544, "qwen2.5-7b": 7.616,
                         "llama-3.2-1b": 1.236, "llama-3.1-8b": 8.030}
    for name, billions in expected_billions.items():
        assert PRESETS[name].num_params() / 1e9 == pytest.approx(billions, rel=0.01), name


def test_get_preset_overrides_and_rejects_unknown_names():
    cfg = get_preset("tiny-1m", vocab_size=300, value_head=True)
    assert (cfg.vocab_size, cfg.value_head, cfg.hidden_size) == (300, True, 128)
    with pytest.raises(ValueError, match="tiny-1m"):
        get_preset("tiny-2m")
