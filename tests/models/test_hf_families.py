"""Qwen3 and RoPE scalings against transformers: logits, export round trip, greedy decoding."""

import json

import numpy as np
import pytest
import transformers
from hf_testing import build, forward, greedy, load_logits, logits_of

from agentic_jax.models import from_pretrained, save_pretrained
from agentic_jax.rollout import generate

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              max_position_embeddings=256)
YARN = dict(rope_type="yarn", rope_theta=1e4, factor=4.0, original_max_position_embeddings=64)
CONFIGS = {
    # head_dim 24 != 64 / 4: Qwen3's explicit head_dim.
    "qwen3-gqa-tied-headdim": lambda: transformers.Qwen3Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1e6)),
    "qwen3-untied-yarn": lambda: transformers.Qwen3Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
        tie_word_embeddings=False, rope_parameters=YARN),
    "qwen2-yarn-beta": lambda: transformers.Qwen2Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        rope_parameters={**YARN, "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.3}),
    "llama-linear": lambda: transformers.LlamaConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="linear", rope_theta=1e4, factor=2.5)),
}
TOKENS = np.random.default_rng(0).integers(0, 128, (2, 200)).astype(np.int32)
PROMPTS = [[5, 17, 99, 3, 64], [7], [(11 * i) % 128 for i in range(1, 21)]]
NEW_TOKENS = 20


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """(directory written by transformers, the torch model)."""
    model = build(CONFIGS[request.param]())
    directory = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(directory)
    return directory, model


def test_logits_match_transformers(case):
    directory, model = case
    expected = logits_of(model, TOKENS)
    assert np.abs(expected).max() > 1.0
    np.testing.assert_allclose(forward(from_pretrained(directory), TOKENS).logits, expected,
                               atol=1e-4, rtol=0)


def test_export_loads_in_transformers_with_the_same_logits(case, tmp_path):
    directory, model = case
    save_pretrained(from_pretrained(directory), tmp_path)
    np.testing.assert_allclose(load_logits(tmp_path, TOKENS), logits_of(model, TOKENS),
                               atol=1e-5, rtol=0)


def test_greedy_equals_transformers_generate(case):
    directory, model = case
    expected = [greedy(model, p, NEW_TOKENS) for p in PROMPTS]
    assert len({t for e in expected for t in e}) > 15
    ours = from_pretrained(directory)
    assert generate(ours, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0.0) == expected


def _hub_config() -> dict:
    """A config.json as the Hub ships Qwen3 with YaRN (transformers 4.x keys), shrunk."""
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": [2, 3], "head_dim": 16, "hidden_act": "silu",
        "hidden_size": 48, "initializer_range": 0.02, "intermediate_size": 80,
        "max_position_embeddings": 256, "max_window_layers": 2, "model_type": "qwen3",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": None,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 64},
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 128,
    }


def test_hub_style_config_loads_and_exports_faithfully(tmp_path):
    source, export = tmp_path / "hub", tmp_path / "export"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(_hub_config()))
    model = build(transformers.AutoConfig.from_pretrained(source))
    model.save_pretrained(source)
    (source / "config.json").write_text(json.dumps(_hub_config()))  # the Hub's file, unchanged
    expected = logits_of(model, TOKENS)
    ours = from_pretrained(source, dtype="float32")
    assert (ours.cfg.family, ours.cfg.head_dim, ours.cfg.rope_type) == ("qwen3", 16, "yarn")
    np.testing.assert_allclose(forward(ours, TOKENS).logits, expected, atol=1e-4, rtol=0)
    save_pretrained(ours, export, source_dir=source)
    written = json.loads((export / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (1, [2, 3])
    assert written["rope_scaling"]["rope_type"] == written["rope_parameters"]["rope_type"] == "yarn"
    assert written["rope_theta"] == written["rope_parameters"]["rope_theta"] == 1e6
    assert written["torch_dtype"] == written["dtype"] == "float32"
    loaded = transformers.AutoConfig.from_pretrained(export)
    assert (loaded.bos_token_id, loaded.eos_token_id) == (1, [2, 3])
    np.testing.assert_allclose(load_logits(export, TOKENS), expected, atol=1e-5, rtol=0)


def test_dynamic_rope_is_plain_rope_within_the_context(tmp_path):
    dynamic = transformers.LlamaConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2,
        rope_parameters=dict(rope_type="dynamic", rope_theta=1e4, factor=2.0))
    model = build(dynamic)
    model.save_pretrained(tmp_path)
    ours = from_pretrained(tmp_path)
    assert ours.cfg.rope_type == "default"
    np.testing.assert_allclose(forward(ours, TOKENS).logits, logits_of(model, TOKENS),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral", "gemma3"])
def test_other_families_stay_refused_in_one_line(case, tmp_path, model_type):
    config = json.loads((case[0] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    with pytest.raises(ValueError, match=f"model_type '{model_type}' is not supported") as err:
        from_pretrained(tmp_path)
    assert "\n" not in str(err.value)


def test_qwen3_with_attention_bias_is_refused(case, tmp_path):
    config = json.loads((case[0] / "config.json").read_text())
    if config["model_type"] != "qwen3":
        pytest.skip("a Qwen3 case")
    (tmp_path / "config.json").write_text(json.dumps({**config, "attention_bias": True}))
    with pytest.raises(ValueError, match="attention_bias=True is not supported"):
        from_pretrained(tmp_path)
