"""The OpenAI chat-completions request schema, the server's limits, and OpenAI-style errors.

Requests are validated strictly: a field the server does not know, a wrong type or a value out of
bounds is a 400 naming the field, so a client never silently gets a different behaviour than it
asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import pydantic
from fastapi.responses import JSONResponse

from agentic_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class ServeLimits:
    """Bounds on what one request and the whole server may ask for.

    max_n: choices per request. max_tokens: completion tokens per choice (the run's
    max_length also bounds prompt + completion). max_batch_rows: episodes (request x n) in the
    rollout loop at once. max_queue: requests waiting to enter it before new ones get 429.
    max_body_bytes: request body size. request_timeout_s: a request's wait for its reply (504
    after it, and its episodes are cancelled). batch_wait_ms: when nothing runs, how long the
    worker waits after a first request for others to start with it.
    """

    max_n: int = 8
    max_tokens: int = 4096
    max_batch_rows: int = 32
    max_queue: int = 64
    max_body_bytes: int = 1 << 20
    request_timeout_s: float = 300.0
    batch_wait_ms: int = 20

    def __post_init__(self):
        for name in ("max_n", "max_tokens", "max_batch_rows", "max_queue", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise UserError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if self.request_timeout_s <= 0 or self.batch_wait_ms < 0:
            raise UserError(f"request_timeout_s > 0 and batch_wait_ms >= 0 expected, got "
                            f"{self.request_timeout_s}, {self.batch_wait_ms}")


class Message(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "user", "assistant"]
    content: str
    name: str | None = None


class ChatRequest(pydantic.BaseModel):
    """The subset of OpenAI's request body the server implements (others: 400)."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    messages: list[Message] = pydantic.Field(min_length=1)
    n: int = pydantic.Field(1, ge=1)
    temperature: float = pydantic.Field(1.0, ge=0.0, le=2.0)
    top_p: float = pydantic.Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = pydantic.Field(None, ge=1)
    max_completion_tokens: int | None = pydantic.Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = pydantic.Field(None, ge=0, lt=2**32)
    stream: bool = False
    stream_options: dict | None = None  # {"include_usage": true}: a last chunk with usage
    # Accepted for OpenAI clients; they do not change what is sampled.
    model: str | None = None
    user: str | None = None

    @pydantic.field_validator("temperature", "top_p", mode="before")
    @classmethod
    def _number(cls, value):
        # strict mode rejects the int 1 for a float field; JSON does not tell 1 from 1.0.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @pydantic.field_validator("stop")
    @classmethod
    def _stops(cls, value):
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("expected up to 4 non-empty strings")
        return stops

    def stops(self) -> list[str]:
        return list(self.stop or [])

    def completion_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class RequestError(Exception):
    """A client error: HTTP ``status``, OpenAI error ``type``, the offending ``param``."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.param, self.kind = status, param, kind


def error_response(status: int, message: str, param: str | None = None,
                   kind: str = "invalid_request_error") -> JSONResponse:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}}."""
    return JSONResponse(status_code=status, content={
        "error": {"message": message, "type": kind, "param": param, "code": status}})


def validation_message(err: pydantic.ValidationError) -> tuple[str, str | None]:
    """The first validation problem as one line naming its field, and that field's path."""
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or None
    if first["type"] == "extra_forbidden":
        return f"{loc}: unsupported field", loc
    return f"{loc}: {first['msg']}", loc


def check_limits(request: ChatRequest, limits: ServeLimits) -> None:
    """Bounds that depend on the server's settings (RequestError 400 on the first violated)."""
    if request.n > limits.max_n:
        raise RequestError(400, f"n: at most {limits.max_n}, got {request.n}", "n")
    if request.n > limits.max_batch_rows:
        raise RequestError(400, f"n: at most the batch size {limits.max_batch_rows}", "n")
    limit = request.completion_limit()
    if limit is not None and limit > limits.max_tokens:
        raise RequestError(400, f"max_tokens: at most {limits.max_tokens}, got {limit}",
                           "max_tokens")
