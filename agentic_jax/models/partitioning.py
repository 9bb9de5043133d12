"""The one table mapping logical axis names (parameters, activations) to mesh axes.

It lives beside the model that names the axes, so that loading a checkpoint straight into its
shards needs nothing outside this package; `agentic_jax.parallel` re-exports it.
"""

from __future__ import annotations

from collections.abc import Sequence

from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MeshAxes = str | tuple[str, ...] | None
Rules = Sequence[tuple[str, MeshAxes]]

# FSDP shards the embedding dimension of every weight; tensor parallelism splits heads, MLP width
# and vocabulary (Megatron-style). Batch-like axes spread over both data-parallel mesh axes.
LOGICAL_AXIS_RULES: tuple[tuple[str, MeshAxes], ...] = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("layers", None),
)


def logical_to_mesh_spec(
    axes: Sequence[str | None],
    rules: Rules = LOGICAL_AXIS_RULES,
    *,
    shape: Sequence[int] | None = None,
    mesh: Mesh | None = None,
) -> PartitionSpec:
    """PartitionSpec for logical `axes` under `rules`.

    Unknown names and None replicate. A mesh axis is used at most once per spec (the first
    dimension claiming it wins). Given `shape` and `mesh`, a dimension is only sharded over mesh
    axes whose total size divides it (e.g. 2 kv heads on tensor=4 stay replicated).
    """
    table = dict(rules)
    if shape is not None and len(shape) != len(axes):
        raise ValueError(f"logical axes {tuple(axes)} do not match shape {tuple(shape)}")
    used: set[str] = set()
    spec = []
    for dim, name in enumerate(axes):
        mesh_axes = table.get(name) if name is not None else None
        names = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
        names = tuple(a for a in names if a not in used and (mesh is None or a in mesh.shape))
        if shape is not None and mesh is not None:
            names = _dividing_prefix(names, shape[dim], mesh)
        used.update(names)
        spec.append(names[0] if len(names) == 1 else (names or None))
    return PartitionSpec(*spec)


def _dividing_prefix(names: tuple[str, ...], size: int, mesh: Mesh) -> tuple[str, ...]:
    """Longest prefix of mesh axes whose product divides `size`."""
    kept, product = [], 1
    for name in names:
        product *= mesh.shape[name]
        if size % product:
            break
        kept.append(name)
    return tuple(kept)


def variable_sharding(
    var: nnx.Variable, mesh: Mesh, rules: Rules = LOGICAL_AXIS_RULES
) -> NamedSharding:
    """NamedSharding of one variable from its `out_sharding` logical axes (none: replicated)."""
    shape = var.get_value().shape
    axes = var.get_metadata().get("out_sharding") or (None,) * len(shape)
    return NamedSharding(mesh, logical_to_mesh_spec(axes, rules, shape=shape, mesh=mesh))
