"""tools/convert_checkpoint.py: HF -> orbax -> HF keeps every tensor bit for bit."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file

from agentic_jax.models import ModelConfig, Transformer, save_pretrained

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "convert_checkpoint.py"
_spec = importlib.util.spec_from_file_location("convert_checkpoint", _TOOL)
convert = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(convert)

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, family="llama", tie_word_embeddings=False,
                  rope_theta=2000.0)


def test_hf_orbax_hf_round_trip(tmp_path):
    save_pretrained(Transformer(CFG, rngs=nnx.Rngs(0)), tmp_path / "hf")
    assert convert.main(["hf-to-orbax", "--src", str(tmp_path / "hf"),
                         "--dst", str(tmp_path / "orbax")]) == 0
    assert convert.load_orbax(tmp_path / "orbax").cfg == CFG
    assert convert.main(["orbax-to-hf", "--src", str(tmp_path / "orbax"),
                         "--dst", str(tmp_path / "back")]) == 0
    original = load_file(tmp_path / "hf" / "model.safetensors")
    back = load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(back) == sorted(original)
    for name, tensor in original.items():
        np.testing.assert_array_equal(back[name], tensor, err_msg=name)
    with pytest.raises(FileExistsError, match="params"):
        convert.save_orbax(convert.load_orbax(tmp_path / "orbax"), tmp_path / "orbax")
    assert convert.main(["hf-to-orbax", "--src", str(tmp_path / "hf"),
                         "--dst", str(tmp_path / "orbax")]) == 2


@pytest.mark.parametrize("src", ["run", "run/checkpoints", "missing"])
def test_run_directories_and_bad_paths_get_one_line_not_a_traceback(tmp_path, capsys, src):
    (tmp_path / "run" / "checkpoints" / "4").mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text("{}")
    code = convert.main(["orbax-to-hf", "--src", str(tmp_path / src),
                         "--dst", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("convert_checkpoint: ") and "\n" not in err
    if src != "missing":
        assert f"tools/export_hf.py --workdir={tmp_path / 'run'}" in err


def test_hf_to_hf_casts_to_bfloat16(tmp_path):
    save_pretrained(Transformer(CFG, rngs=nnx.Rngs(0)), tmp_path / "hf")
    convert.main(["hf-to-hf", "--src", str(tmp_path / "hf"), "--dst", str(tmp_path / "bf16"),
                  "--dtype", "bfloat16"])
    tensors = load_file(tmp_path / "bf16" / "model.safetensors")
    assert {str(t.dtype) for t in tensors.values()} == {"bfloat16"}
    with pytest.raises(FileNotFoundError, match="model_config.json"):
        convert.load_orbax(tmp_path / "hf")
