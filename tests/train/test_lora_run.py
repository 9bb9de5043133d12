"""A LoRA run: only the adapters (and the value head) train, the base weights stay bit for bit
as built, checkpoints hold only the trainable part, the KL reference is the base model and a
restart resumes exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.rl import state as state_lib
from agentic_jax.training.builders import build_run, publish
from agentic_jax.config import read_config
from agentic_jax.rl.shardings import params_and_rest
from agentic_jax.utils import Checkpointer, read_metrics
from train_testing import comparable, tiny_config, train

# Whole training runs: part of the slow suite (pytest -m slow).
pytestmark = pytest.mark.slow

LORA = {"model.lora_rank": 4, "model.lora_alpha": 8.0, "model.lora_targets": ("q_proj", "v_proj"),
        "training.lr": 1e-2, "rl.kl_coef": 0.05}


def _flat(tree) -> dict:
    return {"/".join(map(str, k)): np.asarray(v)
            for k, v in nnx.to_flat_state(nnx.State(tree) if isinstance(tree, dict) else tree)}


def _final_state(workdir, config):
    run, like = build_run(read_config(config))
    try:
        with Checkpointer(f"{workdir}/checkpoints", every_steps=1, keep=1,
                          async_save=False) as ck:
            restored = state_lib.restore(ck, like, run.shardings)
        return like, restored[0]
    finally:
        run.policy.close()


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("lora"))
    config = tiny_config(**LORA)
    train(config, workdir, progress=False)
    return workdir, config


def test_only_adapters_train_and_are_checkpointed(lora_run):
    workdir, config = lora_run
    fresh, final = _final_state(workdir, config)
    before, after = _flat(nnx.to_pure_dict(fresh.params)), _flat(nnx.to_pure_dict(final.params))
    adapters = [k for k in before if "lora" in k]
    assert adapters and all("q_proj" in k or "v_proj" in k for k in adapters)
    assert any(not np.array_equal(before[k], after[k]) for k in adapters)
    base = [k for k in before if "lora" not in k and "value_" not in k]
    assert base and all(np.array_equal(before[k], after[k]) for k in base)
    stored = _flat(state_lib.to_pure(final)["params"])
    assert set(stored) == {k for k in before if "lora" in k or "value_" in k}
    assert final.ref_params is None  # no copy of the model for the KL reference
    trainable, _ = params_and_rest(final.params)
    opt_leaves = sum(x.size for x in jax.tree.leaves(final.opt_state))
    assert opt_leaves < 3 * sum(x.size for x in jax.tree.leaves(trainable)) + 64
    records, _ = read_metrics(f"{workdir}/metrics.jsonl")
    assert all(np.isfinite(r["kl_ref"]) for r in records if "kl_ref" in r)


def test_reference_is_the_base_model(lora_run):
    workdir, config = lora_run
    _, final = _final_state(workdir, config)
    ref = state_lib.reference_state(final, True)
    for k, v in _flat(nnx.to_pure_dict(ref)).items():
        if k.endswith("lora_b"):
            assert not v.any()


def test_lora_restart_resumes_exactly(lora_run, tmp_path):
    workdir, _ = lora_run
    split = str(tmp_path / "split")
    train(tiny_config(**LORA, **{"training.total_steps": 2}), split, progress=False)
    train(tiny_config(**LORA), split, progress=False)
    one = [comparable(r) for r in read_metrics(f"{workdir}/metrics.jsonl")[0]]
    two = [comparable(r) for r in read_metrics(f"{split}/metrics.jsonl")[0]]
    assert [r["step"] for r in two] == [1, 2, 3, 4] and one == two


def test_sampler_decodes_with_merged_weights(lora_run):
    workdir, config = lora_run
    run, like = build_run(read_config(config))
    try:
        with Checkpointer(f"{workdir}/checkpoints", every_steps=1, keep=1,
                          async_save=False) as ck:
            final, _ = state_lib.restore(ck, like, run.shardings)
        publish(run.policy, final.params)
        sampled = run.policy.engine.params
        assert not any("lora" in k for k in _flat(nnx.to_pure_dict(sampled)))
        tokens = jnp.asarray([[3, 7, 11, 19, 23, 5]])
        with_adapters = nnx.merge(run.policy.graphdef, final.params).forward(tokens).logits
        merged = nnx.merge(run.policy.engine.graphdef, sampled).forward(tokens).logits
        np.testing.assert_allclose(np.asarray(merged), np.asarray(with_adapters), atol=1e-5)
    finally:
        run.policy.close()
