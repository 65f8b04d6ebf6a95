"""Serving the app with uvicorn: a deadline for request headers, and a graceful shutdown.

Shutdown (SIGTERM, or ``should_exit``) is a drain, described on :class:`LastwordServer`: the
listener stays open while streams are told to reconnect, long polls answer and in-flight
requests — ingests included — finish, all within ``LASTWORD_DRAIN_SECONDS``; then the lifespan
closes the store.

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

An event stream's body is written below the ASGI chain (:mod:`lastword.http.sse`): the protocol
offers :data:`~lastword.http.sse.DETACH` in every request's scope, and a stream that takes it
gets a :class:`_DetachedBody` writing chunked body pieces straight to the transport; its request
returns, and its request cycle is dropped. Until the body ends the connection is the stream's:
a request the client pipelines behind it waits, unread, as uvicorn would make it wait.
"""

from __future__ import annotations

import asyncio
import ctypes
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
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
from lastword.http.body import BODY_DRAINED
from lastword.http.sse import DETACH
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


def _chunked(data: bytes) -> bytes:
    """One piece of a chunked body (RFC 9112 §7.1)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


class _LastPiece:
    """The chunked piece of the last chunk a stream wrote, kept for the next stream.

    One publish hands every waiting subscriber of a run the same bytes object (an event is
    framed once, :mod:`lastword.follow`), so a thousand writes of a turn's end framed the same
    piece a thousand times; kept here, it is framed once and the same object is written to
    every connection. It is recognised by identity, and held (one chunk, whatever its size),
    so no other chunk can take its place in memory and be mistaken for it. The pair is one
    tuple, replaced whole: servers on other threads of the process never see half of one.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = (b"", _chunked(b""))

    def of(self, chunk: bytes) -> bytes:
        last = self._last
        if last[0] is chunk:
            return last[1]
        piece = _chunked(chunk)
        self._last = (chunk, piece)
        return piece


_last_piece = _LastPiece()


class _DetachedBody:
    """An event stream's body, written to the connection below the ASGI chain (chunked, as
    uvicorn had announced in the headers); see :class:`lastword.http.sse.Line`."""

    __slots__ = ("_protocol", "_transport", "_flow", "_gone", "keep_alive", "closed")

    def __init__(self, protocol: HeaderDeadlineProtocol, keep_alive: bool, gone: Callable[[], None]) -> None:
        self._protocol = protocol
        # The connection's for as long as the body is: looked up once, not on every write.
        self._transport = protocol.transport
        self._flow = protocol.flow
        self._gone = gone
        self.keep_alive = keep_alive
        #: The client has gone: every later write is a no-op.
        self.closed = False

    async def send(self, chunk: bytes) -> None:
        flow = self._flow
        if flow.write_paused and not self.closed:
            await flow.drain()  # released by the buffer draining, or by the connection's loss
        if not self.closed:
            self._transport.write(_last_piece.of(chunk))

    def write_now(self, chunk: bytes) -> bool:
        transport = self._transport
        if self.closed or transport.is_closing():
            return True  # the client has gone: there is nowhere to write, and the stream ends
        if self._flow.write_paused:
            return False
        transport.write(_last_piece.of(chunk))
        return True

    def track(self, task: asyncio.Task[None]) -> None:
        tasks = self._protocol.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def lost(self) -> None:
        self.closed = True
        self._gone()

    def finish(self) -> None:
        protocol = self._protocol
        protocol._stream = None
        if self.closed:
            return
        protocol.transport.write(b"0\r\n\r\n")
        if not self.keep_alive or protocol.draining:
            protocol.transport.close()
            return
        protocol.on_response_complete()  # as uvicorn ends a response: keep-alive timer, reading resumed
        held, protocol._held = protocol._held, []
        if held:
            protocol.data_received(b"".join(held))

    def abort(self) -> None:
        self._protocol._stream = None
        self._protocol.transport.close()


class Deadline:
    """A deadline restarted often and seldom reached (a connection's headers, its body's pauses).

    Restarting it only notes the time: the one timer it keeps, when it fires, waits out what is
    left. A timer made and cancelled at every piece of a body, and twice per request, cost the
    event loop more than the request's own routing.
    """

    __slots__ = ("_loop", "_seconds", "_expired", "_since", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float, expired: Callable[[], None]) -> None:
        self._loop = loop
        self._seconds = seconds
        self._expired = expired
        self._since: float | None = None  # when the wait began; None: stopped
        self._timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._since is not None

    def start(self) -> None:
        """(Re)start the wait from now."""
        self._since = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_later(self._seconds, self._check)

    def stop(self) -> None:
        self._since = None

    def close(self) -> None:
        self._since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._since is None:
            return
        left = self._since + self._seconds - self._loop.time()
        if left > 0:
            self._timer = self._loop.call_later(left, self._check)
            return
        self._since = None
        self._expired()


class HeaderDeadlineProtocol(HttpToolsProtocol):
    header_deadline: float = 10.0
    body_deadline: float = 30.0
    #: Set (on the server's own subclass) when the server drains: every response closes its
    #: connection.
    draining: bool = False
    #: The event stream writing this connection's response below the ASGI chain, if one is.
    #: (Class-level defaults: most connections never set them, and an idle one stays small.)
    _stream: _DetachedBody | None = None
    #: What the client sent while the stream had the connection (read once it ends).
    _held: list[bytes] = []
    #: The drain cut the body of the request in flight (see :meth:`cut_body`).
    _body_drained: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers = Deadline(self.loop, self.header_deadline, self._headers_too_slow)
        self._body = Deadline(self.loop, self.body_deadline, self._body_too_slow)
        # Bytes of the request line and headers the parser has handed over: headers that
        # arrive in one read are parsed whole within it, before the count across reads sees them.
        self._parsed_header_bytes = 0
        self._headers_past_limit = False

    def _body_too_slow(self) -> None:
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            self._body.start()  # the app has not read what came: not the client's pause
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            self.transport.write(_BODY_TIMEOUT_RESPONSE)
        self.transport.close()

    def _arm(self) -> None:
        if not self._headers.running:
            self._header_bytes = 0
            self._headers.start()

    def _disarm(self) -> None:
        self._headers.stop()

    def _headers_too_slow(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _detach(self, gone: Callable[[], None]) -> _DetachedBody | None:
        """Take the response body over from the request's ASGI cycle (:data:`DETACH`)."""
        cycle = self.cycle
        if (cycle is None or not cycle.response_started or cycle.response_complete or cycle.disconnected
                or not cycle.chunked_encoding or self.pipeline):
            return None  # a HEAD (its body is complete), a client gone, or not a chunked body
        self._stream = body = _DetachedBody(self, cycle.keep_alive, gone)
        # uvicorn takes the response as complete: the app may return without an error, and a
        # further request the client sends would start; data_received holds it back instead.
        cycle.response_complete = True
        self.cycle = None  # type: ignore[assignment]
        self.scope = None  # type: ignore[assignment]
        self.headers = None  # type: ignore[assignment]
        return body

    def data_received(self, data: bytes) -> None:
        if self._stream is not None:
            # The stream has the connection: what comes now is a pipelined request (an SSE
            # client sends none), read once the stream ends.
            if not self._held:
                self._held = []
            self._held.append(data)
            self.flow.pause_reading()
            return
        if self._body.running:
            self._body.start()  # a piece of the body came: the pause starts again
        super().data_received(data)
        # Still armed after the parser took this piece: the headers are not complete yet. (A
        # piece that completes them also carries body bytes, which must not count.)
        if self._headers.running and not self.transport.is_closing():
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

    def _drained(self) -> bool:
        return self._body_drained

    def cut_body(self) -> bool:
        """The drain ran out of time: end the body of the request in flight where it stands
        (its read wakes and the app answers 503 with what the whole lines made); whether one was."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.disconnected or not cycle.more_body:
            return False
        self._body_drained = True
        cycle.message_event.set()
        return True

    def on_headers_complete(self) -> None:
        self._disarm()
        self._body_drained = False
        self.scope["extensions"] = {DETACH: self._detach, BODY_DRAINED: self._drained}  # type: ignore[dict-item]
        super().on_headers_complete()
        if self.draining and self.cycle is not None:
            self.cycle.keep_alive = False
        self._body.start()  # stopped at once by a request without a body (its message completes)

    def on_message_complete(self) -> None:
        self._body.stop()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers.close()
        self._body.close()
        if self._stream is not None:
            self._stream.lost()
        super().connection_lost(exc)  # releases a send waiting for buffer space

    def shutdown(self) -> None:
        if self._stream is not None:
            self._stream.keep_alive = False  # the drain ends the stream; then the connection closes
            return
        super().shutdown()


class LastwordServer(uvicorn.Server):
    """uvicorn's server with lastword's drain (SPEC §18) in place of its plain shutdown.

    On SIGTERM the replica drains while its listener stays open: the service refuses new streams
    and long polls (503 ``draining``, ``Retry-After``) and ``/readyz`` answers 503, every open
    stream gets ``server/reconnect`` and ends, every parked long poll answers with the result as
    it stands, and every response from then on closes its connection (a client's next request
    opens a new one: through a load balancer, to another replica). Once no request is in flight,
    and no webhook attempt is (the sender leases no more once the drain begins), or when
    ``LASTWORD_DRAIN_SECONDS`` since the signal have passed, the listener closes, what is still
    running is cancelled (a batch commits whole or not at all; a webhook attempt's lease is
    released for another replica) and the lifespan closes the store. A second SIGTERM (or SIGINT)
    skips what is left: the process exits at once, keeping what was committed.
    """

    #: How often the drain looks whether requests are still in flight.
    DRAIN_POLL_SECONDS = 0.05
    #: Seconds before the drain's deadline (at most a quarter of it) at which bodies still
    #: arriving are cut, so their requests answer 503 with what they stored before it.
    BODY_CUT_SECONDS = 1.0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True  # uvicorn forces only on a second SIGINT; a pod sends SIGTERM
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout_graceful_shutdown or 0)
        core = getattr(getattr(self.config.app, "state", None), "core", None)
        sender = None if core is None else core.sender
        if core is not None:
            core.drain()
        protocol = self.config.http_protocol_class
        if isinstance(protocol, type) and issubclass(protocol, HeaderDeadlineProtocol):
            protocol.draining = True
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle ones close now, busy ones after their response
        grace = self.config.timeout_graceful_shutdown or 0
        cut_at = deadline - min(self.BODY_CUT_SECONDS, grace / 4)
        while ((self.server_state.tasks or (sender is not None and sender.busy))
               and not self.force_exit and loop.time() < cut_at):
            await asyncio.sleep(self.DRAIN_POLL_SECONDS)
        # Streamed bodies still arriving (a child's whole run) end here, answered 503 with what
        # their whole lines stored, rather than cancelled with their tasks (a 500); a second
        # SIGTERM cuts them too and gives them the same short while to answer.
        if any([connection.cut_body() for connection in list(self.server_state.connections)
                if isinstance(connection, HeaderDeadlineProtocol)]):
            answer_by = loop.time() + min(self.BODY_CUT_SECONDS, grace / 4)
            until = answer_by if self.force_exit else max(answer_by, deadline)
            while self.server_state.tasks and loop.time() < until:
                await asyncio.sleep(self.DRAIN_POLL_SECONDS)
        else:
            while ((self.server_state.tasks or (sender is not None and sender.busy))
                   and not self.force_exit and loop.time() < deadline):
                await asyncio.sleep(self.DRAIN_POLL_SECONDS)
        # What is left of the deadline is uvicorn's grace for the requests still running.
        # (uvicorn hands it to asyncio.wait_for, which takes seconds as a float.)
        self.config.timeout_graceful_shutdown = max(0.0, deadline - loop.time())  # type: ignore[assignment]
        await super().shutdown(sockets)


#: A block of memory at least this big is mapped on its own, and given back when freed.
BIG_BLOCK_BYTES = 256 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def give_big_blocks_back(threshold: int = BIG_BLOCK_BYTES) -> bool:
    """Make glibc's allocator give big blocks back to the system when they are freed.

    By default glibc raises the size it maps blocks from to the size of the last mapped block
    freed (up to 32 MiB): after the first big body, a 16 MB buffer comes from the heap of the
    thread that made it and stays with the process when freed, where a buffer made in another
    thread (the store's, the translation's) cannot reuse it. A provider body then cost the
    server twice what it holds. A fixed threshold keeps what a body costs to what it holds at
    once (``tests/test_provider_memory.py``). ``False`` where the C library has no ``mallopt``.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS): their allocators decide
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def uvicorn_config(settings: Settings, *, clock: Callable[[], float] = time.time, app: FastAPI | None = None,
                   **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration for ``settings`` (``lastword serve`` and the tests use it), serving
    ``app`` (by default ``create_app(settings, clock=clock)``)."""
    protocol = type("Protocol", (HeaderDeadlineProtocol,), {"header_deadline": settings.header_timeout_seconds,
                                                           "body_deadline": settings.body_timeout_seconds})
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "http": protocol,
        "log_level": settings.log_level,
        "log_config": None,  # keep the JSON handlers configured by lastword.http.logs
        "access_log": False,  # lastword's own request log leaves query strings (tokens) out
        "timeout_graceful_shutdown": settings.drain_seconds,
        # uvicorn's 5 s is shorter than the idle timeout of most pools and proxies (Node's undici
        # 4 s, load balancers 60 s): a server closing first races a client reusing the connection,
        # and the client's request dies with "other side closed".
        "timeout_keep_alive": settings.http_keepalive_seconds,
        "lifespan": "on",
    }
    options.update(overrides)
    return uvicorn.Config(app or create_app(settings, clock=clock), **options)
