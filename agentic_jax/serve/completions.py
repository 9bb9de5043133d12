"""``POST /v1/chat/completions``: a validated request becomes a worker `Job`; its episodes come
back as one JSON reply or as server-sent events (OpenAI chunks, then ``data: [DONE]``). A client
that disconnects, or a request past ``request_timeout_s`` (504), cancels its job: its episodes
leave the engine at the next step. A ``model`` other than the one served is a 404
``model_not_found``, as OpenAI answers it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pydantic
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from agentic_jax.rollout import SamplingParams
from agentic_jax.serve import chat
from agentic_jax.serve.schema import (
    ChatRequest,
    RequestError,
    check_limits,
    error_body,
    validation_message,
)
from agentic_jax.serve.fair_queue import client_key
from agentic_jax.serve.worker import Job, QueueFull
from agentic_jax.utils.files import JSONDepthError, loads_bounded


# Bodies up to this size are parsed on the event loop (well under a millisecond); larger ones
# in the thread pool, so that /health and every other request keep being answered while
# megabytes of JSON are parsed and validated.
INLINE_PARSE_BYTES = 64 << 10


async def read_json(request: Request, max_bytes: int,
                    validate: Callable[[Any], Any] = lambda payload: payload) -> Any:
    """The request body as JSON, passed through ``validate`` (413 when over ``max_bytes``,
    400 when not JSON or nested deeper than `MAX_JSON_DEPTH`; ``validate`` raises its own
    `RequestError`)."""
    body = await request.body()
    if len(body) > max_bytes:
        raise RequestError(413, f"request body: {len(body)} bytes; at most {max_bytes}")
    if len(body) <= INLINE_PARSE_BYTES:
        return validate(_parse(body))
    return await run_in_threadpool(lambda: validate(_parse(body)))


def _parse(body: bytes) -> Any:
    try:
        return loads_bounded(body)
    except JSONDepthError as err:
        raise RequestError(400, f"request body: {err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestError(400, f"request body: not valid JSON ({err})") from None


def parse_chat(payload: Any, limits) -> ChatRequest:
    if not isinstance(payload, dict):
        raise RequestError(400, "request body: expected a JSON object")
    try:
        request = ChatRequest.model_validate(payload)
    except pydantic.ValidationError as err:
        message, param = validation_message(err)
        raise RequestError(400, message, param) from None
    check_limits(request, limits)
    return request


async def chat_completions(service: Any, request: Request):
    """The route: validate, queue, then reply or stream."""
    chat_request = await read_json(request, service.limits.max_body_bytes,
                                   lambda payload: parse_chat(payload, service.limits))
    check_model(service, chat_request.model)
    prompt = service.policy.chat_prompt([m.prompt_message() for m in chat_request.messages])
    worker = service.worker
    room = worker.max_length - len(prompt)
    if room < 1:
        raise RequestError(400, f"messages: the prompt has {len(prompt)} tokens; this model "
                           f"takes at most {worker.max_length - 1}", "messages",
                           code="context_length_exceeded")
    max_new = min(room, chat_request.completion_limit() or room)
    stream = _Stream(asyncio.get_running_loop(), chat_request.stream)
    job = Job(prompt=prompt, n=chat_request.n,
              sampling=SamplingParams(temperature=chat_request.temperature,
                                      top_p=chat_request.top_p,
                                      top_logprobs=chat_request.alternatives()),
              max_new_tokens=max_new, on_update=stream.on_update, on_finish=stream.on_finish,
              seed=chat_request.seed, client=client_key(request))
    try:
        ticket = worker.submit(job)
    except QueueFull as err:
        raise RequestError(429, f"server busy: {err}", kind="rate_limit_error",
                           code="rate_limit_exceeded") from None
    reply = _Reply(service, chat_request, len(prompt), max_new, ticket)
    if chat_request.stream:
        return StreamingResponse(reply.events(stream), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    try:
        return await reply.whole(stream, request)
    except _ClientGone:
        return Response(status_code=499)  # nobody reads it; the job is cancelled
    finally:
        ticket.cancel()  # a no-op once the job finished


def check_model(service: Any, model: str | None) -> None:
    """A 404 ``model_not_found`` unless ``model`` is the served one (or not given)."""
    if model is not None and model != service.model_name:
        raise RequestError(404, f"model: {model!r} does not exist; this server serves "
                           f"{service.model_name!r}", "model", code="model_not_found")


class _Stream:
    """Moves the worker thread's callbacks onto the event loop as queue items."""

    def __init__(self, loop: asyncio.AbstractEventLoop, follow: bool):
        self.loop, self.follow = loop, follow
        self.queue: asyncio.Queue = asyncio.Queue()

    def on_update(self, choice: int, episode, kind: str) -> None:
        if self.follow:  # a snapshot: the worker keeps extending the episode
            self._put(("update", choice, chat.Sampled.of(episode),
                       episode.finish_reason if kind == "done" else None))

    def on_finish(self, episodes, error) -> None:
        self._put(("finish", episodes, error))

    def _put(self, item: tuple) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop has stopped: nobody waits for this reply
            pass


class _ClientGone(Exception):
    """The client closed the connection before its reply was ready."""


# How often a waiting non-streaming reply checks that its client is still there (seconds).
DISCONNECT_POLL_S = 0.25


class _Reply:
    def __init__(self, service: Any, request: ChatRequest, prompt_tokens: int, max_new: int,
                 ticket: Any):
        self.service, self.request, self.ticket = service, request, ticket
        self.prompt_tokens, self.max_new = prompt_tokens, max_new
        self.cid, self.created = chat.completion_id(), int(time.time())
        self.deadline = time.monotonic() + service.limits.request_timeout_s

    def _choice(self, sampled: chat.Sampled, reason) -> chat.ChoiceText:
        return chat.choice_text(sampled.tokens, sampled.mask, self.service.decode,
                                max_new_tokens=self.max_new, stops=self.request.stops(),
                                episode_reason=reason)

    def _logprobs(self, sampled: chat.Sampled, choice: chat.ChoiceText, start: int
                  ) -> tuple[list[dict], int]:
        """The log-prob entries of the response tokens from ``start`` to the end of those the
        choice's text shows, and that end."""
        end = max(start, chat.tokens_shown(sampled.tokens[:self.max_new], self.service.decode,
                                           choice.text))
        return chat.logprob_content(sampled, start, end, self.service.token_text), end

    async def _next(self, stream: _Stream, http: Request | None = None):
        """The stream's next item; 504 past the deadline, `_ClientGone` when ``http``'s client
        has disconnected (checked every `DISCONNECT_POLL_S`)."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.ticket.cancel()
                raise RequestError(504, f"no reply within "
                                   f"{self.service.limits.request_timeout_s} s",
                                   kind="timeout_error")
            wait = left if http is None else min(left, DISCONNECT_POLL_S)
            try:
                return await asyncio.wait_for(stream.queue.get(), timeout=max(wait, 0.001))
            except TimeoutError:
                if http is not None and await http.is_disconnected():
                    raise _ClientGone() from None

    async def whole(self, stream: _Stream, http: Request | None = None) -> JSONResponse:
        while True:
            item = await self._next(stream, http)
            if item[0] == "finish":
                break
        _, episodes, error = item
        if error is not None:
            raise RequestError(500, f"rollout failed: {type(error).__name__}: {error}",
                               kind="server_error")
        sampled = [chat.Sampled.of(e) for e in episodes]
        choices = [self._choice(s, e.finish_reason) for s, e in zip(sampled, episodes)]
        logprobs = ([self._logprobs(s, c, 0)[0] for s, c in zip(sampled, choices)]
                    if self.request.logprobs else None)
        return JSONResponse(chat.completion_body(self.cid, self.service.model_name,
                                                 self.prompt_tokens, episodes, choices,
                                                 logprobs))

    async def events(self, stream: _Stream) -> AsyncIterator[str]:
        """SSE: a role chunk per choice, content deltas as episodes grow, a finish chunk per
        choice, a usage chunk when ``stream_options.include_usage``, then [DONE]."""
        try:
            async for event in self._events(stream):
                yield event
        finally:  # the client went away, or the reply is complete: either way stop the job
            self.ticket.cancel()

    async def _events(self, stream: _Stream) -> AsyncIterator[str]:
        n, model = self.request.n, self.service.model_name
        sent = _Sent(n)
        for i in range(n):
            yield _sse(chat.chunk(self.cid, model, self.created, i,
                                  {"role": "assistant", "content": ""}))
        while True:
            try:
                item = await self._next(stream)
            except RequestError as err:
                yield _sse(error_body(str(err), kind=err.kind, code=err.code))
                break
            if item[0] == "finish":
                _, episodes, error = item
                if error is not None:
                    yield _sse(error_body(f"rollout failed: {error}", kind="server_error"))
                    break
                for i, e in enumerate(episodes):
                    for event in self._deltas(i, chat.Sampled.of(e), e.finish_reason, sent):
                        yield event
                usage_event = _usage_event(self, sent.last)
                if usage_event:
                    yield usage_event
                break
            _, i, sampled, reason = item
            for event in self._deltas(i, sampled, reason, sent):
                yield event
        yield "data: [DONE]\n\n"

    def _deltas(self, i: int, sampled: chat.Sampled, reason: str | None, sent: _Sent):
        """Choice ``i``'s chunks for what its text (and log-probs) grew by since ``sent``, and
        its finish chunk once it ended; nothing after that."""
        if sent.finished[i] is not None:
            return
        choice = sent.last[i] = self._choice(sampled, reason)
        model = self.service.model_name
        grown = choice.text.startswith(sent.text[i]) and len(choice.text) > len(sent.text[i])
        logprobs = None
        if self.request.logprobs:
            logprobs, sent.tokens[i] = self._logprobs(sampled, choice, sent.tokens[i])
        if grown or logprobs:
            delta = choice.text[len(sent.text[i]):] if grown else ""
            yield _sse(chat.chunk(self.cid, model, self.created, i, {"content": delta},
                                  logprobs=logprobs))
            sent.text[i] = sent.text[i] + delta
        if choice.finish_reason is not None:
            sent.finished[i] = choice.finish_reason
            yield _sse(chat.chunk(self.cid, model, self.created, i, {}, choice.finish_reason))


class _Sent:
    """Per choice of a stream: the text sent, the response tokens its log-probs covered, the
    finish reason once sent, and the latest `chat.ChoiceText`."""

    def __init__(self, n: int):
        self.text, self.tokens = [""] * n, [0] * n
        self.finished: list[str | None] = [None] * n
        self.last: list[chat.ChoiceText | None] = [None] * n


def _usage_event(reply: _Reply, last: list) -> str:
    """The usage chunk (empty string unless the client asked for it)."""
    options = reply.request.stream_options or {}
    if not options.get("include_usage"):
        return ""
    choices = [c for c in last if c is not None]
    return _sse(chat.chunk(reply.cid, reply.service.model_name, reply.created, None,
                           usage=chat.usage(reply.prompt_tokens, choices)))


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"
