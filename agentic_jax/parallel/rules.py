"""The logical-axis rules table (defined beside the model, whose parameters name the axes)."""

from agentic_jax.models.partitioning import (
    LOGICAL_AXIS_RULES,
    MeshAxes,
    Rules,
    logical_to_mesh_spec,
)

__all__ = ["LOGICAL_AXIS_RULES", "MeshAxes", "Rules", "logical_to_mesh_spec"]
