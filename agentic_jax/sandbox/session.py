"""Per-episode sessions: the code blocks of one episode, optionally sharing one namespace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentic_jax.sandbox.types import ExecResult

if TYPE_CHECKING:
    from agentic_jax.sandbox.sandbox import Sandbox


class Session:
    """The code blocks of one episode, run through a `Sandbox`.

    stateful: a block sees the variables of the earlier blocks that succeeded, as in a
    notebook. Every block still runs in a fresh, clean child: the earlier successful blocks
    are replayed first with their output discarded, so no process ever holds state between
    calls. Replay re-executes code, so randomness and clocks are drawn anew, and a call costs
    the run time of the blocks before it. Without stateful, each block runs on its own.
    """

    def __init__(self, sandbox: Sandbox, stateful: bool) -> None:
        self.sandbox = sandbox
        self.stateful = stateful
        self.history: list[str] = []

    def run(self, code: str, timeout_ms: int | None = None) -> ExecResult:
        """Execute the next block of the episode."""
        result = self.sandbox.run(code, timeout_ms, self.history if self.stateful else ())
        if self.stateful and result.ok:
            self.history.append(code)
        return result
