"""Stopping a run on SIGTERM with its work saved, as orbax's ``reached_preemption`` and MaxText
do: a scheduler preempting the job sends SIGTERM, then SIGKILL after a grace period (30 s by
default in Kubernetes and Slurm).

    with StopSignal() as stop:
        while ...:
            state = step(state)
            if stop.requested():       # every process agrees on the same step
                save(state); raise stop.stopped(step, checkpoint_dir)

The handler only notes the signal: the step in flight finishes (a jitted update cannot be cut
short safely), its checkpoint is written, and the run exits with 128 + the signal's number
(143), the status of a process ended by SIGTERM. So the bound on the exit is the rest of one
step plus one checkpoint save. A second SIGTERM ends the process at once (the previous
checkpoint is intact, as after a SIGKILL).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from agentic_jax.parallel import agree


class RunStopped(SystemExit):
    """The run stopped on a signal after saving; ``code`` is 128 + the signal's number."""


class StopSignal:
    """Notes SIGTERM while entered (only in the main thread, where Python runs handlers)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)):
        self.signals = signals
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    def __enter__(self) -> StopSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _note(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        self.received = sig
        # A second one is not waited on: the previous handler (by default, death) takes it.
        signal.signal(sig, self._previous.get(sig, signal.SIG_DFL))

    def requested(self) -> bool:
        """Whether to stop after this step (process 0's answer on every process)."""
        return agree(self.received is not None)

    def stopped(self, step: int, checkpoints: str) -> RunStopped:
        sig = self.received or signal.SIGTERM
        print(f"stopped by {sig.name} after step {step}: its checkpoint is in {checkpoints}; "
              "rerun the same command to resume", flush=True)
        return RunStopped(128 + int(sig))
