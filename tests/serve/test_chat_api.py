"""The OpenAI-compatible API against a live server: replies, SSE streaming, shared batches and
bad input."""

import concurrent.futures as cf
import json
import time

import httpx
import pytest

from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import live_server

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def _post(url, body, **kwargs):
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120, **kwargs)


def test_health_and_models(server):
    url, _ = server
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny"
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"


def test_completion_has_the_transcript_and_usage(server):
    url, _ = server
    body = _post(url, {"messages": MESSAGES, "n": 2, "max_tokens": 12, "temperature": 1}).json()
    assert body["object"] == "chat.completion" and len(body["choices"]) == 2
    for i, choice in enumerate(body["choices"]):
        assert choice["index"] == i and choice["message"]["role"] == "assistant"
        assert choice["finish_reason"] in ("stop", "length")
        assert {"answer", "tool_calls", "tool_failures"} <= choice["tool_loop"].keys()
    usage = body["usage"]
    # The untrained policy runs past the limit: each choice keeps max_tokens tokens.
    assert usage["completion_tokens"] + usage["tool_output_tokens"] == 2 * 12
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_greedy_stream_matches_the_whole_reply(server):
    url, _ = server
    request = {"messages": MESSAGES, "max_tokens": 20, "temperature": 0}
    whole = _post(url, request).json()["choices"][0]
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=120,
                      json=dict(request, stream=True,
                                stream_options={"include_usage": True})) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["message"]["content"]
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert reasons[-1] == whole["finish_reason"] and reasons.count(None) == len(reasons) - 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


def test_stop_string_cuts_the_reply(server):
    url, _ = server
    request = {"messages": MESSAGES, "max_tokens": 30, "temperature": 0}
    text = _post(url, request).json()["choices"][0]["message"]["content"]
    stop = text[5:8]
    cut = _post(url, dict(request, stop=[stop])).json()["choices"][0]
    assert cut["message"]["content"] == text[:text.find(stop)]
    assert cut["finish_reason"] == "stop"


def test_concurrent_requests_share_one_batch(tiny_policy):
    limits = ServeLimits(max_batch_rows=4, max_tokens=16, batch_wait_ms=3000)
    with live_server(tiny_policy, limits) as (url, _service):
        request = {"messages": MESSAGES, "max_tokens": 8}
        with cf.ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda _: _post(url, request), range(4)))
        assert [r.status_code for r in replies] == [200] * 4
        stats = httpx.get(f"{url}/health").json()["worker"]
    # The rows filled up (4) before the wait ran out: all four entered the engine together.
    assert stats["admissions"] == 1 and stats["recent_admissions"] == [4]


@pytest.mark.parametrize("body, status, param", [
    ({"messages": []}, 400, "messages"),
    ({"messages": MESSAGES, "n": 5}, 400, "n"),
    ({"messages": MESSAGES, "n": 0}, 400, "n"),
    ({"messages": MESSAGES, "max_tokens": 65}, 400, "max_tokens"),
    ({"messages": MESSAGES, "temperature": "hot"}, 400, "temperature"),
    ({"messages": MESSAGES, "logit_bias": {"1": 2}}, 400, "logit_bias"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "hi " * 200}]}, 400, "messages"),
])
def test_bad_requests_get_openai_errors(server, body, status, param):
    url, _ = server
    r = _post(url, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].startswith(param)


def test_malformed_and_oversized_bodies(server):
    url, service = server
    json_type = {"Content-Type": "application/json"}
    r = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", headers=json_type,
                   timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/chat/completions", content=b"[1, 2]", headers=json_type,
                   timeout=30)
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    big = b" " * (service.limits.max_body_bytes + 1)
    assert httpx.post(f"{url}/v1/chat/completions", content=big, headers=json_type,
                      timeout=30).status_code == 413
    assert httpx.get(f"{url}/v2/nothing").json()["error"]["type"] == "not_found_error"


def test_a_full_queue_is_429_and_a_late_reply_is_504(tiny_policy):
    # The worker holds the first request for 1.5 s waiting for others to join its batch: the
    # queue (one place) is full meanwhile, and the first request's 0.5 s budget runs out.
    limits = ServeLimits(max_queue=1, batch_wait_ms=1500, request_timeout_s=0.5)
    with live_server(tiny_policy, limits) as (url, _):
        request = {"messages": MESSAGES, "max_tokens": 4}
        with cf.ThreadPoolExecutor(1) as pool:
            first = pool.submit(_post, url, request)
            time.sleep(0.2)
            second = _post(url, request)
            first = first.result()
    assert second.status_code == 429 and second.json()["error"]["type"] == "rate_limit_error"
    assert first.status_code == 504 and first.json()["error"]["type"] == "timeout_error"
