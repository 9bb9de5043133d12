"""Colocated and disaggregated device placement (`mesh.rollout_devices`)."""

import jax
import numpy as np
import pytest

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


def test_weights_move_to_the_sampler_devices_device_to_device(monkeypatch):
    """`copy_across` lays the trainer's sharded arrays out on the sampler's tensor-parallel
    mesh with the same values, in buffers of their own, and never fetches one to the host
    (which `jax.device_put` between these device sets would)."""
    from flax import nnx
    from jax._src.array import ArrayImpl

    from agentic_jax.models import ModelConfig, Transformer

    placement = split_devices(2)
    train_mesh = make_mesh(1, -1, 1, devices=placement.train)
    cfg = ModelConfig(vocab_size=64, hidden_size=48, intermediate_size=96, num_layers=1,
                      num_heads=4, num_kv_heads=2, head_dim=12)
    params = nnx.state(Transformer(cfg, rngs=nnx.Rngs(0)))
    params = jax.device_put(params, param_shardings(params, train_mesh))
    fetched = []
    value = ArrayImpl._value
    monkeypatch.setattr(ArrayImpl, "_value",
                        property(lambda self: fetched.append(self.shape) or value.fget(self)))
    sampler = copy_across(params, param_shardings(params, placement.rollout_mesh()))
    jax.block_until_ready(sampler)
    assert fetched == []
    monkeypatch.undo()
    for trained, sampled in zip(jax.tree.leaves(params), jax.tree.leaves(sampler)):
        assert set(sampled.sharding.device_set) == set(placement.rollout)
        assert set(trained.sharding.device_set) == set(placement.train)
        np.testing.assert_array_equal(np.asarray(trained), np.asarray(sampled))
    # Heads are split over the two sampler devices (tensor parallel), not replicated.
    assert any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(sampler))
    # The spy sees what a plain device_put between the two meshes does.
    monkeypatch.setattr(ArrayImpl, "_value",
                        property(lambda self: fetched.append(self.shape) or value.fget(self)))
    jax.block_until_ready(per_host_copy(params, param_shardings(params, placement.rollout_mesh())))
    assert fetched
