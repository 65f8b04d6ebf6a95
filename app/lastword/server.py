"""Serving the app with uvicorn: a deadline for request headers, and a graceful shutdown.

Shutdown (SIGTERM, or ``should_exit``): the listening sockets close first, so nothing new
comes in; then every SSE subscriber gets a last ``server/reconnect`` message and its stream
ends, and every long poll answers with the result as it stands; then uvicorn waits (up to
``LASTWORD_SHUTDOWN_GRACE_SECONDS``) for in-flight requests — ingests included — to finish,
and the lifespan closes the store.

uvicorn has no limit on how long a client may take to send its request headers, so a client
trickling them a byte at a time would hold a connection (and its memory) forever. The protocol
below arms a timer when a connection opens and whenever a new request starts, and disarms it
when the headers are complete; if it fires first, the client gets 408 and the connection is
closed. The request line and headers are held to :data:`MAX_HEADER_BYTES` twice: the bytes
received while they are incomplete (a client trickling one endless header) and the bytes the
parser hands over (headers that arrive whole in one read are parsed within it, so the first
count never sees them); past it the client gets 431.

The body has a deadline of its own, ``LASTWORD_BODY_TIMEOUT_SECONDS``: the longest pause
between two pieces of a body (from the headers to the first piece too). It is re-armed by every
piece that arrives and disarmed when the body is complete; while uvicorn has stopped reading
because the app has not taken what arrived (flow control), the pause is the app's, not the
client's, and the deadline waits. A client that lets it pass gets 408 ``body_timeout`` (the
app sees the request as disconnected: an NDJSON or text body keeps what arrived).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from lastword.errors import (
    PROBLEM_JSON,
    BodyTimeout,
    HeadersTooLarge,
    LastwordError,
    MalformedRequest,
    RequestTimeout,
    problem_json,
)
from lastword.main import create_app
from lastword.settings import Settings

#: Request line and headers together; httptools itself sets no limit, so without this a client
#: could send headers for as long as the deadline lets it and the server would keep them all.
MAX_HEADER_BYTES = 64 * 1024


def _closing_problem(error: LastwordError, reason: str) -> bytes:
    """A whole HTTP response with a problem document, for answers given before the app runs."""
    body = problem_json(error)
    return (
        f"HTTP/1.1 {error.http_status} {reason}\r\ncontent-type: {PROBLEM_JSON}\r\n".encode()
        + b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


_TIMEOUT_RESPONSE = _closing_problem(
    RequestTimeout("the request headers did not arrive in time"), "Request Timeout"
)
_BODY_TIMEOUT_RESPONSE = _closing_problem(
    BodyTimeout("the request body stopped arriving (LASTWORD_BODY_TIMEOUT_SECONDS)"), "Request Timeout"
)
_HEADERS_TOO_LARGE_RESPONSE = _closing_problem(
    HeadersTooLarge(f"the request line and headers passed {MAX_HEADER_BYTES} bytes"),
    "Request Header Fields Too Large",
)
_MALFORMED_RESPONSE = _closing_problem(MalformedRequest("the request is not valid HTTP/1.1"), "Bad Request")


class _HeadersPastTheLimit(Exception):
    """Raised in a parser callback to stop the parse; answered 431 (see ``send_400_response``)."""


class HeaderDeadlineProtocol(HttpToolsProtocol):
    header_deadline: float = 10.0
    body_deadline: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        # Bytes of the request line and headers the parser has handed over: headers that
        # arrive in one read are parsed whole within it, before the count across reads sees them.
        self._parsed_header_bytes = 0
        self._headers_past_limit = False

    def _arm_body(self) -> None:
        self._disarm_body()
        self._body_timer = self.loop.call_later(self.body_deadline, self._body_too_slow)

    def _disarm_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_too_slow(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            self._arm_body()  # the app has not read what came: not the client's pause
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            self.transport.write(_BODY_TIMEOUT_RESPONSE)
        self.transport.close()

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_bytes = 0
            self._header_timer = self.loop.call_later(self.header_deadline, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._body_timer is not None:
            self._arm_body()  # a piece of the body came: the pause starts again
        super().data_received(data)
        # Still armed after the parser took this piece: the headers are not complete yet. (A
        # piece that completes them also carries body bytes, which must not count.)
        if self._header_timer is not None and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._disarm()
                self.transport.write(_HEADERS_TOO_LARGE_RESPONSE)
                self.transport.close()

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers a request it cannot parse itself, in text/plain; ours are problems.
        # A parse stopped by the header limit (a callback raised) comes here too.
        self._disarm()
        self.transport.write(_HEADERS_TOO_LARGE_RESPONSE if self._headers_past_limit else _MALFORMED_RESPONSE)
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._parsed_header_bytes = 0
        self._arm()

    def _count_header_bytes(self, size: int) -> None:
        self._parsed_header_bytes += size
        if self._parsed_header_bytes > MAX_HEADER_BYTES:
            self._headers_past_limit = True
            raise _HeadersPastTheLimit  # httptools stops and raises a parser error: 431 above

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        self._arm_body()  # disarmed at once by a request without a body (its message completes)

    def on_message_complete(self) -> None:
        self._disarm_body()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_body()
        super().connection_lost(exc)


class LastwordServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting before clients are told to reconnect
        service = getattr(getattr(self.config.app, "state", None), "service", None)
        if service is not None:
            service.drain()
        await super().shutdown(sockets)


def uvicorn_config(settings: Settings, *, clock: Callable[[], float] = time.time, **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration for ``settings`` (``lastword serve`` and the tests use it);
    ``clock`` is handed to :func:`create_app`."""
    protocol = type("Protocol", (HeaderDeadlineProtocol,), {"header_deadline": settings.header_timeout_seconds,
                                                           "body_deadline": settings.body_timeout_seconds})
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "http": protocol,
        "log_level": settings.log_level,
        "log_config": None,  # keep the JSON handlers configured by lastword.http.logs
        "access_log": False,  # lastword's own request log leaves query strings (tokens) out
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds,
        "lifespan": "on",
    }
    options.update(overrides)
    return uvicorn.Config(create_app(settings, clock=clock), **options)
