"""The server's rollouts are one open loop: a short request finishes while a long one runs, and a
request whose client disconnects or whose time runs out leaves the engine at once."""

import concurrent.futures as cf
import json
import socket
import threading
import time

import httpx

from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import live_server

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]
# Greedy decoding of the tiny policy runs to the token limit on this prompt.
LONG = {"messages": MESSAGES, "max_tokens": 70, "temperature": 0}
SHORT = {"messages": MESSAGES, "max_tokens": 2, "temperature": 0}


def _post(url, body, timeout=120):
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def _until(predicate, limit_s=30.0):
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_short_request_finishes_while_a_long_one_runs(tiny_policy):
    with live_server(tiny_policy, ServeLimits(batch_wait_ms=0)) as (url, service):
        _post(url, LONG)                       # compiles what both requests use
        worker = service.worker
        step, steps, go = worker.service.step, [], threading.Event()

        def counted_step():                    # after the long one's first step, wait for `go`
            if len(steps) == 1:
                go.wait()
            elif len(steps) > 1:
                # The long one's remaining steps take a while: on a loaded machine the short
                # one's reply must not lose a race against a few milliseconds of decoding.
                time.sleep(0.2)
            steps.append(1)
            return step()

        with cf.ThreadPoolExecutor(2) as pool:
            steps.clear()
            worker.service.step = counted_step
            try:
                long = pool.submit(_post, url, LONG)
                _until(lambda: len(steps) == 1)          # the long one is decoding
                short = pool.submit(_post, url, SHORT)
                _until(lambda: worker.queued == 1)       # the short one waits to enter
            finally:
                go.set()
            assert short.result().status_code == 200
            assert not long.done(), "the short request waited for the long one"
            assert long.result().json()["usage"]["completion_tokens"] == 70
        assert short.result().json()["usage"]["completion_tokens"] == 2


def test_a_client_that_disconnects_cancels_its_episodes(tiny_policy):
    with live_server(tiny_policy, ServeLimits(batch_wait_ms=0)) as (url, service):
        engine = service.worker.policy.engine
        with httpx.stream("POST", f"{url}/v1/chat/completions",
                          json=dict(LONG, stream=True), timeout=60) as reply:
            next(reply.iter_lines())           # the episode is under way
        _until(lambda: service.worker.stats.cancelled == 1)
        _until(lambda: not engine.seqs and engine.pages_held == 0)
        # The server goes on serving.
        assert _post(url, SHORT).status_code == 200


def test_a_non_streaming_client_that_disconnects_cancels_its_episodes(tiny_policy):
    with live_server(tiny_policy, ServeLimits(batch_wait_ms=0)) as (url, service):
        worker = service.worker
        engine, step = worker.policy.engine, worker.service.step
        released = threading.Event()

        def held_step():   # the episode cannot finish before the disconnect is seen
            released.wait()
            return step()

        worker.service.step = held_step
        try:
            host, port = url.removeprefix("http://").split(":")
            body = json.dumps(LONG).encode()
            with socket.create_connection((host, int(port))) as conn:
                conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Content-Type: application/json\r\n"
                             + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                _until(lambda: worker.stats.requests == 1)   # its episode is admitted
            # The connection is closed before the reply.
            _until(lambda: worker.stats.cancelled == 1)
        finally:
            released.set()
        _until(lambda: not engine.seqs and engine.pages_held == 0)


def test_a_request_past_its_timeout_is_504_and_leaves_the_engine(tiny_policy):
    limits = ServeLimits(batch_wait_ms=0, request_timeout_s=0.5)
    with live_server(tiny_policy, limits) as (url, service):
        worker = service.worker
        engine, step = worker.policy.engine, worker.service.step
        released = threading.Event()

        def held_step():                       # the loop makes no progress until released
            released.wait()
            return step()

        worker.service.step = held_step
        try:
            reply = _post(url, LONG)
        finally:
            released.set()
        assert reply.status_code == 504 and "no reply within" in reply.text
        _until(lambda: worker.stats.cancelled == 1)
        _until(lambda: not engine.seqs and engine.pages_held == 0)
        assert worker.queued == 0
