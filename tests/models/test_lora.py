"""LoRA adapters: merged weights equal the adapter forward, only adapters get gradients, the
base forward needs no second copy, exports merge, and the memory plan counts them."""

import dataclasses
import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import transformers
from flax import nnx
from hf_testing import build, load_logits

from agentic_jax.models import (
    ADAPTERS,
    BASE,
    ModelConfig,
    Transformer,
    from_pretrained,
    merge_adapters,
    save_pretrained,
    trainable_filter,
)
from agentic_jax.parallel import make_mesh

CFG = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=12, family="qwen3", qk_norm=True,
                  tie_word_embeddings=False, value_head=True, lora_rank=4, lora_alpha=8.0)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 96, (2, 12)), jnp.int32)


def _trained_adapters(cfg: ModelConfig = CFG) -> Transformer:
    """A LoRA model whose B matrices are non-zero, as after some training."""
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    adapters = nnx.state(model, ADAPTERS)
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(adapters))))
    nnx.update(model, jax.tree.map(lambda x: 0.3 * jax.random.normal(next(keys), x.shape),
                                   adapters))
    return model


@pytest.mark.slow
def test_adapters_exist_only_on_targets_and_are_counted():
    cfg = dataclasses.replace(CFG, lora_targets=("q_proj", "down_proj"))
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    paths = {path[:3] for path, _ in nnx.to_flat_state(nnx.state(model, ADAPTERS))}
    assert paths == {("blocks", "attn", "q_proj_lora"), ("blocks", "mlp", "down_proj_lora")}
    leaves = jax.tree.leaves(nnx.state(model, ADAPTERS))
    assert sum(x.size for x in leaves) == cfg.num_lora_params() == 2 * 4 * (32 + 48 + 48 + 32)
    assert sum(x.size for x in jax.tree.leaves(nnx.state(model))) == cfg.num_params()


def test_fresh_adapters_leave_the_model_unchanged():
    lora = Transformer(CFG, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(lora(TOKENS), lora.forward(TOKENS, adapters=False).logits)


def test_merged_weights_equal_the_adapter_forward():
    lora = _trained_adapters()
    merged = merge_adapters(lora)
    assert merged.cfg.lora_rank == 0 and not jax.tree.leaves(nnx.state(merged, ADAPTERS))
    out = lora.forward(TOKENS)
    assert np.abs(out.logits - lora.forward(TOKENS, adapters=False).logits).max() > 0.1
    np.testing.assert_allclose(merged.forward(TOKENS).logits, out.logits, atol=2e-5, rtol=0)
    np.testing.assert_allclose(merged.forward(TOKENS).values, out.values, atol=2e-5, rtol=0)


def test_disabled_adapters_run_the_base_weights():
    lora = _trained_adapters()
    base = Transformer(dataclasses.replace(CFG, lora_rank=0), rngs=nnx.Rngs(0))
    nnx.update(base, nnx.state(lora, BASE))
    np.testing.assert_array_equal(lora.forward(TOKENS, adapters=False).logits,
                                  base.forward(TOKENS).logits)


def test_gradients_reach_only_the_adapters_and_value_head():
    lora = _trained_adapters()
    graphdef, trainable, frozen = nnx.split(lora, trainable_filter(CFG), ...)

    def loss(trainable):
        out = nnx.merge(graphdef, trainable, frozen).forward(TOKENS)
        return jnp.mean(out.logits ** 2) + out.values.mean()

    grads = jax.grad(loss)(trainable)
    names = {path[-2] if path[0] == "blocks" else path[0]
             for path, _ in nnx.to_flat_state(grads)}
    assert names == {f"{t}_lora" for t in CFG.lora_targets} | {"value_kernel", "value_bias"}
    assert all(np.abs(g).max() > 0 for g in jax.tree.leaves(grads))
    optimizer = optax.adam(1e-2)
    updates, _ = optimizer.update(grads, optimizer.init(trainable))
    nnx.update(lora, optax.apply_updates(trainable, updates))
    after = nnx.state(lora, nnx.Not(trainable_filter(CFG)))
    assert jax.tree.all(jax.tree.map(np.array_equal, after, frozen))


@pytest.mark.slow
def test_from_pretrained_adds_sharded_adapters_and_exports_merged(tmp_path):
    torch_model = build(transformers.Qwen3Config(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12))
    torch_model.save_pretrained(tmp_path / "hf")
    plain = from_pretrained(tmp_path / "hf")
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    lora = from_pretrained(tmp_path / "hf", mesh=mesh, lora_rank=4, seed=3)
    lora_a = lora.blocks.attn.q_proj_lora.lora_a[...]
    assert lora_a.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", None)
    assert np.abs(lora_a).max() > 0
    np.testing.assert_allclose(lora(TOKENS), plain(TOKENS), atol=1e-5)
    nnx.update(lora, nnx.state(_trained_adapters(lora.cfg), ADAPTERS))
    save_pretrained(lora, tmp_path / "merged")
    np.testing.assert_allclose(load_logits(tmp_path / "merged", np.asarray(TOKENS)),
                               lora(TOKENS), atol=2e-5)


_TOOL = Path(__file__).resolve().parents[2] / "tools" / "memory_plan.py"


@pytest.fixture(scope="module")
def memory_plan():
    spec = importlib.util.spec_from_file_location("memory_plan", _TOOL)
    module = sys.modules["memory_plan"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_plan_of_qwen7b_with_and_without_lora(memory_plan):
    from agentic_jax.models import get_preset

    mesh = {"data": 1, "fsdp": 8, "tensor": 1}
    full_cfg = get_preset("qwen2.5-7b", dtype="bfloat16", param_dtype="bfloat16")
    lora_cfg = dataclasses.replace(full_cfg, lora_rank=16)
    full = memory_plan.plan_memory(full_cfg, mesh, 32, 2048, "full")
    lora = memory_plan.plan_memory(lora_cfg, mesh, 32, 2048, "full")
    assert lora.num_trainable == lora_cfg.num_lora_params() == 40_370_176
    assert lora.optimizer == pytest.approx(2 * 40_370_176 * 4 / 8)
    assert lora.gradients / full.gradients == pytest.approx(40_370_176 / full.num_params)
    assert full.train_peak - lora.train_peak > 0.9 * (full.optimizer + full.gradients)
