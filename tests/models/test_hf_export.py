"""save_pretrained writes what transformers needs to read back the same model and its files:
both RoPE keys, the dtype under both names, special token ids as the source had them,
generation_config.json and the tokenizer files."""

import json
import shutil

import numpy as np
import pytest
import transformers
from flax import nnx
from hf_testing import build, load_logits

from agentic_jax.data.tokenizer import ASSET_DIR
from agentic_jax.models import ModelConfig, Transformer, from_pretrained, save_pretrained

LLAMA3 = transformers.LlamaConfig(
    vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=[1, 2],
    rope_parameters=dict(rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=16))
TOKENS = np.random.default_rng(0).integers(0, 96, (2, 40)).astype(np.int32)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama3")
    build(LLAMA3).save_pretrained(directory)
    return directory


def test_llama3_export_keeps_rope_ids_and_dtype_for_both_transformers_majors(llama_dir,
                                                                             tmp_path):
    save_pretrained(from_pretrained(llama_dir), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 16}
    assert config["rope_parameters"] == {**config["rope_scaling"], "rope_theta": 5e5}
    assert config["rope_theta"] == 5e5
    assert (config["dtype"], config["torch_dtype"]) == ("float32", "float32")
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, [1, 2])
    assert "pad_token_id" not in config  # the source had none
    generation = transformers.GenerationConfig.from_pretrained(tmp_path)
    assert (generation.bos_token_id, generation.eos_token_id) == (0, [1, 2])
    np.testing.assert_allclose(load_logits(tmp_path, TOKENS), load_logits(llama_dir, TOKENS),
                               atol=1e-5, rtol=0)


def test_generation_config_and_tokenizer_files_come_from_the_source(llama_dir, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(llama_dir, source)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(ASSET_DIR / name, source / name)
    (source / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [1, 2], "temperature": 0.6, "top_p": 0.9}))
    save_pretrained(from_pretrained(source), tmp_path / "out", source_dir=source)
    for name in ("generation_config.json", "tokenizer.json", "chat_template.jinja"):
        assert (tmp_path / "out" / name).read_bytes() == (source / name).read_bytes()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.chat_template


def test_tokenizer_dir_wins_and_models_without_ids_write_none(tmp_path):
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
                      num_heads=4, num_kv_heads=2, head_dim=8)
    save_pretrained(Transformer(cfg, rngs=nnx.Rngs(0)), tmp_path, tokenizer_dir=ASSET_DIR)
    config = json.loads((tmp_path / "config.json").read_text())
    assert not {"bos_token_id", "eos_token_id", "pad_token_id"} & set(config)
    assert config["rope_scaling"] is None and config["rope_parameters"]["rope_type"] == "default"
    assert json.loads((tmp_path / "generation_config.json").read_text()) == {
        "_from_model_config": True}
    assert (tmp_path / "tokenizer.json").read_bytes() == (ASSET_DIR / "tokenizer.json").read_bytes()


def test_export_refuses_configs_transformers_cannot_hold(tmp_path):
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
                      num_heads=4, num_kv_heads=2, head_dim=8, family="qwen2", qk_norm=True)
    with pytest.raises(ValueError, match="q/k norms exactly in family='qwen3'"):
        save_pretrained(Transformer(cfg, rngs=nnx.Rngs(0)), tmp_path)
