"""Correction hints written by the policy for wrong homework answers, through the serving
worker (which owns the engine and batches the hints with whatever else it serves)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import threading
import time
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from agentic_jax.apps.homework import HomeworkRow

HINT_TEMPERATURE = 0.0
MAX_QUESTION_CHARS = 1000
MAX_HINTS = 256  # hints written for one upload; later wrong rows get none
HINT_BUDGET_S = 120.0  # wall time one upload's hints may take, queueing included


def hint_question(graded: Any, row: HomeworkRow) -> str:
    """The question the policy answers for one wrong row."""
    why = graded.failing_check or graded.code_diagnosis or "it differs from the reference"
    return (f"{row.question[:MAX_QUESTION_CHARS]}\nA student answered {graded.answer!r}, "
            f"which is wrong ({why}). "
            "Explain the mistake in one or two sentences and show the correct method.")


def hint_slots(worker: Any) -> threading.BoundedSemaphore:
    """Hint jobs allowed in ``worker``'s queue at once: a quarter of it, so that chat requests
    always find the rest. A server shares one across all uploads."""
    return threading.BoundedSemaphore(max(1, worker.limits.max_queue // 4))


def policy_hint_fn(worker: Any, max_tokens: int = 96, max_hints: int | None = MAX_HINTS,
                   time_budget_s: float | None = HINT_BUDGET_S,
                   slots: threading.BoundedSemaphore | None = None):
    """A `grade_rows` hint function: one greedy episode per wrong row on ``worker`` (a
    `agentic_jax.serve.RolloutWorker`); the hint is the episode's transcript.

    One call is one upload, and the worker's queue is shared with every other client, so an
    upload gets a budget: each hint holds one of ``slots`` (default: `hint_slots` of its own)
    while queued or running, at most ``max_hints`` hints, and ``time_budget_s`` seconds in all
    (None: no bound, for the command line's own worker). Rows past the budget get
    "(no hint: ...)" saying which bound they met."""
    from agentic_jax.rollout import SamplingParams
    from agentic_jax.serve.chat import chat_prompt
    from agentic_jax.serve.worker import Job

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
            prompt = chat_prompt(worker.policy, [{"role": "user",
                                                  "content": hint_question(g, row)}])
            prompt = prompt[-(worker.max_length - 1):]
            job = Job(prompt=prompt, n=1, sampling=SamplingParams(temperature=HINT_TEMPERATURE),
                      max_new_tokens=max(1, min(max_tokens, worker.max_length - len(prompt))),
                      on_update=lambda *_: None,
                      on_finish=lambda eps, err, f=future: _finish(f, slots, eps, err))
            ticket = _submit(worker, job, slots, deadline)
            pending.append((future, ticket) if ticket is not None
                           else _OVER_TIME.format(time_budget_s))
        return [p if isinstance(p, str) else _hint_result(worker, *p, deadline, max_tokens,
                                                          time_budget_s) for p in pending]

    return hints


_OVER_TIME = "(no hint: the upload's {:g} s for hints ran out)"
# A worker whose submit returns no ticket (nothing to cancel).
_NO_TICKET = SimpleNamespace(cancel=lambda: None)


def _finish(future: cf.Future, slots: threading.BoundedSemaphore, episodes, error) -> None:
    slots.release()
    future.set_result((episodes, error))


def _submit(worker: Any, job: Any, slots: threading.BoundedSemaphore, deadline: float) -> Any:
    """Submits ``job`` holding one of ``slots`` (released when it finishes), waiting for a slot
    and for room in the queue until ``deadline`` at most; its ticket, or None when it could
    not."""
    from agentic_jax.serve.worker import QueueFull

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not slots.acquire(timeout=min(left, 1.0)):
            continue
        try:
            return worker.submit(job) or _NO_TICKET
        except QueueFull:  # other clients' requests fill it: wait, then try again
            slots.release()
            time.sleep(min(left, 0.05))
        except BaseException:
            slots.release()
            raise


def _hint_result(worker: Any, future: cf.Future, ticket: Any, deadline: float,
                 max_tokens: int, time_budget_s: float | None) -> str:
    try:
        left = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
        episodes, error = future.result(timeout=left)
    except cf.TimeoutError:
        ticket.cancel()  # its episode stops using the engine now
        return _OVER_TIME.format(time_budget_s)
    return _hint_text(worker, episodes, error, max_tokens)


def _hint_text(worker: Any, episodes, error, max_tokens: int) -> str:
    if error is not None:
        return f"(no hint: {type(error).__name__})"
    tokens = episodes[0].response_tokens[:max_tokens]
    return worker.policy.tokenizer.decode(tokens, skip_special_tokens=True).strip()


@contextlib.contextmanager
def hint_session(workdir: str | None, max_tokens: int) -> Iterator[Any]:
    """A hint function backed by ``workdir``'s policy for the block (None without a run)."""
    if not workdir:
        yield None
        return
    from agentic_jax.serve.loading import load_policy
    from agentic_jax.serve.schema import ServeLimits
    from agentic_jax.serve.worker import RolloutWorker

    loaded = load_policy(None, workdir)
    worker = RolloutWorker(loaded.policy, ServeLimits(max_queue=1024))
    try:
        yield policy_hint_fn(worker, max_tokens, max_hints=None, time_budget_s=None)
    finally:
        worker.close()
        loaded.policy.close()
