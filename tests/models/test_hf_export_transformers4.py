"""Exports read by transformers 4.x (installed into a temporary directory with pip): the same
logits as the JAX model, for every RoPE scaling and family, and the same special token ids."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import transformers
from hf_testing import build, forward

from agentic_jax.models import from_pretrained, save_pretrained

pytestmark = pytest.mark.slow

COMMON = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
CONFIGS = {
    "llama3": lambda: transformers.LlamaConfig(
        **COMMON, bos_token_id=0, eos_token_id=[1, 2],
        rope_parameters=dict(rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=16)),
    "qwen3-yarn": lambda: transformers.Qwen3Config(
        **COMMON, head_dim=12, tie_word_embeddings=True, eos_token_id=3,
        rope_parameters=dict(rope_type="yarn", rope_theta=1e4, factor=4.0,
                             original_max_position_embeddings=32)),
    "qwen2-linear": lambda: transformers.Qwen2Config(
        **COMMON, bos_token_id=4, eos_token_id=4,
        rope_parameters=dict(rope_type="linear", rope_theta=1e6, factor=3.0)),
}
TOKENS = np.random.default_rng(0).integers(0, 96, (2, 120)).astype(np.int32)
_READ = textwrap.dedent("""
    import json, sys
    import numpy as np, torch, transformers
    assert transformers.__version__.startswith("4."), transformers.__version__
    directory, tokens, out = sys.argv[1:]
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, torch_dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        logits = model(torch.as_tensor(np.load(tokens), dtype=torch.long)).logits.numpy()
    np.save(out, logits)
    c = model.config
    print(json.dumps({"version": transformers.__version__, "bos": c.bos_token_id,
                      "eos": c.eos_token_id, "rope_scaling": c.rope_scaling}))
""")


@pytest.fixture(scope="module")
def transformers4(tmp_path_factory):
    """A directory with transformers 4.x (and its own tokenizers / hub client) for PYTHONPATH."""
    target = tmp_path_factory.mktemp("transformers4")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--target", str(target), "transformers>=4.50,<5"], check=True, timeout=900)
    return target


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers4_reads_the_export_as_the_same_model(transformers4, tmp_path, name):
    build(CONFIGS[name]()).save_pretrained(tmp_path / "source")
    ours = from_pretrained(tmp_path / "source")
    save_pretrained(ours, tmp_path / "export")
    np.save(tmp_path / "tokens.npy", TOKENS)
    proc = subprocess.run(
        [sys.executable, "-c", _READ, str(tmp_path / "export"), str(tmp_path / "tokens.npy"),
         str(tmp_path / "logits.npy")], capture_output=True, text=True, timeout=600,
        env={"PYTHONPATH": str(transformers4), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
             "TRANSFORMERS_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    written = json.loads((tmp_path / "export" / "config.json").read_text())
    assert (seen["bos"], seen["eos"]) == (written.get("bos_token_id"), written["eos_token_id"])
    assert seen["rope_scaling"]["rope_type"] == ours.cfg.rope_type
    expected = np.asarray(forward(ours, TOKENS).logits)
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected, atol=1e-4, rtol=0)
