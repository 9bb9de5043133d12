"""SIGTERM drains the server: requests in flight finish, new ones get 503, and it exits when
none is left or after drain_s, whichever is first."""

import concurrent.futures as cf
import signal
import socket
import threading
import time

import httpx
import uvicorn

from agentic_jax.serve import ServeLimits, Service, create_app
from agentic_jax.serve.drain import DrainingServer

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def _start(policy, drain_s):
    service = Service.start(policy, ServeLimits(max_tokens=64, max_batch_rows=1,
                                                batch_wait_ms=0))
    # Each engine step takes at least 0.25 s, so a request stays in flight long enough to be
    # seen there on a fast machine too (the tiny model decodes 64 tokens in milliseconds).
    rollout, step = service.worker.service, service.worker.service.step

    def slow_step(*args, **kwargs):
        time.sleep(0.25)
        return step(*args, **kwargs)

    rollout.step = slow_step
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = DrainingServer(uvicorn.Config(create_app(service), log_level="warning"),
                            service.drain, drain_s=drain_s)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", service, server, thread


def _wait_until(condition, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the requests were never in flight together"
        time.sleep(0.005)


def _chat(url, max_tokens):
    return httpx.post(f"{url}/v1/chat/completions", timeout=120,
                      json={"messages": MESSAGES, "max_tokens": max_tokens, "seed": 0})


def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(tiny_policy):
    url, service, server, thread = _start(tiny_policy, drain_s=60)
    try:
        assert _chat(url, 4).status_code == 200  # compiled before anything is timed
        with cf.ThreadPoolExecutor(2) as pool:
            running = [pool.submit(_chat, url, 48) for _ in range(2)]
            _wait_until(lambda: service.drain.in_flight >= 2)
            server.handle_exit(signal.SIGTERM, None)
            signalled = time.monotonic()
            refused = _chat(url, 4)
            health = httpx.get(f"{url}/health", timeout=30)
            replies = [f.result() for f in running]
        thread.join(timeout=60)
        exit_s = time.monotonic() - signalled
    finally:
        server.should_exit = True
        service.close()
    assert [r.status_code for r in replies] == [200, 200]  # both finished, one queued first
    assert all(r.json()["choices"][0]["message"]["content"] is not None for r in replies)
    assert refused.status_code == 503 and health.status_code == 503
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["message"].startswith("the server is shutting down")
    assert not thread.is_alive() and exit_s < 30, exit_s


def test_a_request_longer_than_the_drain_does_not_hold_the_exit(tiny_policy):
    url, service, server, thread = _start(tiny_policy, drain_s=0.5)
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            long = pool.submit(_chat, url, 64)
            _wait_until(lambda: service.drain.in_flight >= 1)
            server.handle_exit(signal.SIGTERM, None)
            signalled, in_flight = time.monotonic(), service.drain.in_flight
            thread.join(timeout=30)
            exit_s = time.monotonic() - signalled
            try:
                long.result(timeout=60)
            except httpx.HTTPError:
                pass  # cut off by the shutdown, as intended
    finally:
        server.should_exit = True
        service.close()
    # drain_s, then uvicorn's 2 s for the connections left.
    assert in_flight == 1
    assert not thread.is_alive() and exit_s < 0.5 + 2 + 3, exit_s
