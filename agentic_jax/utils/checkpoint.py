"""Checkpoints with orbax: async saves every N steps, keep the newest K, resume from the newest
intact one.

A checkpoint holds two items: ``state`` (a pytree of arrays: parameters, optimizer state, RNG
keys, step) and ``meta`` (plain JSON: data and curriculum position, controller state, config
fingerprint). orbax writes each step into a temporary directory and renames it when complete,
so a process killed mid-save leaves the previous checkpoint untouched; a newest checkpoint that
is corrupted anyway (truncated files, bad metadata) is reported and skipped in favour of the
newest intact one, and with ``set_aside`` moved to ``checkpoints.corrupt/`` so that no later
restore or cleanup counts it as a checkpoint.

A save that fails (a full disk, a quota) raises `CheckpointSaveError`, one line naming the
cause, from `maybe_save` (or, saving in the background, from the next `check`, `wait` or
`close`); its temporary directory is removed and the previous checkpoints are kept. orbax's
own tracebacks of that failure (hundreds of lines from its writer threads) are not logged.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import orbax.checkpoint as ocp

from agentic_jax.errors import UserError

logger = logging.getLogger(__name__)
CORRUPT_SUFFIX = ".corrupt"
_OS_ERROR = re.compile(r"\[os_error_code='(\d+)'\]")
_STATUS = re.compile(r"^([A-Z][A-Z_]+): ")


# After a failed save, `Checkpointer.close` removes its temporary directory until none has
# come back for SETTLE_S seconds (at most SETTLE_MAX_S).
SETTLE_S, SETTLE_MAX_S = 0.5, 5.0


class CheckpointSaveError(UserError):
    """A checkpoint could not be written; the message names the cause in one line."""


class NoRestorableCheckpoint(UserError):
    """Checkpoints exist, yet none of them restores."""


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
            # The step's temporary directory is made before its writes start, not by a future
            # of its own: a save that fails at once then leaves no directory-making future
            # behind to recreate what `_save_failed` has just removed.
            async_options=ocp.options.AsyncOptions(create_directories_asynchronously=False),
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        self._async = async_save
        self._in_flight: int | None = None   # the step a background save is writing
        self._failed = False
        _quiet_orbax_tracebacks()

    def all_steps(self) -> list[int]:
        """The steps on disk now (re-read: another process may have saved or removed one)."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def maybe_save(
        self, step: int, state: Any, meta: dict[str, Any], *, force: bool = False
    ) -> bool:
        """Saves when ``step`` is a multiple of ``every_steps`` (or ``force``); True if it saved."""
        if not force and step % self.every_steps != 0:
            return False
        if step in self._manager.all_steps():
            return False
        if self._in_flight is not None:  # its failure is its own, not this step's
            self.wait()
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    meta=ocp.args.JsonSave(meta),
                ),
                force=True,
            )
        except Exception as err:  # noqa: BLE001 - whatever failed, the run must stop here
            raise self._save_failed(step, err) from None
        self._in_flight = step if self._async else None
        return True

    def check(self) -> None:
        """Raises `CheckpointSaveError` when a background save has failed (without waiting
        for one still running)."""
        if self._in_flight is not None and not self._manager.is_saving_in_progress():
            self.wait()

    def _save_failed(self, step: int | None, err: BaseException) -> CheckpointSaveError:
        """The one-line error of a failed save; its partial directory is removed first (it
        holds disk space, and orbax would trip over it at the next save)."""
        self._failed, self._in_flight = True, None
        _mute_failed_save_leftovers()
        self._remove_partial_saves()
        kept = [s for s in self.all_steps() if s != step]
        what = "a checkpoint" if step is None else f"the checkpoint of step {step}"
        return CheckpointSaveError(
            f"saving {what} in {self.directory} failed: {cause(err)}"
            + (f" (step {kept[-1]}'s checkpoint is intact)" if kept else ""))

    def _remove_partial_saves(self) -> bool:
        """Removes the temporary directories of unfinished saves (process 0 removes them);
        whether there was one."""
        found = []
        if jax.process_index() == 0:
            found = glob.glob(os.path.join(self.directory, "*.orbax-checkpoint-tmp*"))
            for partial in found:
                shutil.rmtree(partial, ignore_errors=True)
        return bool(found)

    def restore_latest(self, abstract_state: Any, *, partial: bool = False,
                       set_aside: bool = False) -> Restored | None:
        """Restores the newest checkpoint that loads, or None when there is none.

        Args:
          abstract_state: a pytree of `jax.ShapeDtypeStruct` (with shardings) or arrays giving the
            structure, dtypes and placement to restore into.
          partial: restore only the subtrees ``abstract_state`` names (e.g. just the policy
            parameters of a full training state); the rest is not read.
          set_aside: move checkpoints newer than the one restored, which failed to restore, to
            ``checkpoints.corrupt/``; when none restores, raise `NoRestorableCheckpoint` (then
            nothing is moved: a mismatch of every checkpoint is no proof of corruption).
        """
        self._manager.reload()
        abstract = jax.tree.map(_as_abstract, abstract_state)
        if partial:
            state_args = ocp.args.PyTreeRestore(
                item=abstract, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
                partial_restore=True)
        else:
            state_args = ocp.args.StandardRestore(abstract)
        failed: list[tuple[int, str]] = []
        for step in sorted(self._manager.all_steps(), reverse=True):  # reloaded above
            try:
                restored = self._manager.restore(
                    step, args=ocp.args.Composite(state=state_args, meta=ocp.args.JsonRestore()))
            except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
                failed.append((step, f"{type(e).__name__}: {cause(e)}"))
                logger.warning("checkpoint at step %d in %s cannot be restored (%s); trying an "
                               "older one", step, self.directory, failed[-1][1])
                continue
            if set_aside:
                for bad, _ in failed:
                    self._set_aside(bad)
            return Restored(step=step, state=restored["state"], meta=dict(restored["meta"] or {}))
        if failed and set_aside:
            raise NoRestorableCheckpoint(
                f"{self.directory}: none of its {len(failed)} checkpoints restores (step "
                f"{failed[0][0]}: {failed[0][1]}); move the directory aside to start afresh")
        return None

    def _set_aside(self, step: int) -> None:
        """Moves step ``step``'s directory to ``checkpoints.corrupt/`` (process 0 moves it)."""
        if jax.process_index() == 0:
            aside = self.directory + CORRUPT_SUFFIX
            target = os.path.join(aside, str(step))
            if os.path.exists(target):
                target += f"-{int(time.time())}"
            os.makedirs(aside, exist_ok=True)
            shutil.move(os.path.join(self.directory, str(step)), target)
            logger.warning("moved the checkpoint of step %d, which does not restore, to %s",
                           step, target)
        self._manager.reload()

    def wait(self) -> None:
        """Blocks until pending async saves are on disk; `CheckpointSaveError` if one failed."""
        step = self._in_flight
        try:
            self._manager.wait_until_finished()
        except Exception as err:  # noqa: BLE001 - a background save failed
            raise self._save_failed(step, err) from None
        self._in_flight = None

    def close(self) -> None:
        try:
            if not self._failed:  # a failed save was raised once already
                self.wait()
        finally:
            try:
                self._manager.close()
            except Exception:  # noqa: BLE001 - the failed save again
                if not self._failed:
                    raise
            finally:
                if self._failed:
                    # A failed save's other writers may go on after the error was raised, and
                    # after the manager closed, and leave its temporary directory again:
                    # removed until none has come back for SETTLE_S (at most SETTLE_MAX_S).
                    deadline = quiet = time.monotonic()
                    deadline += SETTLE_MAX_S
                    while time.monotonic() - quiet < SETTLE_S and time.monotonic() < deadline:
                        if self._remove_partial_saves():
                            quiet = time.monotonic()
                        time.sleep(0.05)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cause(err: BaseException) -> str:
    """The reason an orbax / tensorstore error gives, in one line: "RESOURCE_EXHAUSTED: No
    space left on device (errno 28)" rather than its paths and byte counts. The reason is the
    system's for the error number: the text before tensorstore's ``[os_error_code=...]`` is
    not always it (a write that hit the file-size limit ended in a JSON spec)."""
    text = str(err).strip() or type(err).__name__
    found = _OS_ERROR.findall(text)
    if found:
        status = _STATUS.match(text)
        code = int(found[-1])
        return f"{status.group(1) + ': ' if status else ''}{os.strerror(code)} (errno {code})"
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror} (errno {err.errno})"
    line = text.splitlines()[0]
    return line if len(line) <= 300 else line[:297] + "..."


class _DropOrbaxTracebacks(logging.Filter):
    """orbax logs each failed save from every writer thread with a traceback; `Checkpointer`
    raises the failure itself in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from_orbax = f"{os.sep}orbax{os.sep}" in (record.pathname or "")
        return not (from_orbax and record.levelno >= logging.ERROR and record.exc_info)


def _quiet_orbax_tracebacks() -> None:
    absl_logger = logging.getLogger("absl")
    if not any(isinstance(f, _DropOrbaxTracebacks) for f in absl_logger.filters):
        absl_logger.addFilter(_DropOrbaxTracebacks())


class _FailedSaveLeftovers:
    """An ``unraisablehook`` for after a failed save: orbax's other writes of it finish in
    tensorstore's threads into an event loop already closed, and its unfinished coroutines are
    collected at exit; each would print a traceback ("Event loop is closed", dozens of them)
    after the one line that names the failure. Everything else goes to the previous hook."""

    def __init__(self, previous: Callable[[Any], None]):
        self.previous = previous
        self.marker = f"{os.sep}orbax{os.sep}"  # held here: module globals are gone at exit

    def __call__(self, unraisable: Any) -> None:
        if not self.from_orbax(unraisable):
            self.previous(unraisable)

    def from_orbax(self, unraisable: Any) -> bool:
        err = unraisable.exc_value
        if isinstance(err, RuntimeError) and str(err) == "Event loop is closed":
            return True
        code = getattr(unraisable.object, "cr_code", None)
        if code is not None and self.marker in code.co_filename:
            return True
        tb = unraisable.exc_traceback
        while tb is not None:
            if self.marker in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
        return False


def _mute_failed_save_leftovers() -> None:
    if not isinstance(sys.unraisablehook, _FailedSaveLeftovers):
        sys.unraisablehook = _FailedSaveLeftovers(sys.unraisablehook)


def _as_abstract(x: Any) -> Any:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x
