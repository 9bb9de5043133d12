"""``POST /v1/chat/completions``: a validated request becomes a worker `Job`; its episodes come
back as one JSON reply or as server-sent events (OpenAI chunks, then ``data: [DONE]``). A client
that disconnects, or a request past ``request_timeout_s`` (504), cancels its job: its episodes
leave the engine at the next step."""

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
from agentic_jax.serve.schema import ChatRequest, RequestError, check_limits, validation_message
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
    prompt = service.policy.chat_prompt([m.model_dump() for m in chat_request.messages])
    worker = service.worker
    room = worker.max_length - len(prompt)
    if room < 1:
        raise RequestError(400, f"messages: the prompt has {len(prompt)} tokens; this model "
                           f"takes at most {worker.max_length - 1}", "messages")
    max_new = min(room, chat_request.completion_limit() or room)
    stream = _Stream(asyncio.get_running_loop(), chat_request.stream)
    job = Job(prompt=prompt, n=chat_request.n,
              sampling=SamplingParams(temperature=chat_request.temperature,
                                      top_p=chat_request.top_p),
              max_new_tokens=max_new, on_update=stream.on_update, on_finish=stream.on_finish,
              seed=chat_request.seed)
    try:
        ticket = worker.submit(job)
    except QueueFull as err:
        raise RequestError(429, f"server busy: {err}", kind="rate_limit_error") from None
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


class _Stream:
    """Moves the worker thread's callbacks onto the event loop as queue items."""

    def __init__(self, loop: asyncio.AbstractEventLoop, follow: bool):
        self.loop, self.follow = loop, follow
        self.queue: asyncio.Queue = asyncio.Queue()

    def on_update(self, choice: int, episode, kind: str) -> None:
        if self.follow:  # a snapshot: the worker keeps extending the episode
            self._put(("update", choice, list(episode.response_tokens), list(episode.loss_mask),
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

    def _choice(self, tokens, mask, reason) -> chat.ChoiceText:
        return chat.choice_text(tokens, mask, self.service.decode, max_new_tokens=self.max_new,
                                stops=self.request.stops(), episode_reason=reason)

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
        choices = [self._choice(e.response_tokens, e.loss_mask, e.finish_reason)
                   for e in episodes]
        return JSONResponse(chat.completion_body(self.cid, self.service.model_name,
                                                 self.prompt_tokens, episodes, choices))

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
        sent, finished = [""] * n, [None] * n
        last: list[chat.ChoiceText | None] = [None] * n
        for i in range(n):
            yield _sse(chat.chunk(self.cid, model, self.created, i,
                                  {"role": "assistant", "content": ""}))
        while True:
            try:
                item = await self._next(stream)
            except RequestError as err:
                yield _sse({"error": {"message": str(err), "type": err.kind, "code": 504}})
                break
            if item[0] == "finish":
                _, episodes, error = item
                if error is not None:
                    yield _sse({"error": {"message": f"rollout failed: {error}",
                                          "type": "server_error", "code": 500}})
                    break
                for i, e in enumerate(episodes):
                    if finished[i] is None:
                        last[i] = self._choice(e.response_tokens, e.loss_mask, e.finish_reason)
                        for event in self._deltas(i, last[i], sent, finished):
                            yield event
                usage_event = _usage_event(self, last)
                if usage_event:
                    yield usage_event
                break
            _, i, tokens, mask, reason = item
            if finished[i] is None:
                last[i] = self._choice(tokens, mask, reason)
                for event in self._deltas(i, last[i], sent, finished):
                    yield event
        yield "data: [DONE]\n\n"

    def _deltas(self, i: int, choice: chat.ChoiceText, sent: list[str], finished: list):
        model = self.service.model_name
        if choice.text.startswith(sent[i]) and len(choice.text) > len(sent[i]):
            yield _sse(chat.chunk(self.cid, model, self.created, i,
                                  {"content": choice.text[len(sent[i]):]}))
            sent[i] = choice.text
        if choice.finish_reason is not None:
            finished[i] = choice.finish_reason
            yield _sse(chat.chunk(self.cid, model, self.created, i, {}, choice.finish_reason))


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
