"""Hugging Face parity: tiny random Qwen2/Llama models made with transformers (torch, float32)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from safetensors.torch import load_file, save_file

from agentic_jax.models import from_pretrained, save_pretrained
from agentic_jax.parallel import make_mesh

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              max_position_embeddings=256)
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=64)
CONFIGS = {
    "qwen2-gqa-tied-theta1e6": transformers.Qwen2Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1e6)),
    "qwen2-mha-untied": transformers.Qwen2Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False),
    "llama-gqa-untied-llama3rope-headdim": transformers.LlamaConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=1, head_dim=24,
        tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE, rms_norm_eps=1e-5),
    "llama-mha-tied-theta777": transformers.LlamaConfig(
        **COMMON, num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=777.0)),
}
TOKENS = np.random.default_rng(0).integers(0, 128, (2, 200)).astype(np.int32)


def _randomise(model: torch.nn.Module) -> None:
    """Weights large enough that a layout or RoPE mistake shows up far above float32 noise."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.1 * noise if "norm" in name else 0.15 * noise)


def _torch_logits(directory, tokens=TOKENS) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()


_forward = nnx.jit(lambda model, tokens: model.forward(tokens))


def _make_hf_model(name, directory):
    """Saves one tiny random HF model with save_pretrained; returns (directory, its logits)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        CONFIGS[name], dtype=torch.float32, attn_implementation="eager")
    _randomise(model)
    model.save_pretrained(directory)
    with torch.no_grad():
        logits = model(torch.as_tensor(TOKENS, dtype=torch.long)).logits.numpy()
    return directory, logits


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def hf_model(request, tmp_path_factory):
    return _make_hf_model(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory):
    """One representative checkpoint for the dtype, value-head and error cases."""
    return _make_hf_model("qwen2-gqa-tied-theta1e6", tmp_path_factory.mktemp("qwen"))


def test_logits_match_transformers(hf_model):
    directory, expected = hf_model
    logits = _forward(from_pretrained(directory), TOKENS).logits
    assert np.abs(expected).max() > 1.0  # the comparison is not between near-zero numbers
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)


def test_save_then_transformers_load_gives_the_same_logits(hf_model, tmp_path):
    directory, expected = hf_model
    model = from_pretrained(directory)
    save_pretrained(model, tmp_path)
    np.testing.assert_allclose(_torch_logits(tmp_path), expected, atol=1e-5, rtol=0)
    original = load_file(directory / "model.safetensors")
    saved = load_file(tmp_path / "model.safetensors")
    for name, tensor in original.items():
        torch.testing.assert_close(saved[name], tensor, atol=0, rtol=0)


def test_sharded_checkpoint_loads_onto_a_mesh(tmp_path):
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(
        CONFIGS["qwen2-mha-untied"], dtype=torch.float32, attn_implementation="eager")
    _randomise(model)
    model.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    with torch.no_grad():
        expected = model(torch.as_tensor(TOKENS[:, :16], dtype=torch.long)).logits.numpy()
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    ours = from_pretrained(tmp_path, mesh=mesh)
    q = ours.blocks.attn.q_kernel[...]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
    assert q.addressable_shards[0].data.shape == (2, 32, 2, 16)
    logits = _forward(ours, TOKENS[:, :16]).logits
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)


def test_bfloat16_checkpoint_loads_in_bfloat16(qwen_model, tmp_path):
    directory, expected = qwen_model
    weights = load_file(directory / "model.safetensors")
    weights = {name: tensor.to(torch.bfloat16) for name, tensor in weights.items()}
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    model = from_pretrained(tmp_path, dtype="bfloat16")
    assert model.embed[...].dtype == jnp.bfloat16
    logits = _forward(model, TOKENS[:, :32]).logits
    assert logits.dtype == jnp.float32
    error = np.abs(logits - expected[:, :32]).mean() / np.abs(expected[:, :32]).mean()
    assert error < 0.05


def test_value_head_round_trip_is_ignored_by_transformers(qwen_model, tmp_path):
    directory, expected = qwen_model
    critic = from_pretrained(directory, value_head=True)
    np.testing.assert_array_equal(_forward(critic, TOKENS[:, :8]).values, 0.0)
    critic.value_kernel[...] = jnp.linspace(-1, 1, critic.cfg.hidden_size)[:, None]
    save_pretrained(critic, tmp_path)
    np.testing.assert_allclose(_torch_logits(tmp_path, TOKENS[:, :8]), expected[:, :8], atol=1e-5)
    restored = from_pretrained(tmp_path, value_head=True)
    np.testing.assert_allclose(_forward(restored, TOKENS[:, :8]).values,
                               _forward(critic, TOKENS[:, :8]).values, atol=1e-6)


def _copy_checkpoint(src, dst, drop=None, config_changes=None):
    config = json.loads((src / "config.json").read_text())
    config.update(config_changes or {})
    (dst / "config.json").write_text(json.dumps(config))
    weights = load_file(src / "model.safetensors")
    weights.pop(drop, None)
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})


def test_unsupported_architecture_names_model_type(qwen_model, tmp_path):
    _copy_checkpoint(qwen_model[0], tmp_path, config_changes={"model_type": "gpt2"})
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        from_pretrained(tmp_path)


def test_missing_tensor_is_named(qwen_model, tmp_path):
    name = "model.layers.1.mlp.up_proj.weight"
    _copy_checkpoint(qwen_model[0], tmp_path, drop=name)
    with pytest.raises(ValueError, match=f"tensor '{name}' is missing"):
        from_pretrained(tmp_path)


def test_shape_mismatch_is_named(qwen_model, tmp_path):
    _copy_checkpoint(qwen_model[0], tmp_path, config_changes={"intermediate_size": 80})
    with pytest.raises(ValueError, match="tensor 'model.layers.0.mlp.gate_proj.weight' has shape"):
        from_pretrained(tmp_path)


def test_unsupported_rope_scaling_is_named(qwen_model, tmp_path):
    rope = {"rope_type": "longrope", "rope_theta": 1e4, "factor": 4.0}
    _copy_checkpoint(qwen_model[0], tmp_path, config_changes={"rope_parameters": rope})
    with pytest.raises(ValueError, match="rope type .longrope."):
        from_pretrained(tmp_path)


def test_save_pretrained_shards_large_models_with_an_index(qwen_model, tmp_path):
    directory, expected = qwen_model
    save_pretrained(from_pretrained(directory), tmp_path, max_shard_bytes=60_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert not (tmp_path / "model.safetensors").exists()
    np.testing.assert_allclose(_torch_logits(tmp_path, TOKENS[:, :8]), expected[:, :8], atol=1e-5)
    logits = _forward(from_pretrained(tmp_path), TOKENS[:, :8]).logits
    np.testing.assert_allclose(logits, expected[:, :8], atol=1e-4)
