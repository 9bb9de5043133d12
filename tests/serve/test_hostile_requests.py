"""Hostile requests answered before any model work: a 4xx with a one-line reason, never a 500.

The app runs without a policy (the checks refuse before a route reaches the worker), so these
tests need no model and no sandbox."""

import json
import threading
import types

import pytest
from fastapi.testclient import TestClient

from agentic_jax.serve import ServeLimits, Service, completions, create_app
from agentic_jax.serve.boundary import allowed_hosts
from agentic_jax.serve.tools_api import ToolResources

POST_ROUTES = ("/v1/chat/completions", "/api/grade", "/api/derivation", "/api/plot",
               "/api/practice/next", "/api/practice/answer")


# A worker that has done nothing, for /health.
IDLE_WORKER = types.SimpleNamespace(queued=0, max_length=0,
                                    stats=types.SimpleNamespace(as_dict=dict))


@pytest.fixture(scope="module")
def client():
    service = Service(policy=None, worker=IDLE_WORKER, limits=ServeLimits(), model_name="none",
                      tools=ToolResources(None, None))
    with TestClient(create_app(service), base_url="http://127.0.0.1:8000",
                    raise_server_exceptions=False) as c:
        yield c


def _json_post(client, path, content, **headers):
    return client.post(path, content=content,
                       headers={"Content-Type": "application/json", **headers})


@pytest.mark.parametrize("path", POST_ROUTES)
@pytest.mark.parametrize("body", ["[" * 100_000, "[" * 900 + "]" * 900,
                                  '{"text": ' + "[" * 40 + "]" * 40 + "}"])
def test_deeply_nested_json_is_a_400(client, path, body):
    r = _json_post(client, path, body)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "nested" in message and "\n" not in message


@pytest.mark.parametrize("host, status", [
    ("127.0.0.1:8000", 200), ("localhost:8000", 200), ("[::1]:8000", 200), ("LOCALHOST", 200),
    ("attacker.example:8000", 421), ("127.0.0.1.attacker.example", 421), ("", 421),
])
def test_only_loopback_host_names_are_answered(client, host, status):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name, which is in Host."""
    r = client.get("/", headers={"Host": host})
    assert r.status_code == status
    if status != 200:
        assert "not a name this server answers to" in r.json()["error"]["message"]


def test_the_bound_address_and_named_hosts_are_answered():
    hosts = allowed_hosts("0.0.0.0", ["Box.lan"])
    assert hosts == {"localhost", "127.0.0.1", "::1", "box.lan"}
    assert "10.0.0.5" in allowed_hosts("10.0.0.5") and "::1" in allowed_hosts("[::1]")


@pytest.mark.parametrize("path", POST_ROUTES)
def test_a_post_from_another_site_is_refused_before_it_is_read(client, path):
    r = _json_post(client, path, "[" * 100, Origin="http://attacker.example")
    assert r.status_code == 403 and "another site" in r.json()["error"]["message"]
    for origin in ("null", "http://127.0.0.1:9999", "https://127.0.0.1:8000.attacker.example"):
        assert _json_post(client, path, "[]", Origin=origin).status_code == 403
    # The page's own origin passes the boundary (then the nested body is the route's 400).
    assert _json_post(client, path, "[" * 100, Origin="http://127.0.0.1:8000").status_code == 400


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_post_must_be_labelled_json(client, content_type):
    """text/plain and form posts need no CORS preflight, so any page can send them."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = client.post("/api/derivation", content='{"text": "x"}', headers=headers)
    assert r.status_code == 415 and "expected application/json" in r.json()["error"]["message"]
    charset = client.post("/api/derivation", content="[" * 100,
                          headers={"Content-Type": "application/json; charset=utf-8"})
    assert charset.status_code == 400


@pytest.mark.parametrize("path", POST_ROUTES)
def test_health_answers_while_a_large_body_is_parsed(client, monkeypatch, path):
    """A body over INLINE_PARSE_BYTES is parsed (and validated) in the thread pool: here the
    parse waits until /health has answered, which it could not while holding the event loop
    (it would give up after 10 s, and the test sees that it had to)."""
    parsing, answered, gave_up = threading.Event(), threading.Event(), []
    parse = completions.loads_bounded

    def parse_after_health(body):
        parsing.set()
        gave_up.append(not answered.wait(10))
        return parse(body)

    monkeypatch.setattr(completions, "loads_bounded", parse_after_health)
    body = json.dumps({"text": "x" * completions.INLINE_PARSE_BYTES, "learner": [1]})
    replies = []
    poster = threading.Thread(target=lambda: replies.append(_json_post(client, path, body)))
    poster.start()
    assert parsing.wait(10)
    health = client.get("/health")
    answered.set()
    poster.join()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert gave_up == [False]
    assert replies[0].status_code == 400  # the body itself is refused, as the route would


def test_a_small_body_is_parsed_on_the_event_loop(client, monkeypatch):
    """Below INLINE_PARSE_BYTES a thread hop would cost more than the parse."""
    threads = []
    parse = completions.loads_bounded

    def recording_parse(body):
        threads.append(threading.current_thread())
        return parse(body)

    monkeypatch.setattr(completions, "loads_bounded", recording_parse)
    for text in ("x", "x" * completions.INLINE_PARSE_BYTES):
        body = json.dumps({"text": text, "unknown": 1})
        assert _json_post(client, "/api/derivation", body).status_code == 400
    assert threads[0] is not threads[1]
