"""The serving worker as the apps' `agentic_jax.apps.hints.HintWorker`: hints share its queue
and its batches with chat requests, queued as the uploading client's jobs."""

from __future__ import annotations

from collections.abc import Sequence

from agentic_jax.rollout import SamplingParams
from agentic_jax.serve.fair_queue import LOCAL
from agentic_jax.serve.worker import Job, QueueFull, RolloutWorker, Ticket


class WorkerHints:
    """`HintWorker` over a `RolloutWorker`."""

    def __init__(self, worker: RolloutWorker, client: str = LOCAL):
        self.worker, self.client = worker, client

    @property
    def max_queue(self) -> int:
        return self.worker.limits.max_queue

    @property
    def max_length(self) -> int:
        return self.worker.max_length

    def prompt(self, question: str) -> list[int]:
        return self.worker.policy.chat_prompt([{"role": "user", "content": question}])

    def submit(self, prompt: list[int], sampling: SamplingParams, max_new_tokens: int,
               on_finish) -> Ticket | None:
        job = Job(prompt=prompt, n=1, sampling=sampling, max_new_tokens=max_new_tokens,
                  on_update=lambda *_: None, on_finish=on_finish, client=self.client)
        try:
            return self.worker.submit(job)
        except QueueFull:
            return None

    def decode(self, tokens: Sequence[int]) -> str:
        return self.worker.policy.tokenizer.decode(list(tokens), skip_special_tokens=True)
