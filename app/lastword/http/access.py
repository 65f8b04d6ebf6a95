"""Access tokens (SPEC §11): ingest needs the ingest token, reads take either token.

Which endpoints are which is decided by method: every ``POST`` under ``/v1`` writes (ingest),
every ``GET`` under ``/v1`` and ``/metrics`` reads; under ``/ds/`` (Durable Streams) ``PUT``, ``POST`` and
``DELETE`` write and ``GET`` and ``HEAD`` read. The MCP face (``/mcp``) is a read for this
middleware; its one writing tool asks for the ingest token itself (``lastword.http.mcp_face``). ``/healthz`` and ``/readyz`` stay open (a
probe must not need a secret, and they reveal nothing), and so do the API docs.

Browsers' ``EventSource`` cannot send headers, so read requests may carry the token as
``?access_token=``. That puts it in URLs, which end up in proxy logs and browser history: use
the read token there, never the ingest token — ingest refuses the query parameter. lastword's
own request log never prints a query string.

Tokens are compared with :func:`hmac.compare_digest` against every configured token, so the
time taken says nothing about which token or how much of it matched.
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from lastword.errors import PROBLEM_JSON, InvalidToken, LastwordError, MissingToken, WrongTokenKind, problem_json


def _matches(presented: str, expected: str | None) -> bool:
    if not expected:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def _credential(authorization: str) -> str | None:
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() == "bearer" and credential.strip():
        return credential.strip()
    return None


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return _credential(bytes(value).decode("latin-1"))
    return None


def bearer_matches(authorization: str | None, expected: str) -> bool:
    """Whether an ``Authorization`` header value carries ``expected`` as its bearer token."""
    return _matches(_credential(authorization or "") or "", expected)


def _query_token(scope: Scope) -> str | None:
    for name, value in parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")):
        if name == "access_token" and value:
            return str(value)
    return None


def kind_of(method: str, path: str) -> str | None:
    """``ingest``, ``read`` or ``None`` (open) for a request."""
    if path.startswith("/v1/"):
        if method == "POST":
            return "ingest"
        if method in ("GET", "HEAD"):
            return "read"
    if path.startswith("/ds/"):
        # Durable Streams (SPEC §17): creating, appending, closing and deleting write.
        if method in ("PUT", "POST", "DELETE"):
            return "ingest"
        if method in ("GET", "HEAD"):
            return "read"
    if path == "/metrics":
        return "read"
    if path == "/mcp":
        # Every MCP request is a POST; the tool that writes checks for the ingest token itself.
        return "read"
    return None


class AccessControl:
    """ASGI middleware refusing requests without the right token, with a problem document."""

    def __init__(self, app: ASGIApp, *, ingest_token: str | None, read_token: str | None) -> None:
        self.app = app
        self.ingest_token = ingest_token or None
        self.read_token = read_token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.ingest_token or self.read_token):
            await self.app(scope, receive, send)
            return
        kind = kind_of(scope["method"], scope["path"])
        refusal = self.check(kind, scope) if kind else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await send_problem(send, refusal)

    def check(self, kind: str, scope: Scope) -> LastwordError | None:
        token = _bearer(scope)
        if token is None and kind == "read":
            token = _query_token(scope)
        is_ingest = _matches(token or "", self.ingest_token)
        is_read = _matches(token or "", self.read_token)
        if kind == "ingest":
            if self.ingest_token is None:
                return None  # only a read token is configured: ingest stays open (logged at start-up)
            if is_ingest:
                return None
            if is_read:
                return WrongTokenKind("this endpoint writes: it needs the ingest token, not the read token")
        elif is_ingest or is_read:
            return None
        if token is None:
            return MissingToken("this endpoint needs Authorization: Bearer <token>")
        return InvalidToken("the token is not valid here")


async def send_problem(send: Send, error: LastwordError) -> None:
    """Answer with ``error``'s problem document from a middleware (before any route)."""
    body = problem_json(error)
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if error.http_status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="lastword"'))
    start: dict[str, Any] = {"type": "http.response.start", "status": error.http_status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
