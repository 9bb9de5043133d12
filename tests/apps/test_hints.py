"""Policy hints share the serving worker's queue with chat: one upload's hints are budgeted
(in flight, count, time), so other clients keep room and the upload always returns."""

import threading
import time
from types import SimpleNamespace

from agentic_jax.apps.hints import hint_slots, policy_hint_fn
from agentic_jax.apps.homework import HomeworkRow


class _Worker:
    """A `HintWorker`; a thread finishes one job per ``step_s`` (or none with
    ``step_s=None``), and the most jobs queued at once is recorded."""

    def __init__(self, max_queue: int, step_s: float | None = 0.002):
        self.max_queue, self.max_length = max_queue, 512
        self.queue, self.most_queued, self.lock = [], 0, threading.Lock()
        if step_s is not None:
            threading.Thread(target=self._finish, args=(step_s,), daemon=True).start()

    def prompt(self, question):
        return [1, 2]

    def decode(self, tokens):
        return "a hint"

    def submit(self, prompt, sampling, max_new_tokens, on_finish):
        with self.lock:
            if len(self.queue) >= self.max_queue:
                return None
            self.queue.append(on_finish)
            self.most_queued = max(self.most_queued, len(self.queue))
        return SimpleNamespace(cancel=lambda: None)

    def _finish(self, step_s):
        while True:
            time.sleep(step_s)
            with self.lock:
                on_finish = self.queue.pop(0) if self.queue else None
            if on_finish is not None:
                on_finish([SimpleNamespace(response_tokens=[1])], None)


def _wrong_rows(n):
    graded = [SimpleNamespace(failing_check="", code_diagnosis="", answer="3")] * n
    return graded, [HomeworkRow(i + 1, question="1+1?") for i in range(n)]


def _run_bounded(fn, *args, limit_s=5.0):
    """fn(*args) in a thread: its result, or a failure when it is still running at limit_s."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert out, f"still running after {limit_s} s"
    return out[0]


def test_an_upload_holds_at_most_a_quarter_of_the_queue():
    worker = _Worker(max_queue=8)
    hints = _run_bounded(policy_hint_fn(worker), *_wrong_rows(60))
    assert hints == ["a hint"] * 60
    assert worker.most_queued <= 2  # chat requests always found 6 free slots


def test_concurrent_uploads_share_one_quarter_of_the_queue():
    worker = _Worker(max_queue=8)
    slots = hint_slots(worker)
    uploads = [policy_hint_fn(worker, slots=slots) for _ in range(4)]
    results = []
    threads = [threading.Thread(target=lambda h=h: results.append(h(*_wrong_rows(30))))
               for h in uploads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [["a hint"] * 30] * 4
    assert worker.most_queued <= 2


def test_hints_past_the_count_or_time_budget_are_named_not_waited_for():
    hints = _run_bounded(policy_hint_fn(_Worker(max_queue=8), max_hints=3), *_wrong_rows(10))
    assert hints[:3] == ["a hint"] * 3
    assert hints[3:] == ["(no hint: at most 3 hints per upload)"] * 7
    # A worker that never finishes (busy with others' long requests): the upload still returns.
    start = time.monotonic()
    stuck = policy_hint_fn(_Worker(max_queue=8, step_s=None), time_budget_s=0.3)
    hints = _run_bounded(stuck, *_wrong_rows(10))
    assert time.monotonic() - start < 2.0
    assert hints == ["(no hint: the upload's 0.3 s for hints ran out)"] * 10
