"""Hostile requests answered before any model work: a 4xx with a one-line reason, never a 500.

The app runs without a policy (the checks refuse before a route reaches the worker), so these
tests need no model and no sandbox."""

import pytest
from fastapi.testclient import TestClient

from agentic_jax.serve import ServeLimits, Service, create_app
from agentic_jax.serve.tools_api import ToolResources

POST_ROUTES = ("/v1/chat/completions", "/api/grade", "/api/derivation", "/api/plot",
               "/api/practice/next", "/api/practice/answer")


@pytest.fixture(scope="module")
def client():
    service = Service(policy=None, worker=None, limits=ServeLimits(), model_name="none",
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
