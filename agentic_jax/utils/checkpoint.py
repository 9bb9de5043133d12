"""Checkpoints with orbax: async saves every N steps, keep the newest K, resume from the newest
intact one.

A checkpoint holds two items: ``state`` (a pytree of arrays: parameters, optimizer state, RNG
keys, step) and ``meta`` (plain JSON: data and curriculum position, controller state, config
fingerprint). orbax writes each step into a temporary directory and renames it when complete,
so a process killed mid-save leaves the previous checkpoint untouched; a newest checkpoint that
is corrupted anyway (truncated files, bad metadata) is reported and skipped in favour of the
newest intact one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Restored:
    """What `Checkpointer.restore_latest` returns."""

    step: int
    state: Any
    meta: dict[str, Any]


class Checkpointer:
    """Thin wrapper over `orbax.checkpoint.CheckpointManager` for one training run.

    Args:
      directory: where checkpoints live (``WORKDIR/checkpoints``); created if missing.
      every_steps: `maybe_save` writes only on multiples of this.
      keep: how many of the newest checkpoints to keep.
      async_save: write in a background thread while training continues.
    """

    def __init__(
        self, directory: str, *, every_steps: int = 100, keep: int = 3, async_save: bool = True
    ):
        if every_steps <= 0:
            raise ValueError(
                f"checkpoint.every_steps must be a positive integer, got {every_steps}"
            )
        if keep <= 0:
            raise ValueError(f"checkpoint.keep must be a positive integer, got {keep}")
        self.directory = os.path.abspath(directory)
        self.every_steps = every_steps
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            enable_async_checkpointing=async_save,
            create=True,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps(read=True))

    def maybe_save(
        self, step: int, state: Any, meta: dict[str, Any], *, force: bool = False
    ) -> bool:
        """Saves when ``step`` is a multiple of ``every_steps`` (or ``force``); True if it saved."""
        if not force and step % self.every_steps != 0:
            return False
        if step in self._manager.all_steps():
            return False
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )
        return True

    def restore_latest(self, abstract_state: Any, *, partial: bool = False) -> Restored | None:
        """Restores the newest checkpoint that loads, or None when there is none.

        Args:
          abstract_state: a pytree of `jax.ShapeDtypeStruct` (with shardings) or arrays giving the
            structure, dtypes and placement to restore into.
          partial: restore only the subtrees ``abstract_state`` names (e.g. just the policy
            parameters of a full training state); the rest is not read.
        """
        self._manager.reload()
        abstract = jax.tree.map(_as_abstract, abstract_state)
        if partial:
            state_args = ocp.args.PyTreeRestore(
                item=abstract, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
                partial_restore=True)
        else:
            state_args = ocp.args.StandardRestore(abstract)
        for step in sorted(self._manager.all_steps(read=True), reverse=True):
            try:
                restored = self._manager.restore(
                    step, args=ocp.args.Composite(state=state_args, meta=ocp.args.JsonRestore()))
            except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
                logger.warning(
                    "checkpoint at step %d in %s cannot be restored (%s: %s); "
                    "trying an older one",
                    step,
                    self.directory,
                    type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "",
                )
                continue
            return Restored(step=step, state=restored["state"], meta=dict(restored["meta"] or {}))
        return None

    def wait(self) -> None:
        """Blocks until pending async saves are on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _as_abstract(x: Any) -> Any:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x
