"""The server through the official `openai` SDK, as clients call it: chat, streaming, n, seed,
stop, the async client, content parts, the developer role, logprobs / top_logprobs (streamed
too), GET /v1/models/{id}, and every bad request a typed error with OpenAI's body (``code`` a
string or null)."""

import asyncio
import math

import httpx
import openai
import pytest

from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import live_server

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]
GREEDY = {"model": "tiny", "messages": MESSAGES, "max_tokens": 16, "temperature": 0}


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0,
                       timeout=120) as client:
        yield client


def _stream(client, **request):
    """The chunks of a streamed request."""
    return list(client.chat.completions.create(stream=True, **request))


def test_chat_n_seed_and_stop(client):
    reply = client.chat.completions.create(model="tiny", messages=MESSAGES, n=2, seed=7,
                                           max_tokens=12)
    assert [c.index for c in reply.choices] == [0, 1] and reply.model == "tiny"
    assert all(c.message.role == "assistant" and c.logprobs is None for c in reply.choices)
    again = client.chat.completions.create(model="tiny", messages=MESSAGES, n=2, seed=7,
                                           max_tokens=12)
    assert [c.message.content for c in again.choices] == \
        [c.message.content for c in reply.choices]
    text = client.chat.completions.create(**GREEDY).choices[0].message.content
    stop = text[4:7]
    cut = client.chat.completions.create(**GREEDY, stop=[stop]).choices[0]
    assert cut.message.content == text[:text.find(stop)] and cut.finish_reason == "stop"


def test_streaming_gives_the_reply_and_usage(client):
    whole = client.chat.completions.create(**GREEDY).choices[0]
    chunks = _stream(client, **GREEDY, stream_options={"include_usage": True})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.finish_reason
    assert chunks[-1].usage.completion_tokens > 0


def test_the_async_client_runs_requests_together(server):
    async def ask():
        async with openai.AsyncOpenAI(base_url=f"{server[0]}/v1", api_key="unused",
                                      max_retries=0, timeout=120) as client:
            return await asyncio.gather(*(client.chat.completions.create(**GREEDY)
                                          for _ in range(3)))

    replies = asyncio.run(ask())
    assert len({r.choices[0].message.content for r in replies}) == 1


def test_text_parts_and_the_developer_role_read_as_openai_reads_them(client):
    def reply(messages):
        return client.chat.completions.create(**dict(GREEDY, messages=messages)) \
            .choices[0].message.content

    parts = [{"type": "text", "text": "What is"}, {"type": "text", "text": "2 + 3?"}]
    assert reply([{"role": "user", "content": parts}]) == \
        reply([{"role": "user", "content": "What is\n2 + 3?"}])
    system = "Answer with a number."
    assert reply([{"role": "developer", "content": system}, *MESSAGES]) == \
        reply([{"role": "system", "content": system}, *MESSAGES])


def test_logprobs_and_top_logprobs(client):
    reply = client.chat.completions.create(**GREEDY, logprobs=True, top_logprobs=3)
    choice = reply.choices[0]
    content = choice.logprobs.content
    # Every kept token is shown (cut by max_tokens, no stop string): one entry per sampled one.
    assert choice.finish_reason == "length"
    assert len(content) == reply.usage.completion_tokens
    for entry in content:
        alternatives = [top.logprob for top in entry.top_logprobs]
        assert len(alternatives) == 3 and alternatives == sorted(alternatives, reverse=True)
        assert all(math.isfinite(lp) and lp <= 0 for lp in alternatives)
        # Greedy: the sampled token is the most likely one, with the same number.
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-6)
        if "\ufffd" not in entry.token:
            assert bytes(entry.bytes) == entry.token.encode("utf-8")
    if reply.usage.tool_output_tokens == 0:   # no tool output between the sampled tokens
        raw = bytes(b for e in content for b in e.bytes)
        assert raw.decode("utf-8", errors="replace") == choice.message.content

    sampled = client.chat.completions.create(**dict(GREEDY, temperature=1.0), seed=5,
                                             logprobs=True, top_logprobs=1)
    for entry in sampled.choices[0].logprobs.content:
        assert entry.logprob <= entry.top_logprobs[0].logprob + 1e-6

    plain = client.chat.completions.create(**GREEDY, logprobs=True).choices[0]
    assert plain.message.content == choice.message.content
    assert [(e.token, e.logprob) for e in plain.logprobs.content] == \
        [(e.token, e.logprob) for e in content]
    assert all(e.top_logprobs == [] for e in plain.logprobs.content)


def test_logprobs_stream_with_the_content(client):
    whole = client.chat.completions.create(**GREEDY, logprobs=True, top_logprobs=2)
    chunks = _stream(client, **GREEDY, logprobs=True, top_logprobs=2)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == \
        [e.model_dump() for e in whole.choices[0].logprobs.content]
    # The log-probs come in the chunks that carry their text.
    assert all(c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].delta.content)


def test_models_and_an_unknown_model(client):
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"
    for call in (lambda: client.models.retrieve("gpt-4o"),
                 lambda: client.chat.completions.create(**dict(GREEDY, model="gpt-4o"))):
        with pytest.raises(openai.NotFoundError) as err:
            call()
        assert err.value.status_code == 404 and err.value.code == "model_not_found"
        assert err.value.body["param"] == "model" and "'tiny'" in err.value.body["message"]


@pytest.mark.parametrize("change, param, says", [
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
     "messages.0.content", "part 1 is 'image_url': only text parts"),
    ({"messages": [{"role": "user", "content": []}]}, "messages.0.content", "text part"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
     "tools", "function calling is not supported"),
    ({"tool_choice": "auto"}, "tool_choice", "function calling is not supported"),
    ({"messages": [*MESSAGES, {"role": "tool", "content": "5", "tool_call_id": "c"}]},
     "messages.1.role", "function calling is not supported"),
    ({"top_logprobs": 2}, "top_logprobs", "requires logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
    ({"n": 5}, "n", "at most 4"),
    ({"max_tokens": 65}, "max_tokens", "at most 64"),
    ({"temperature": 3.0}, "temperature", "2"),
    ({"logit_bias": {"1": 2}}, "logit_bias", "unsupported field"),
    ({"messages": [{"role": "user", "content": "hi " * 200}]}, "messages", "tokens"),
])
def test_bad_requests_are_typed_400s(client, change, param, says):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**{**GREEDY, **change})
    body = err.value.body
    assert err.value.status_code == 400 and body["type"] == "invalid_request_error"
    assert body["param"] == param and says in body["message"]
    assert err.value.code in (None, "context_length_exceeded")
    if param == "messages":
        assert err.value.code == "context_length_exceeded"


def test_every_error_code_is_a_string_or_null(server):
    url, _ = server
    replies = [httpx.post(f"{url}/v1/chat/completions", json={"messages": []}, timeout=30),
               httpx.get(f"{url}/v2/nothing", timeout=30),
               httpx.get(f"{url}/v1/models/nope", timeout=30),
               httpx.post(f"{url}/v1/chat/completions", content=b"{", timeout=30,
                          headers={"Content-Type": "application/json"})]
    codes = [r.json()["error"]["code"] for r in replies]
    assert [r.status_code for r in replies] == [400, 404, 404, 400]
    assert codes == [None, None, "model_not_found", None]


def test_a_full_queue_is_a_rate_limit_error(tiny_policy):
    limits = ServeLimits(max_queue=1, batch_wait_ms=1500, request_timeout_s=30)
    with live_server(tiny_policy, limits, model_name="tiny") as (url, _):
        async def ask():
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused",
                                          max_retries=0, timeout=60) as client:
                first = asyncio.create_task(client.chat.completions.create(
                    model="tiny", messages=MESSAGES, max_tokens=2))
                await asyncio.sleep(0.3)
                with pytest.raises(openai.RateLimitError) as err:
                    await client.chat.completions.create(model="tiny", messages=MESSAGES,
                                                         max_tokens=2)
                await first
                return err.value

        error = asyncio.run(ask())
    assert error.status_code == 429 and error.code == "rate_limit_exceeded"
