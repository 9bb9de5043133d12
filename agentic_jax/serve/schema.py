"""The OpenAI chat-completions request schema, the server's limits, and OpenAI-style errors.

Requests are validated strictly: a field the server does not know, a wrong type or a value out of
bounds is a 400 naming the field, so a client never silently gets a different behaviour than it
asked for. What common clients send is read as OpenAI reads it: a message's content as a list of
text parts (joined by newlines), the ``developer`` role as a system message, ``logprobs`` /
``top_logprobs``. Function calling (``tools`` and its kin) is a 400 that says why
(docs/serving.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pydantic
import pydantic_core
from fastapi.responses import JSONResponse

from agentic_jax.errors import UserError
from agentic_jax.rollout.engine.types import MAX_TOP_LOGPROBS

# OpenAI's function-calling fields: the policy calls its own tool, in the reply.
FUNCTION_CALLING = frozenset({"tools", "tool_choice", "parallel_tool_calls", "functions",
                              "function_call", "tool_calls", "tool_call_id"})
NO_FUNCTION_CALLING = ("function calling is not supported: the policy writes and runs its own "
                       "Python inside the reply (docs/serving.md)")


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


def _invalid(message: str) -> pydantic_core.PydanticCustomError:
    """A validation error whose message is shown as it is (no "Value error," prefix)."""
    return pydantic_core.PydanticCustomError("invalid", message)


def text_of_parts(parts: list[Any]) -> str:
    """A content given as OpenAI's parts: its text parts joined by newlines (an image or any
    other part is an error: the model reads text only)."""
    if not parts:
        raise _invalid("expected a string or at least one text part")
    texts = []
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise _invalid(f"part {i}: expected an object with a \"type\"")
        if kind != "text":
            raise _invalid(f"part {i} is {kind!r}: only text parts are supported (this model "
                           f"reads text only)")
        if set(part) != {"type", "text"} or not isinstance(part["text"], str):
            raise _invalid(f"part {i}: a text part is {{\"type\": \"text\", \"text\": "
                           f"string}}")
        texts.append(part["text"])
    return "\n".join(texts)


class Message(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str
    name: str | None = None

    @pydantic.field_validator("role", mode="before")
    @classmethod
    def _no_tool_role(cls, value):
        if value in ("tool", "function"):
            raise _invalid(f"{value!r} messages answer function calls; {NO_FUNCTION_CALLING}")
        return value

    @pydantic.field_validator("content", mode="before")
    @classmethod
    def _parts(cls, value):
        return text_of_parts(value) if isinstance(value, list) else value

    def prompt_message(self) -> dict[str, str]:
        """The message as the prompt renders it: a developer message is a system message."""
        message = {"role": "system" if self.role == "developer" else self.role,
                   "content": self.content}
        if self.name is not None:
            message["name"] = self.name
        return message


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
    # The sampled tokens' log-probs (untempered), and the top_logprobs most likely at each.
    logprobs: bool = False
    top_logprobs: int | None = pydantic.Field(None, ge=0, le=MAX_TOP_LOGPROBS)
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

    @pydantic.field_validator("top_logprobs")
    @classmethod
    def _with_logprobs(cls, value, info: pydantic.ValidationInfo):
        if value is not None and not info.data.get("logprobs"):
            raise _invalid("requires logprobs: true")
        return value

    def stops(self) -> list[str]:
        return list(self.stop or [])

    def alternatives(self) -> int:
        """How many most likely tokens each sampled position reports (0: none)."""
        return self.top_logprobs or 0

    def completion_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class RequestError(Exception):
    """A client error: HTTP ``status``, OpenAI error ``type``, the offending ``param`` and
    OpenAI's ``code`` for it (a string such as "model_not_found", or None)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.kind, self.code = status, param, kind, code


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error",
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None,
                   kind: str = "invalid_request_error", code: str | None = None
                   ) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(message, param, kind, code))


def validation_message(err: pydantic.ValidationError) -> tuple[str, str | None]:
    """The first validation problem as one line naming its field, and that field's path."""
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or None
    if first["type"] == "extra_forbidden":
        if first["loc"][-1] in FUNCTION_CALLING:
            return f"{loc}: {NO_FUNCTION_CALLING}", loc
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
