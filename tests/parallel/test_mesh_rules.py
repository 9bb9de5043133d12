"""Mesh construction from sizes/config and the logical-axis rule table."""

import jax
import ml_collections
import pytest
from jax.sharding import PartitionSpec as P

from agentic_jax.parallel import (
    LOGICAL_AXIS_RULES,
    logical_to_mesh_spec,
    make_mesh,
    mesh_from_config,
)


def test_make_mesh_fills_the_wildcard():
    assert jax.device_count() == 8
    assert dict(make_mesh().shape) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert dict(make_mesh(data=2, fsdp=-1, tensor=2).shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert dict(make_mesh(data=-1, fsdp=1, tensor=4).shape) == {"data": 2, "fsdp": 1, "tensor": 4}


@pytest.mark.parametrize(
    "sizes, pattern",
    [
        (dict(data=3, fsdp=-1), r"mesh\.data=3.*8 devices"),
        (dict(data=2, fsdp=2, tensor=1), r"mesh\.fsdp=2.*8 devices"),
        (dict(data=-1, fsdp=-1), "at most one -1"),
        (dict(tensor=0), r"mesh\.tensor=0"),
    ],
)
def test_bad_mesh_sizes_name_the_fields(sizes, pattern):
    with pytest.raises(ValueError, match=pattern):
        make_mesh(**sizes)


def test_mesh_from_config_group():
    cfg = ml_collections.ConfigDict(dict(data=2, fsdp=2, tensor=-1))
    assert dict(mesh_from_config(cfg).shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    with pytest.raises(ValueError, match="mesh.tensor"):
        mesh_from_config(ml_collections.ConfigDict(dict(data=2, fsdp=2)))
    small = mesh_from_config(dict(data=1, fsdp=-1, tensor=1), devices=jax.devices()[:2])
    assert small.devices.size == 2


def test_rules_map_logical_axes():
    assert logical_to_mesh_spec(("vocab", "embed")) == P("tensor", "fsdp")
    assert logical_to_mesh_spec(("layers", "embed", "heads", "head_dim")) == P(
        None, "fsdp", "tensor", None)
    assert logical_to_mesh_spec(("batch", "length")) == P(("data", "fsdp"), None)
    assert logical_to_mesh_spec(("unknown", None)) == P(None, None)
    assert dict(LOGICAL_AXIS_RULES)["kv_heads"] == "tensor"


def test_rules_use_each_mesh_axis_once_and_only_dividing_axes():
    assert logical_to_mesh_spec(("heads", "mlp")) == P("tensor", None)
    mesh = make_mesh(data=1, fsdp=2, tensor=4)
    assert logical_to_mesh_spec(("embed", "kv_heads"), shape=(64, 2), mesh=mesh) == P(
        "fsdp", None)
    assert logical_to_mesh_spec(("batch",), shape=(6,), mesh=make_mesh(2, 2, 2)) == P("data")
    assert logical_to_mesh_spec(("embed", "mlp"), shape=(64, 8), mesh=mesh) == P("fsdp", "tensor")
    with pytest.raises(ValueError, match="do not match shape"):
        logical_to_mesh_spec(("embed",), shape=(2, 3))
