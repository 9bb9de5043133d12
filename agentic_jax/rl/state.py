"""The training state, passed in and returned: never kept on an object.

`TrainState` is a pytree: the policy's model state (``params``: an `nnx.State` of the policy
with its value head), the optimizer state, the frozen KL reference (None without a KL term), the
number of finished RL steps and the run's PRNG key data. A checkpoint stores exactly it (as pure
dicts) plus the host state (curriculum scheduler, tool controller) as JSON.
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from agentic_jax.errors import UserError
from agentic_jax.rl.shardings import has_adapters, params_and_rest
from agentic_jax.utils import Checkpointer

logger = logging.getLogger(__name__)


@struct.dataclass
class TrainState:
    """params: nnx.State of the policy. opt_state: optax state of its nnx.Param leaves.
    ref_params: nnx.State of the KL reference, or None. step: int32 [] RL steps done.
    rng: uint32 key data of the run's root key (`jax.random.key_data`). step and rng are host
    (numpy) arrays: the loop reads them on the host, and keys made from them are not committed
    to one device, whatever mesh the policy lives on."""

    params: Any
    opt_state: Any
    ref_params: Any
    step: jax.Array
    rng: jax.Array

    @property
    def step_int(self) -> int:
        return int(self.step)

    def step_key(self, step: int) -> jax.Array:
        """The PRNG key of RL step ``step`` (the same on every host and after a resume)."""
        return jax.random.fold_in(jax.random.wrap_key_data(jnp.asarray(self.rng)), step)


class HostState(NamedTuple):
    """What a checkpoint keeps besides the arrays: plain JSON of the host-side components."""

    scheduler: dict[str, Any]
    controller: dict[str, Any]


def root_rng(seed: int) -> np.ndarray:
    return np.asarray(jax.random.key_data(jax.random.key(seed)))


def to_pure(state: TrainState) -> dict[str, Any]:
    """The checkpointed tree: nnx states as pure dicts (no Variable wrappers on disk). With LoRA
    adapters only the trainable part (adapters, value head) is kept: the frozen base is the
    model as built (model.path or the preset's seeded init)."""
    kept = params_and_rest(state.params)[0] if has_adapters(state.params) else state.params
    tree = {"params": nnx.to_pure_dict(kept), "opt_state": state.opt_state,
            "step": state.step, "rng": state.rng}
    if state.ref_params is not None:
        tree["ref_params"] = nnx.to_pure_dict(state.ref_params)
    return tree


def from_pure(tree: dict[str, Any], like: TrainState, shardings: Any) -> TrainState:
    """A TrainState with ``like``'s structure holding a restored pure tree, placed with
    ``shardings`` (a `TrainShardings`)."""

    def placed(params: dict[str, Any]) -> nnx.State:
        state = jax.tree.map(lambda x: x, like.params)
        nnx.replace_by_pure_dict(state, params)
        return jax.device_put(state, shardings.state)

    return TrainState(
        params=placed(tree["params"]),
        opt_state=jax.device_put(tree["opt_state"], shardings.opt_state),
        ref_params=placed(tree["ref_params"]) if "ref_params" in tree else None,
        step=np.asarray(tree["step"], np.int32),
        rng=np.asarray(tree["rng"], np.uint32))


def with_reference(state: TrainState, needed: bool) -> TrainState:
    """Snapshots the current policy as the KL reference (a copy: the update donates params).
    With LoRA adapters nothing is copied: the reference is the base model (`reference_state`)."""
    if not needed or has_adapters(state.params):
        return state.replace(ref_params=None)
    return state.replace(ref_params=jax.tree.map(lambda x: x.copy(), state.params))


def reference_state(state: TrainState, needed: bool) -> nnx.State | None:
    """The KL reference's model state: the snapshot, or with LoRA adapters the policy's own
    state with every adapter's B set to zero (its output x A B is then exactly 0: the base
    model); None when no KL is penalised."""
    if not needed:
        return None
    if state.ref_params is not None or not has_adapters(state.params):
        return state.ref_params
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if _is_lora_b(path) else x, state.params)


def _is_lora_b(path) -> bool:
    return any(getattr(k, "key", None) == "lora_b" for k in path)


def save(checkpointer: Checkpointer, state: TrainState, host: HostState, *,
         force: bool = False) -> bool:
    return checkpointer.maybe_save(state.step_int, to_pure(state), host._asdict(), force=force)


def restore(checkpointer: Checkpointer, like: TrainState,
            shardings: Any) -> tuple[TrainState, HostState] | None:
    """The newest intact checkpoint as (state, host state), or None for a fresh run; newer ones
    that do not restore are moved aside (`Checkpointer.restore_latest`)."""
    restored = checkpointer.restore_latest(to_pure(like), set_aside=True)
    if restored is None:
        return None
    meta = restored.meta
    host = HostState(scheduler=meta.get("scheduler", {}), controller=meta.get("controller", {}))
    return from_pure(restored.state, like, shardings), host


def restore_params(directory: str, like: nnx.State, shardings: Any) -> tuple[nnx.State, int]:
    """The policy parameters (and step) of the newest intact checkpoint of a run directory or a
    checkpoints directory, placed like ``like`` with ``shardings`` (the model state's); nothing
    else of the checkpoint is read. With LoRA adapters the checkpoint holds only the trainable
    part (`to_pure`): ``like`` must then be the model as built, whose base weights are kept."""
    if os.path.isdir(os.path.join(directory, "checkpoints")):
        directory = os.path.join(directory, "checkpoints")
    stored = params_and_rest(like)[0] if has_adapters(like) else like
    with Checkpointer(directory, every_steps=1, keep=1, async_save=False) as source:
        restored = source.restore_latest({"params": nnx.to_pure_dict(stored)}, partial=True)
    if restored is None:
        raise FileNotFoundError(f"{directory!r}: no restorable checkpoint there")
    params = jax.tree.map(lambda x: x, like)
    nnx.replace_by_pure_dict(params, restored.state["params"])
    missing = [jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_leaves_with_path(params)
               if isinstance(x, jax.ShapeDtypeStruct)]
    if missing:
        raise UserError(f"{directory!r}: the checkpoint holds no {missing[0]} (and "
                        f"{len(missing) - 1} more parameters) of the model as configured; a "
                        f"LoRA run's checkpoint holds only its adapters: use the run's "
                        f"model.lora_rank")
    return jax.device_put(params, shardings), restored.step
