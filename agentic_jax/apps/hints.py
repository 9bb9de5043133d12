"""Correction hints written by the policy for wrong homework answers, through the serving
worker (which owns the engine and batches the hints with whatever else it serves)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import time
from collections.abc import Iterator, Sequence
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


def policy_hint_fn(worker: Any, max_tokens: int = 96, max_hints: int | None = MAX_HINTS,
                   time_budget_s: float | None = HINT_BUDGET_S):
    """A `grade_rows` hint function: one greedy episode per wrong row on ``worker`` (a
    `agentic_jax.serve.BatchWorker`); the hint is the episode's transcript.

    One call is one upload, and the worker's queue is shared with every other client, so an
    upload gets a budget: at most a quarter of the queue in flight at once (chat requests
    keep the rest), at most ``max_hints`` hints, and ``time_budget_s`` seconds in all (None:
    no bound, for the command line's own worker). Rows past the budget get "(no hint: ...)"
    saying which bound they met."""
    from agentic_jax.rollout import SamplingParams
    from agentic_jax.serve.chat import chat_prompt
    from agentic_jax.serve.worker import Job

    in_flight = max(1, worker.limits.max_queue // 4)

    def hints(graded: Sequence[Any], rows: Sequence[HomeworkRow]) -> list[str]:
        deadline = math.inf if time_budget_s is None else time.monotonic() + time_budget_s
        slots: list[cf.Future | str] = []  # a pending hint, or why the row gets none
        active: list[cf.Future] = []  # this upload's hints not yet seen finished
        for g, row in zip(graded, rows):
            if max_hints is not None and len(slots) >= max_hints:
                slots.append(f"(no hint: at most {max_hints} hints per upload)")
                continue
            future: cf.Future = cf.Future()
            prompt = chat_prompt(worker.policy, [{"role": "user",
                                                  "content": hint_question(g, row)}])
            prompt = prompt[-(worker.max_length - 1):]
            job = Job(prompt=prompt, n=1, sampling=SamplingParams(temperature=HINT_TEMPERATURE),
                      max_new_tokens=max(1, min(max_tokens, worker.max_length - len(prompt))),
                      on_update=lambda *_: None,
                      on_finish=lambda eps, err, f=future: f.set_result((eps, err)))
            if _submit(worker, job, active, in_flight, deadline):
                active.append(future)
                slots.append(future)
            else:
                slots.append(_OVER_TIME.format(time_budget_s))
        return [s if isinstance(s, str) else _hint_result(worker, s, deadline, max_tokens,
                                                          time_budget_s) for s in slots]

    return hints


_OVER_TIME = "(no hint: the upload's {:g} s for hints ran out)"


def _submit(worker: Any, job: Any, active: list[cf.Future], in_flight: int,
            deadline: float) -> bool:
    """Submits ``job`` once fewer than ``in_flight`` of ``active`` are unfinished (finished
    ones are dropped from it) and the queue has room, waiting until ``deadline`` at most;
    False when it could not."""
    from agentic_jax.serve.worker import QueueFull

    while True:
        active[:] = [f for f in active if not f.done()]
        if len(active) < in_flight:
            try:
                worker.submit(job)
                return True
            except QueueFull:  # other clients' requests fill it: wait, then try again
                pass
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if active:
            cf.wait(active, timeout=min(left, 1.0), return_when=cf.FIRST_COMPLETED)
        else:
            time.sleep(min(left, 0.05))


def _hint_result(worker: Any, future: cf.Future, deadline: float, max_tokens: int,
                 time_budget_s: float | None) -> str:
    try:
        left = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
        episodes, error = future.result(timeout=left)
    except cf.TimeoutError:
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
    from agentic_jax.serve.worker import BatchWorker

    loaded = load_policy(None, workdir)
    worker = BatchWorker(loaded.policy, ServeLimits(max_queue=1024))
    try:
        yield policy_hint_fn(worker, max_tokens, max_hints=None, time_budget_s=None)
    finally:
        worker.close()
        loaded.policy.close()
