"""The page and its tools' JSON routes on a live server."""

import csv
import io
import json
import time

import httpx
import pytest

from agentic_jax.apps.plot import PNG_MAGIC
from agentic_jax.apps.practice import practice_pool
from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import live_server


@pytest.fixture(scope="module")
def url(tiny_policy):
    with live_server(tiny_policy, ServeLimits(max_tokens=32, batch_wait_ms=0)) as (base, _):
        yield base


def _post(url, path, body):
    return httpx.post(f"{url}{path}", json=body, timeout=120)


def test_the_page_has_the_five_tools(url):
    page = httpx.get(url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for tool in ("Solve", "Grade homework", "Check a derivation", "Plot", "Practice"):
        assert f">{tool}</button>" in page.text
    for route in ("/v1/chat/completions", "/api/grade", "/api/derivation", "/api/plot",
                  "/api/practice/next", "/api/practice/answer"):
        assert f'"{route}"' in page.text


def test_grade_returns_rows_and_a_csv_with_policy_hints(url):
    text = "\n".join(json.dumps(r) for r in [
        {"question": "1+1", "answer": "2", "student_answer": "2"},
        {"question": "1+1", "answer": "2", "student_answer": "3"},
        {"question": "1+1", "answer": "2", "student_code": "print(1/0)"}])
    data = _post(url, "/api/grade", {"text": text, "format": "jsonl", "hints": True}).json()
    assert data["summary"] == {"rows": 3, "correct": 1, "incorrect": 2, "error": 0}
    assert [r["verdict"] for r in data["rows"]] == ["correct", "incorrect", "incorrect"]
    assert data["rows"][1]["hint"] and not data["rows"][0]["hint"]  # written by the policy
    assert data["rows"][2]["code_error"] == "ZeroDivisionError"
    rows = list(csv.DictReader(io.StringIO(data["csv"])))
    assert [r["verdict"] for r in rows] == ["correct", "incorrect", "incorrect"]
    bad = _post(url, "/api/grade", {"text": "a,b\n1,2\n", "format": "csv"})
    assert bad.status_code == 400 and "student_answer" in bad.json()["error"]["message"]
    assert _post(url, "/api/grade", {"text": "", "format": "xls"}).status_code == 400


def test_grade_status_tells_all_partial_and_none_apart(url):
    good = json.dumps({"question": "1+1", "answer": "2", "student_answer": "2"})
    deep = "[" * 100_000 + "]" * 100_000
    whole = _post(url, "/api/grade", {"text": good, "format": "jsonl"})
    assert whole.status_code == 200 and whole.json()["status"] == "graded"
    assert whole.json()["errors"] == []
    partial = _post(url, "/api/grade", {"text": f"{good}\n{deep}\n{good}", "format": "jsonl"})
    assert partial.status_code == 207
    data = partial.json()
    assert data["status"] == "partial" and [r["verdict"] for r in data["rows"]] == [
        "correct", "error", "correct"]
    assert data["errors"] == [{"row": 2, "error": "not a JSON line (JSONDepthError: JSON nested "
                                                 "deeper than 32 levels)"}]
    for text in (deep, "", "\n\n"):  # no readable row: 422 naming the first problem
        none = _post(url, "/api/grade", {"text": text, "format": "jsonl"})
        assert none.status_code == 422, text[:10]
        error = none.json()["error"]
        assert error["param"] == "text" and error["message"].startswith("text: no r")
    assert "first: row 1: not a JSON line (JSONDepthError" in _post(
        url, "/api/grade", {"text": deep, "format": "jsonl"}).json()["error"]["message"]
    header_only = _post(url, "/api/grade", {"text": "question,answer,student_answer\n",
                                            "format": "csv"})
    assert header_only.status_code == 422
    assert header_only.json()["error"]["message"] == "text: no rows"


def test_derivation_route(url):
    data = _post(url, "/api/derivation", {"text": "(x+1)^2\n= x^2 + 2x + 1\n= x^2 + 1"}).json()
    assert not data["ok"] and data["first_invalid"] == 2
    assert [s["status"] for s in data["steps"]] == ["start", "valid", "invalid"]
    assert _post(url, "/api/derivation", {"text": " "}).status_code == 400
    start = time.monotonic()  # once minutes of one C call holding the GIL: /health froze too
    frozen = _post(url, "/api/derivation", {"text": "x = 10^{10^7}\nx = 1"})
    assert frozen.status_code == 200 and time.monotonic() - start < 5
    assert frozen.json()["first_invalid"] == 1


def test_plot_route_returns_a_png(url):
    r = _post(url, "/api/plot", {"text": "x^2; y = x", "xmin": -2, "xmax": 2})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert r.content.startswith(PNG_MAGIC)
    bad = _post(url, "/api/plot", {"text": "import os"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text"
    assert _post(url, "/api/plot", {"text": "x", "xmin": "a"}).status_code == 400
    huge = _post(url, "/api/plot", {"text": "10^4400 x"})  # once a 500 (printer ValueError)
    assert huge.status_code == 400 and "double precision" in huge.json()["error"]["message"]


def test_practice_routes_adapt_per_learner(url):
    first = _post(url, "/api/practice/next", {"learner": "ada"}).json()
    level = first["progress"]["levels"]["arithmetic"]
    for _ in range(3):
        problem = _post(url, "/api/practice/next", {"learner": "ada"}).json()["problem"]
        answer = _answer_of(problem["id"])
        data = _post(url, "/api/practice/answer", {"learner": "ada", "answer": answer}).json()
        assert data["feedback"]["correct"]
    assert data["progress"]["levels"]["arithmetic"] > level
    other = _post(url, "/api/practice/next", {"learner": "bob"}).json()
    assert other["progress"]["answered"] == 0
    assert _post(url, "/api/practice/next", {"learner": "no spaces"}).status_code == 400
    r = _post(url, "/api/practice/answer", {"learner": "carl", "answer": "1"})
    assert r.status_code == 400 and "no problem" in r.json()["error"]["message"]


def _answer_of(problem_id):
    return next(p.answer for p in practice_pool(0) if p.id == problem_id)
