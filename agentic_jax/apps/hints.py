"""Correction hints written by the policy for wrong homework answers: in the server through a
`HintWorker` (the serving worker, which owns the engine and batches the hints with whatever
else it serves; `agentic_jax.serve.hints` adapts it), on the command line by a run's policy
opened here (`hint_session`)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from agentic_jax.apps.homework import HomeworkRow
from agentic_jax.rollout import SamplingParams

HINT_TEMPERATURE = 0.0
MAX_QUESTION_CHARS = 1000
MAX_HINTS = 256  # hints written for one upload; later wrong rows get none
HINT_BUDGET_S = 120.0  # wall time one upload's hints may take, queueing included


# on_finish(episodes, error): episodes in choice order, or None with the error.
FinishFn = Callable[[list[Any] | None, BaseException | None], None]


class Ticket(Protocol):
    def cancel(self) -> None:
        """Ends the hint's episode wherever it is (queued or running)."""


class HintWorker(Protocol):
    """What hints need of a worker that runs the policy's episodes for several clients."""

    max_length: int  # prompt + response tokens of one episode
    max_queue: int  # jobs its queue holds

    def prompt(self, question: str) -> list[int]:
        """The prompt tokens of ``question`` as a user message in the policy's template."""

    def submit(self, prompt: list[int], sampling: SamplingParams, max_new_tokens: int,
               on_finish: FinishFn) -> Ticket | None:
        """Queues one episode of ``prompt``; its ticket, or None while the queue is full."""

    def decode(self, tokens: Sequence[int]) -> str:
        """Response tokens as text, special tokens skipped."""


def hint_question(graded: Any, row: HomeworkRow) -> str:
    """The question the policy answers for one wrong row."""
    why = graded.failing_check or graded.code_diagnosis or "it differs from the reference"
    return (f"{row.question[:MAX_QUESTION_CHARS]}\nA student answered {graded.answer!r}, "
            f"which is wrong ({why}). "
            "Explain the mistake in one or two sentences and show the correct method.")


def hint_slots(worker: HintWorker) -> threading.BoundedSemaphore:
    """Hint jobs allowed in ``worker``'s queue at once: a quarter of it, so that chat requests
    always find the rest. A server shares one across all uploads."""
    return threading.BoundedSemaphore(max(1, worker.max_queue // 4))


def policy_hint_fn(worker: HintWorker, max_tokens: int = 96, max_hints: int | None = MAX_HINTS,
                   time_budget_s: float | None = HINT_BUDGET_S,
                   slots: threading.BoundedSemaphore | None = None):
    """A `grade_rows` hint function: one greedy episode per wrong row on ``worker``; the hint
    is the episode's transcript.

    One call is one upload, and the worker's queue is shared with every other client, so an
    upload gets a budget: each hint holds one of ``slots`` (default: `hint_slots` of its own)
    while queued or running, at most ``max_hints`` hints, and ``time_budget_s`` seconds in all
    (None: no bound, for the command line's own worker). Rows past the budget get
    "(no hint: ...)" saying which bound they met."""
    slots = hint_slots(worker) if slots is None else slots

    def hints(graded: Sequence[Any], rows: Sequence[HomeworkRow]) -> list[str]:
        deadline = math.inf if time_budget_s is None else time.monotonic() + time_budget_s
        # A hint on its way (its future and the worker's ticket), or why the row gets none.
        pending: list[tuple[cf.Future, Any] | str] = []
        for g, row in zip(graded, rows):
            if max_hints is not None and len(pending) >= max_hints:
                pending.append(f"(no hint: at most {max_hints} hints per upload)")
                continue
            future: cf.Future = cf.Future()
            prompt = worker.prompt(hint_question(g, row))[-(worker.max_length - 1):]
            job = (prompt, SamplingParams(temperature=HINT_TEMPERATURE),
                   max(1, min(max_tokens, worker.max_length - len(prompt))),
                   lambda eps, err, f=future: _finish(f, slots, eps, err))
            ticket = _submit(worker, job, slots, deadline)
            pending.append((future, ticket) if ticket is not None
                           else _OVER_TIME.format(time_budget_s))
        return [p if isinstance(p, str) else _hint_result(worker, *p, deadline, max_tokens,
                                                          time_budget_s) for p in pending]

    return hints


_OVER_TIME = "(no hint: the upload's {:g} s for hints ran out)"


def _finish(future: cf.Future, slots: threading.BoundedSemaphore, episodes, error) -> None:
    slots.release()
    future.set_result((episodes, error))


def _submit(worker: HintWorker, job: tuple, slots: threading.BoundedSemaphore,
            deadline: float) -> Ticket | None:
    """Submits ``job`` (`HintWorker.submit`'s arguments) holding one of ``slots`` (released
    when it finishes), waiting for a slot and for room in the queue until ``deadline`` at
    most; its ticket, or None when it could not."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not slots.acquire(timeout=min(left, 1.0)):
            continue
        try:
            ticket = worker.submit(*job)
        except BaseException:
            slots.release()
            raise
        if ticket is not None:
            return ticket
        slots.release()  # other clients' requests fill the queue: wait, then try again
        time.sleep(min(left, 0.05))


def _hint_result(worker: HintWorker, future: cf.Future, ticket: Any, deadline: float,
                 max_tokens: int, time_budget_s: float | None) -> str:
    try:
        left = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
        episodes, error = future.result(timeout=left)
    except cf.TimeoutError:
        ticket.cancel()  # its episode stops using the engine now
        return _OVER_TIME.format(time_budget_s)
    return _hint_text(worker, episodes, error, max_tokens)


def _hint_text(worker: HintWorker, episodes, error, max_tokens: int) -> str:
    if error is not None:
        return f"(no hint: {type(error).__name__})"
    return worker.decode(episodes[0].response_tokens[:max_tokens]).strip()


@contextlib.contextmanager
def hint_session(workdir: str | None, max_tokens: int) -> Iterator[Any]:
    """A hint function backed by ``workdir``'s policy for the block (None without a run): all
    of one call's hints run together as one batch of greedy episodes."""
    if not workdir:
        yield None
        return
    from agentic_jax.episodes.open import open_run

    policy = open_run(workdir=workdir)
    try:
        yield lambda graded, rows: _batch_hints(policy, graded, rows, max_tokens)
    finally:
        policy.close()


def _batch_hints(policy: Any, graded: Sequence[Any], rows: Sequence[HomeworkRow],
                 max_tokens: int) -> list[str]:
    """One greedy episode per row on ``policy`` (an `agentic_jax.inference.InferencePolicy`)
    with nothing else sharing its engine."""
    import jax

    from agentic_jax.rollout import RowSpec

    max_length = policy.agent_cfg.max_length
    specs = []
    for g, row in zip(graded, rows):
        question = hint_question(g, row)
        prompt = policy.chat_prompt([{"role": "user", "content": question}])
        prompt = prompt[-(max_length - 1):]
        specs.append(RowSpec(prompt, sampling=SamplingParams(temperature=HINT_TEMPERATURE),
                             max_length=min(max_length, len(prompt) + max_tokens)))
    if not specs:
        return []
    result = policy.agent(policy.controller("fixed")).run(specs, jax.random.key(0))
    return [_decode(policy, e.response_tokens[:max_tokens]) for e in result.episodes]


def _decode(policy: Any, tokens: Sequence[int]) -> str:
    return policy.tokenizer.decode(list(tokens), skip_special_tokens=True).strip()
