"""Requests with different temperatures run in the engine together, and a request's seed fixes
its reply whatever else runs beside it."""

import concurrent.futures as cf

import httpx

from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import live_server

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def _post(url, body):
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def test_mixed_temperatures_share_a_run_and_seeds_repeat(tiny_policy):
    limits = ServeLimits(max_batch_rows=4, max_tokens=16, batch_wait_ms=1500)
    seeded = {"messages": MESSAGES, "max_tokens": 10, "temperature": 1.0, "seed": 5}
    with live_server(tiny_policy, limits) as (url, _service):
        alone = _post(url, dict(seeded, max_tokens=10))
        others = [dict(seeded, temperature=t, seed=None) for t in (0.0, 0.5, 1.5)]
        with cf.ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda body: _post(url, body), [seeded] + others))
        stats = httpx.get(f"{url}/health").json()["worker"]
    assert replies[0] == alone
    # Four requests with four temperatures enter the engine together (the first was `alone`).
    assert stats["admissions"] == 2 and stats["recent_admissions"] == [1, 4]
