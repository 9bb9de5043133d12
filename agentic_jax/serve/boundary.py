"""The browser boundary: which Host names the server answers and which POSTs it accepts.

A web page on another site can make the browser send requests to a loopback server. Two kinds
are refused before any route runs:

  - DNS rebinding: the page's own name is re-pointed at 127.0.0.1, so the browser treats the
    server's replies as same-origin. The request then carries the page's name in ``Host``;
    only the bound address, the loopback names and ``--allowed_hosts`` are answered (421).
  - Cross-site POSTs: a form or a ``fetch`` with ``text/plain`` needs no CORS preflight, yet
    would run the grader, the sandbox or the policy. A POST whose ``Origin`` is not the
    server's own is refused (403), and a POST must say ``Content-Type: application/json``
    (415), which a cross-site page can only send after a preflight this server never grants.

Clients that are not browsers (curl, the OpenAI SDK) send no ``Origin`` and are unaffected
except that their POSTs must be labelled JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from agentic_jax.serve.schema import error_response

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def allowed_hosts(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host names answered: loopback names, the bound address (unless it is a wildcard,
    which names no host) and ``extra``; lower case, IPv6 without brackets."""
    names = {*LOOPBACK_NAMES, *(n.strip() for n in extra)}
    if bind_host not in WILDCARD_ADDRESSES:
        names.add(bind_host)
    return frozenset(n.lower().strip("[]") for n in names if n)


def host_name(host_header: str) -> str:
    """'Example.org:8000' -> 'example.org'; '[::1]:8000' -> '::1'."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(method: str, headers: Headers, hosts: frozenset[str]) -> tuple[int, str] | None:
    """(status, one-line reason) when the request crosses the boundary, else None."""
    host = headers.get("host", "")
    if host_name(host) not in hosts:
        return 421, (f"Host {host[:100]!r} is not a name this server answers to "
                     f"({', '.join(sorted(hosts))}; more with --allowed_hosts)")
    if method not in STATE_CHANGING:
        return None
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != host.strip().lower():
        return 403, (f"Origin {origin[:100]!r}: requests from another site are refused "
                     "(the page and the API share one origin)")
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        return 415, (f"Content-Type {content_type[:100] or '(none)'!r}: expected "
                     "application/json")
    return None


class BrowserBoundary:
    """ASGI middleware answering `refusal`'s requests with an OpenAI-style error body."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]):
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(scope["method"], Headers(scope=scope), self.hosts)
            if refused is not None:
                status, message = refused
                kind = "permission_error" if status == 403 else "invalid_request_error"
                await error_response(status, message, kind=kind)(scope, receive, send)
                return
        await self.app(scope, receive, send)
