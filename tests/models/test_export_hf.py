"""tools/export_hf.py: a run's checkpoint -> an HF directory transformers loads with the trained
logits; an HF directory -> a checkpoint that `checkpoint.init_from` reads."""

import dataclasses
import importlib.util
import json
import shutil
import sys
import types
from pathlib import Path

import jax
import ml_collections
import numpy as np
import pytest
import transformers
from flax import nnx
from hf_testing import build, load_logits

from agentic_jax.data.tokenizer import ASSET_DIR
from agentic_jax.errors import UserError
from agentic_jax.episodes.rundir import record_config
from agentic_jax.models import ADAPTERS, from_pretrained, trainable_filter
from agentic_jax.rl.state import (
    HostState, TrainState, restore_params, root_rng, save, to_pure)
from agentic_jax.utils import Checkpointer

_REPO = Path(__file__).resolve().parents[2]


def _load_tool(name):
    spec = importlib.util.spec_from_file_location(name, _REPO / "tools" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


export_hf = _load_tool("export_hf")
TOKENS = np.random.default_rng(0).integers(0, 90, (2, 10)).astype(np.int32)


def _smoke_config(**model) -> ml_collections.ConfigDict:
    spec = importlib.util.spec_from_file_location("math_ppo", _REPO / "configs" / "math_ppo.py")
    config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config)
    resolved = config.get_config("smoke")
    for key, value in model.items():
        setattr(resolved.model, key, value)  # fields the config file may not know yet
    return resolved


def _trained(cfg, seed):
    """A policy whose every parameter (adapters included) differs from its initialisation."""
    model = export_hf.Transformer(cfg, rngs=nnx.Rngs(seed))
    state = nnx.state(model)
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape),
                                   state))
    return model


def _write_run(workdir: Path, config: ml_collections.ConfigDict, steps=(2, 4),
               stored=nnx.Param):
    """A run directory written by the run's own writers (its config record, its training
    states), whose params hold the `stored` parameters (all, or a LoRA run's trainable ones)."""
    workdir.mkdir(parents=True, exist_ok=True)
    record_config(str(workdir), config, num_params=0)
    cfg = export_hf.run_model(workdir).cfg
    models = {}
    with Checkpointer(str(workdir / "checkpoints"), async_save=False) as checkpointer:
        for step in steps:
            models[step] = _trained(cfg, step)
            params = nnx.state(models[step], stored)
            state = TrainState(params=params, opt_state={"mu": nnx.to_pure_dict(params)},
                               ref_params=None, step=np.asarray(step, np.int32),
                               rng=root_rng(0))
            if stored is nnx.Param:  # every parameter, as checkpoints of full fine-tuning
                checkpointer.maybe_save(step, {**to_pure(state), "params": nnx.to_pure_dict(
                    params)}, HostState(scheduler={}, controller={})._asdict(), force=True)
            else:
                save(checkpointer, state, HostState(scheduler={}, controller={}), force=True)
    return models


def test_run_with_the_builtin_model_exports_its_trained_logits(tmp_path):
    models = _write_run(tmp_path / "run", _smoke_config())
    assert export_hf.main(["--workdir", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    np.testing.assert_allclose(load_logits(tmp_path / "hf", TOKENS), models[4](TOKENS),
                               atol=1e-5, rtol=0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.eos_token_id is not None
    assert export_hf.main(["--workdir", str(tmp_path / "run"), "--step", "2",
                           "--out", str(tmp_path / "hf2")]) == 0
    np.testing.assert_allclose(load_logits(tmp_path / "hf2", TOKENS), models[2](TOKENS),
                               atol=1e-5, rtol=0)


# Both are full LoRA runs; test_run_with_the_builtin_model_exports_its_trained_logits checks
# export by default.
@pytest.mark.slow
@pytest.mark.parametrize("stored", ["all", "trainable"])
def test_run_from_a_pretrained_lora_model_exports_merged_with_its_files(tmp_path, stored):
    source = tmp_path / "qwen3"
    build(transformers.Qwen3Config(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, eos_token_id=[1, 2],
        bos_token_id=None)).save_pretrained(source)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(ASSET_DIR / name, source / name)
    (source / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2, 3]}))
    config = _smoke_config(path=str(source), lora_rank=4, lora_alpha=8.0)
    lora_cfg = dataclasses.replace(from_pretrained(source).cfg, lora_rank=4)
    trainable = nnx.Param if stored == "all" else trainable_filter(lora_cfg)
    models = _write_run(tmp_path / "run", config, steps=(3,), stored=trainable)
    if stored == "trainable":  # the frozen base is the source's: the test's model must agree
        nnx.update(models[3], nnx.state(from_pretrained(source, lora_rank=4), nnx.Not(ADAPTERS)))
    assert models[3].cfg.lora_rank == 4 and jax.tree.leaves(nnx.state(models[3], ADAPTERS))
    out = tmp_path / "hf"
    assert export_hf.main(["--workdir", str(tmp_path / "run"), "--out", str(out)]) == 0
    np.testing.assert_allclose(load_logits(out, TOKENS), models[3](TOKENS), atol=2e-5, rtol=0)
    assert json.loads((out / "generation_config.json").read_text()) == {"eos_token_id": [1, 2, 3]}
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == [1, 2]
    assert (out / "chat_template.jinja").read_text() == (source / "chat_template.jinja").read_text()


def test_a_lora_checkpoint_restores_its_adapters_over_the_model_as_built(tmp_path):
    """A LoRA run's checkpoint holds only its trainable part (adapters, value head): evaluation
    and serving read it over the model as built, whose base it keeps; a model configured
    without adapters gets one clear line instead of a crash."""
    run = tmp_path / "run"
    lora = types.SimpleNamespace(lora_rank=4)   # trainable_filter reads only the rank
    models = _write_run(run, _smoke_config(lora_rank=4, lora_alpha=8.0), steps=(3,),
                        stored=trainable_filter(lora))
    built = nnx.state(export_hf.Transformer(models[3].cfg, rngs=nnx.Rngs(0)))
    params, step = restore_params(str(run), built, jax.tree.map(lambda x: x.sharding, built))
    assert step == 3
    restored, trained, base = (dict(nnx.to_flat_state(s)) for s in (
        params, nnx.state(models[3], trainable_filter(lora)), built))
    assert any("lora" in "/".join(map(str, k)) for k in trained)
    assert trained and len(trained) < len(restored)
    for key, value in restored.items():
        expected = trained[key] if key in trained else base[key]
        np.testing.assert_array_equal(np.asarray(value[...]), np.asarray(expected[...]))
    plain = nnx.state(export_hf.Transformer(dataclasses.replace(models[3].cfg, lora_rank=0),
                                            rngs=nnx.Rngs(0)))
    with pytest.raises(UserError, match="holds only its adapters: use the run's model.lora_rank"):
        restore_params(str(run), plain, jax.tree.map(lambda x: x.sharding, plain))


def test_hf_to_checkpoint_is_read_as_a_run_checkpoint(tmp_path):
    source = tmp_path / "llama"
    build(transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2)).save_pretrained(source)
    out = tmp_path / "init"
    assert export_hf.main(["--hf", str(source), "--out", str(out), "--value_head"]) == 0
    model = from_pretrained(source, value_head=True)
    like = nnx.state(model)
    # What checkpoint.init_from does with the directory.
    params, step = restore_params(str(out), like, jax.tree.map(lambda x: x.sharding, like))
    assert step == 0
    jax.tree.map(np.testing.assert_array_equal, params, like)
    assert export_hf.main(["--hf", str(source), "--out", str(out)]) == 2  # never overwritten


def test_bad_directories_get_one_line(tmp_path, capsys):
    assert export_hf.main(["--workdir", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"export_hf: {tmp_path}: not a run directory (config.json and checkpoints/ expected)")
    _write_run(tmp_path / "run", _smoke_config(), steps=(1,))
    assert export_hf.main(["--workdir", str(tmp_path / "run"), "--step", "7",
                           "--out", str(tmp_path / "o")]) == 2
    assert "--step=7: no such checkpoint" in capsys.readouterr().err


def test_a_run_on_a_gguf_file_exports_from_its_converted_directory(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from gguf_testing import write_tiny_gguf

    monkeypatch.setenv("AGENTIC_JAX_CACHE", str(tmp_path / "cache"))
    gguf_file = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_file)
    run = tmp_path / "run"
    run.mkdir()
    record_config(str(run), _smoke_config(path=str(gguf_file)), num_params=1)
    info = export_hf.run_model(run)
    assert info.source_dir.parent == tmp_path / "cache" / "gguf"
    assert info.tokenizer_dir == info.source_dir and info.cfg.family == "llama"
