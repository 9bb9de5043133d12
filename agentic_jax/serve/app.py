"""The FastAPI application: OpenAI-compatible routes, the tools' JSON routes and the web page.

    service = Service.start(policy, ServeLimits(), model_name="run-1")
    app = create_app(service)     # uvicorn.run(app, host="127.0.0.1", port=8000)
    ...
    service.close()               # the worker thread, then the sandboxes

Bound to all addresses and reached by name: ``create_app(service,
hosts=allowed_hosts("0.0.0.0", ["gpu-box.lan"]))``. Requests from other web sites (a foreign
Host or Origin, a POST not labelled JSON) are refused before any route runs
(`agentic_jax.serve.boundary`). Every error is OpenAI's body
``{"error": {"message", "type", "param", "code"}}`` (``code`` a string such as
"model_not_found", or null).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from agentic_jax.serve import chat, completions, tools_api
from agentic_jax.serve.boundary import BrowserBoundary, allowed_hosts
from agentic_jax.serve.drain import Drain, DrainGate
from agentic_jax.serve.schema import RequestError, ServeLimits, error_response
from agentic_jax.serve.worker import RolloutWorker

PAGE = pathlib.Path(__file__).with_name("static") / "index.html"


@dataclasses.dataclass
class Service:
    """What the routes share: the policy, its worker thread and the tools' resources."""

    policy: Any
    worker: RolloutWorker
    limits: ServeLimits
    model_name: str
    tools: tools_api.ToolResources
    started: float = dataclasses.field(default_factory=time.time)
    drain: Drain = dataclasses.field(default_factory=Drain)  # SIGTERM: finish, refuse new

    @classmethod
    def start(cls, policy: Any, limits: ServeLimits, *, model_name: str = "agentic_jax",
              seed: int = 0, warmup: bool = False) -> Service:
        """The service of ``policy``; ``warmup``: compile the engine's programs first
        (`Engine.warmup`)."""
        worker = RolloutWorker(policy, limits, seed=seed, warmup=warmup)
        return cls(policy=policy, worker=worker, limits=limits, model_name=model_name,
                   tools=tools_api.ToolResources(policy, worker, seed=seed))

    def decode(self, tokens) -> str:
        return self.policy.tokenizer.decode(list(tokens), skip_special_tokens=True)

    @functools.cached_property
    def token_text(self) -> chat.TokenText:
        """Each token's text and bytes, as a reply's log-probs show them."""
        return chat.TokenText(self.policy.tokenizer)

    def model_card(self) -> dict[str, Any]:
        """The served model as OpenAI's ``/v1/models`` lists it."""
        return {"id": self.model_name, "object": "model", "created": int(self.started),
                "owned_by": "agentic_jax"}

    def close(self) -> None:
        self.worker.close()
        self.tools.close()


def create_app(service: Service, hosts: frozenset[str] | None = None) -> FastAPI:
    """The app; ``hosts``: the Host names it answers (default: the loopback names)."""
    app = FastAPI(title="agentic_jax", docs_url=None, redoc_url=None)
    app.add_middleware(DrainGate, drain=service.drain)  # inside the boundary: counts
    app.add_middleware(BrowserBoundary, hosts=allowed_hosts("127.0.0.1") if hosts is None
                       else hosts)
    app.state.service = service

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, err: RequestError):
        return error_response(err.status, str(err), err.param, err.kind, err.code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, err: RequestValidationError):
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or None
        return error_response(400, f"{loc}: {first['msg']}", loc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, err: HTTPException):
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return error_response(err.status_code, f"{request.url.path}: {err.detail}", kind=kind)

    @app.get("/health")
    async def health():
        w = service.worker
        return {"status": "ok", "model": service.model_name, "queued": w.queued,
                "max_length": w.max_length, "uptime_s": round(time.time() - service.started, 1),
                "worker": w.stats.as_dict()}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [service.model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        completions.check_model(service, model_id)
        return service.model_card()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await completions.chat_completions(service, request)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    tools_api.add_routes(app, service)
    return app
