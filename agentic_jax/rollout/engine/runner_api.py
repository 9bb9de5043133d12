"""What the scheduler asks of the device and what comes back: the `Runner` protocol
(`runner.ModelRunner` implements it; the scheduler's tests use a scripted fake), a prefill
chunk and a decode round trip's output. No JAX."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from agentic_jax.rollout.engine.sequences import Seq
from agentic_jax.rollout.engine.types import SamplingParams


class PrefillChunk(NamedTuple):
    """Context to write: ``tokens`` at positions [start, start + len(tokens)) of the sequence
    whose block table is ``pages``."""

    tokens: list[int]
    start: int
    pages: list[int]


class DecodeResult(NamedTuple):
    """One decode round trip; row i is the i-th running sequence handed to the runner.

    tokens: int32 [rows, steps]; logprobs, values: float32 [rows, steps] — row i's first
    count[i] entries are real. count: int32 [rows]. stopped: bool [rows], the row stopped on a
    stop or pause token. steps: decode steps the loop ran. rows: rows computed (running slots
    padded to the batch size, or to a larger compiled program's rows). top_logprobs float32 /
    top_ids int32 [rows, steps, K]: when a running request asks for top_logprobs, the K (>=
    what any asks) most likely tokens at each step, most likely first; else None. drafted /
    accepted int32 [rows]: with speculative decoding, the drafts verified and those emitted
    (else None). rented: the round trip ran on a larger compiled program than its own
    (`program_reuse`).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    values: np.ndarray
    count: np.ndarray
    stopped: np.ndarray
    steps: int
    rows: int
    top_logprobs: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    drafted: np.ndarray | None = None
    accepted: np.ndarray | None = None
    rented: bool = False


class Runner(Protocol):
    """The device work the scheduler asks for."""

    def key_data(self, key: Any) -> np.ndarray:
        """A request's PRNG key as uint32 key data (what `Seq.key_data` holds)."""

    def copy_pages(self, copies: list[tuple[int, int]]) -> None:
        """Copies the K/V of each (source, destination) page."""

    def prefill(self, chunks: list[PrefillChunk]) -> None:
        """Writes the K/V of each chunk's tokens into its pages."""

    def decode(self, running: list[Seq], *, stop_width: int, return_early: bool,
               sampling: SamplingParams, chunks: list[PrefillChunk] | None = None
               ) -> DecodeResult:
        """One decode round trip of ``running`` (read, not changed); ``return_early``: stop
        when a row finishes (requests wait for its slot); ``sampling``: for requests that set
        none of their own; ``stop_width``: at least each row's stop + pause token count;
        ``chunks`` (passed only with `EngineConfig.mixed_prefill`): prefill chunks whose K/V
        the round trip's first step writes."""
