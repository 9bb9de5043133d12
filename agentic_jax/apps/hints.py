"""Correction hints written by the policy for wrong homework answers, through the serving
worker (which owns the engine and batches the hints with whatever else it serves)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from agentic_jax.apps.homework import HomeworkRow

HINT_TEMPERATURE = 0.0
MAX_QUESTION_CHARS = 1000


def hint_question(graded: Any, row: HomeworkRow) -> str:
    """The question the policy answers for one wrong row."""
    why = graded.failing_check or graded.code_diagnosis or "it differs from the reference"
    return (f"{row.question[:MAX_QUESTION_CHARS]}\nA student answered {graded.answer!r}, "
            f"which is wrong ({why}). "
            "Explain the mistake in one or two sentences and show the correct method.")


def policy_hint_fn(worker: Any, max_tokens: int = 96):
    """A `grade_rows` hint function: one greedy episode per wrong row on ``worker`` (a
    `agentic_jax.serve.BatchWorker`), submitted as the queue allows; the hint is the episode's
    transcript."""
    from agentic_jax.rollout import SamplingParams
    from agentic_jax.serve.chat import chat_prompt
    from agentic_jax.serve.worker import Job, QueueFull

    def hints(graded: Sequence[Any], rows: Sequence[HomeworkRow]) -> list[str]:
        futures: list[cf.Future] = []
        for g, row in zip(graded, rows):
            future: cf.Future = cf.Future()
            prompt = chat_prompt(worker.policy, [{"role": "user",
                                                  "content": hint_question(g, row)}])
            prompt = prompt[-(worker.max_length - 1):]
            job = Job(prompt=prompt, n=1, sampling=SamplingParams(temperature=HINT_TEMPERATURE),
                      max_new_tokens=max(1, min(max_tokens, worker.max_length - len(prompt))),
                      on_update=lambda *_: None,
                      on_finish=lambda eps, err, f=future: f.set_result((eps, err)))
            while True:
                try:
                    worker.submit(job)
                    break
                except QueueFull:  # wait for a hint (or another client's job) to finish
                    pending = [f for f in futures if not f.done()]
                    if pending:
                        cf.wait(pending, timeout=1.0, return_when=cf.FIRST_COMPLETED)
                    else:
                        time.sleep(0.05)
            futures.append(future)
        return [_hint_text(worker, *f.result(), max_tokens) for f in futures]

    return hints


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
        yield policy_hint_fn(worker, max_tokens)
    finally:
        worker.close()
        loaded.policy.close()
