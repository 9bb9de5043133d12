"""The worker's queue is shared between clients: lines served in turn, a share of the places
each, so one client's burst neither refuses nor long delays another's request."""

import concurrent.futures as cf
import threading
import time

import httpx

from agentic_jax.serve import ServeLimits
from agentic_jax.serve.fair_queue import FairQueue
from tests.serve.serve_testing import live_server

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def test_clients_are_served_in_turn():
    queue = FairQueue(max_queue=64)
    for i in range(4):
        queue.push("heavy", f"h{i}")
    queue.push("light", "l0")
    queue.push("other", "o0")
    order = []
    while queue.peek() is not None:
        order.append(queue.pop())
    assert order == ["h0", "l0", "o0", "h1", "h2", "h3"]
    assert len(queue) == 0


def test_one_client_never_holds_the_whole_queue():
    queue = FairQueue(max_queue=8)  # a quarter (2) is kept for clients that arrive
    for i in range(6):
        assert queue.refusal("heavy") is None
        queue.push("heavy", i)
    assert "your share of the queue" in queue.refusal("heavy")
    assert queue.share("light") == 3 and queue.refusal("light") is None
    queue.push("light", "a")
    queue.push("light", "b")
    assert queue.refusal("light") == "8 requests are queued; retry later"
    assert queue.remove("heavy", 0) and not queue.remove("heavy", 0)
    assert queue.refusal("heavy") is not None  # over its share of two (3 each)
    assert sorted(map(str, queue.drain())) == ["1", "2", "3", "4", "5", "a", "b"]
    assert len(queue) == 0 and queue.peek() is None


def test_a_queue_of_one_place_takes_one_job():
    queue = FairQueue(max_queue=1)
    assert queue.share("a") == 1 and queue.refusal("a") is None
    queue.push("a", 0)
    assert queue.refusal("a") is not None and queue.refusal("b") is not None


def _chat(url, key, results, max_tokens=16):
    start = time.monotonic()
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=300,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"messages": MESSAGES, "max_tokens": max_tokens, "seed": 0})
    results.append((key, reply.status_code, start, time.monotonic()))
    return reply


def test_a_burst_of_one_client_neither_refuses_nor_long_delays_another(tiny_policy):
    # One episode runs at a time; the heavy client sends 12 requests at once, more than the
    # 8 places: without sharing, the light client's request would be refused (429) or wait
    # behind all of them.
    limits = ServeLimits(max_tokens=16, max_batch_rows=1, max_queue=8, batch_wait_ms=0,
                         request_timeout_s=300)
    results = []
    with live_server(tiny_policy, limits) as (url, service):
        # The engine's first step waits until the light request is queued: the heavy requests
        # queue up however fast the tiny model decodes, and however slowly a loaded machine
        # lets the light one in, it finds the heavy one it arrived behind still running.
        rollout, step = service.worker.service, service.worker.service.step
        light_queued = threading.Event()

        def gated_step(*args, **kwargs):
            light_queued.wait(120)
            return step(*args, **kwargs)

        rollout.step = gated_step
        deadline = time.monotonic() + 120
        with cf.ThreadPoolExecutor(13) as pool:
            heavy = [pool.submit(_chat, url, "heavy", results) for _ in range(12)]
            # Every heavy request running (one), queued or refused before the light one comes.
            while (service.worker.queued + sum(r[1] == 429 for r in results) < 11
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            queued = service.worker.queued
            pending_light = pool.submit(_chat, url, "light", results)
            while service.worker.queued <= queued and time.monotonic() < deadline:
                time.sleep(0.01)
            light_queued.set()
            light = pending_light.result()
            codes = [f.result().status_code for f in heavy]
    assert light.status_code == 200, light.text
    assert codes.count(429) >= 4 and codes.count(200) >= 6  # its own share: 6 + 1 running
    refused = [r for r in results if r[0] == "heavy" and r[1] == 429]
    assert all("your share of the queue" in f.result().json()["error"]["message"]
               for f in heavy if f.result().status_code == 429), refused
    light_end = next(end for key, _, _, end in results if key == "light")
    before = [end for key, code, _, end in results
              if key == "heavy" and code == 200 and end < light_end]
    # The heavy request running when it arrived and at most one more of its queue (its turn).
    assert len(before) <= 2, len(before)
