"""Colocated and disaggregated device placement (`mesh.rollout_devices`)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from agentic_jax.parallel import make_mesh, param_shardings, per_host_copy, split_devices
from agentic_jax.parallel.placement import copy_across


def test_colocated_keeps_every_device_for_the_trainer():
    placement = split_devices(0)
    assert placement.train == tuple(jax.devices()) and not placement.disaggregated
    with pytest.raises(ValueError, match="colocated"):
        placement.rollout_mesh()


def test_the_last_devices_sample_and_the_others_train():
    devices = jax.devices()
    placement = split_devices(2)
    assert placement.train == tuple(devices[:6]) and placement.rollout == tuple(devices[6:])
    mesh = placement.rollout_mesh()
    assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 2}
    assert set(mesh.devices.flat) == set(devices[6:])


@pytest.mark.parametrize("value, message", [
    (-1, "expected a number >= 0"), (8, "expected fewer than the 8 devices"), (True, "expected an int"),
    (1.5, "expected an int")])
def test_bad_rollout_devices_are_one_clear_error(value, message):
    with pytest.raises(ValueError, match=f"mesh.rollout_devices: {message}"):
        split_devices(value)


def test_several_processes_refuse_disaggregation():
    with pytest.raises(ValueError, match="expected 0 with 2 processes"):
        split_devices(2, processes=2)
    assert split_devices(0, processes=2).train == tuple(jax.devices())


def _spy_on_host_fetches(monkeypatch) -> list:
    """Records every array fetched to the host (`jax.Array._value`) from now on."""
    from jax._src.array import ArrayImpl

    fetched = []
    value = ArrayImpl._value
    monkeypatch.setattr(ArrayImpl, "_value",
                        property(lambda self: fetched.append(self.shape) or value.fget(self)))
    return fetched


def test_weights_move_to_the_sampler_devices_device_to_device(monkeypatch):
    """`copy_across` lays the trainer's sharded arrays out on the sampler's tensor-parallel
    mesh with the same values, in buffers of their own, and never fetches one to the host
    (which `jax.device_put` between these device sets does)."""
    placement = split_devices(2)
    train_mesh = make_mesh(1, -1, 1, devices=placement.train)  # fsdp over 6 devices
    rollout_mesh = placement.rollout_mesh()
    values = {"embed": np.arange(60 * 48.0).reshape(60, 48), "w": np.ones((48, 96)),
              "scale": np.linspace(0.0, 1.0, 48)}
    values = {k: v.astype(np.float32) for k, v in values.items()}
    train_specs = {"embed": P("fsdp", None), "w": P(None, "fsdp"), "scale": P()}
    sampler_specs = {"embed": P(None, "tensor"), "w": P("tensor", None), "scale": P()}
    params = {k: jax.device_put(v, NamedSharding(train_mesh, train_specs[k]))
              for k, v in values.items()}
    targets = {k: NamedSharding(rollout_mesh, spec) for k, spec in sampler_specs.items()}
    fetched = _spy_on_host_fetches(monkeypatch)
    sampler = jax.block_until_ready(copy_across(params, targets))
    assert fetched == []
    jax.block_until_ready(per_host_copy(params, targets))  # plain device_put, for contrast
    assert fetched
    monkeypatch.undo()
    for key, array in sampler.items():
        assert array.sharding == targets[key]
        assert set(params[key].sharding.device_set) == set(placement.train)
        np.testing.assert_array_equal(np.asarray(array), values[key])


def test_the_sampler_mesh_splits_heads_and_holds_the_kv_pool():
    from flax import nnx

    from agentic_jax.models import ModelConfig, Transformer
    from agentic_jax.rollout.engine.paged_kv import init_paged_kv

    placement = split_devices(2)
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=4, num_kv_heads=2, head_dim=8)
    abstract = nnx.state(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    shardings = jax.tree.leaves(param_shardings(abstract, placement.rollout_mesh()))
    assert any("tensor" in s.spec for s in shardings)  # tensor parallel, not replicated
    kv = init_paged_kv(cfg, num_pages=4, page_size=8, mesh=placement.rollout_mesh())
    assert kv.k.sharding.device_set == set(placement.rollout)
    assert kv.k.sharding.spec[1] == "tensor"  # kv heads split over the sampler's devices
    assert init_paged_kv(cfg, num_pages=4, page_size=8).k.committed is False
