"""A policy built with disaggregated placement: what lives on which devices."""

import jax
import pytest
from train_testing import tiny_config

from agentic_jax.config import read_config
from agentic_jax.episodes.policy import build_policy
from agentic_jax.inference import publish


def _devices(tree):
    return set().union(*(x.sharding.device_set for x in jax.tree.leaves(tree)))


@pytest.mark.slow  # a whole policy with its sandbox; tests/parallel/test_placement.py has the parts
def test_the_engine_samples_on_its_own_devices():
    policy, params = build_policy(read_config(tiny_config(**{"mesh.rollout_devices": 2})))
    try:
        devices = jax.devices()
        assert set(policy.mesh.devices.flat) == set(devices[:6])
        assert _devices(params) == set(devices[:6])
        # The KV pool is created on the sampler's devices, not on the default (a trainer's).
        assert _devices(policy.engine.params) == _devices(policy.engine.kv) == set(devices[6:])
        publish(policy, jax.tree.map(lambda x: x * 2, params), version=1)
        assert _devices(policy.engine.params) == set(devices[6:])
        assert policy.engine.version == 1
    finally:
        policy.close()
