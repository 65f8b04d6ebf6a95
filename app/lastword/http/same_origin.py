"""Writes from the service's own origin only (SPEC §18 "Safe when left open").

A sidecar is often left without tokens, on the assumption that only its neighbours reach it. A
browser on the same machine reaches it too, and any page it shows can send it requests: without
this check a page on another origin could create runs, end them and inject chunk text. Browsers
mark such requests with ``Origin``; they skip the CORS preflight only for "simple" requests,
which carry no ``Content-Type`` or a form/``text/plain`` one. So, for every state-changing
request (``POST``, ``PUT``, ``PATCH``, ``DELETE``) on ``/v1``, ``/mcp`` and ``/ds``:

* an ``Origin`` that is neither the service's own nor listed in ``LASTWORD_CORS_ORIGINS`` is
  refused 403 ``cross_origin`` (``null``, sent by sandboxed frames and ``file:`` pages, is
  foreign); a request with no ``Origin`` is not a browser's cross-site one and goes on;
* a body that does not declare its type is refused 415 — it is never parsed as JSON; a request
  with no body (``Content-Length: 0`` or none, not chunked) needs no type. A declared type the
  endpoint does not take is refused by the endpoint itself, also 415. Under ``/ds/`` the
  Durable Streams face answers an undeclared body itself, as its protocol says (an append
  400; a create stores it as ``application/octet-stream`` bytes, never parsed).

"The service's own origin" is the ``Host`` the request was sent to: the dashboard, served from
that host, writes as before. Comparing with ``Host`` says nothing about DNS rebinding (a
rebound name is its own origin); ``/mcp`` checks ``Host`` for that (:mod:`lastword.http.mcp_mount`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from lastword.errors import CrossOrigin, UnsupportedMedia
from lastword.http.access import send_problem

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
GUARDED_PREFIXES = ("/v1/", "/ds/")
GUARDED_PATHS = frozenset({"/v1", "/mcp", "/ds"})


def guarded(method: str, path: str) -> bool:
    return method in STATE_CHANGING and (path in GUARDED_PATHS or path.startswith(GUARDED_PREFIXES))


def header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return bytes(value).decode("latin-1")
    return None


def _has_body(scope: Scope) -> bool:
    if header(scope, b"transfer-encoding") is not None:
        return True
    length = header(scope, b"content-length")
    return length is not None and length.strip() not in ("", "0")


def own_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` is the origin of the host the request was sent to."""
    parts = urlsplit(origin)
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc.lower() == (host or "").lower()


def foreign_origin(scope: Scope, allowed: frozenset[str], any_origin: bool) -> CrossOrigin | None:
    """The refusal of a request whose ``Origin`` is neither its ``Host``'s nor in ``allowed``."""
    origin = header(scope, b"origin")
    if origin is None or any_origin or origin.rstrip("/").lower() in allowed \
            or own_origin(origin, header(scope, b"host")):
        return None
    return CrossOrigin(
        f"a {scope['method']} from origin {origin!r} is refused: only this service's own origin and "
        "those in LASTWORD_CORS_ORIGINS may write")


def origin_set(origins: list[str]) -> frozenset[str]:
    """``LASTWORD_CORS_ORIGINS`` as the set :func:`foreign_origin` compares with."""
    return frozenset(origin.rstrip("/").lower() for origin in origins)


class SameOriginWrites:
    """ASGI middleware refusing cross-site and undeclared-body writes with a problem document."""

    def __init__(self, app: ASGIApp, *, allowed_origins: list[str]) -> None:
        self.app = app
        self.any_origin = "*" in allowed_origins
        self.allowed_origins = origin_set(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and guarded(scope["method"], scope["path"]):
            refusal = self.check(scope)
            if refusal is not None:
                await send_problem(send, refusal)
                return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> CrossOrigin | UnsupportedMedia | None:
        refused = foreign_origin(scope, self.allowed_origins, self.any_origin)
        if refused is not None:
            return refused
        # Under /ds/ a stream's bytes are never parsed as JSON unless the stream says so, and the
        # protocol answers an undeclared append itself (400).
        if not scope["path"].startswith("/ds/") and _has_body(scope) \
                and not (header(scope, b"content-type") or "").strip():
            return UnsupportedMedia("a request body needs a Content-Type (application/json, application/x-ndjson, "
                                    "text/plain or the endpoint's own); an undeclared body is not read")
        return None
