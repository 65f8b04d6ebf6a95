"""``/ds/{path}``: the Durable Streams protocol over HTTP (SPEC §17, ``PROTOCOL.md`` of
``durable-streams/durable-streams``).

The stream's name is its path below ``/ds`` (``/ds/chat/1`` is the stream ``/chat/1``, which is
also how ``Stream-Forked-From`` names it). One route takes every method, because the protocol
gives each method of one URL its own meaning: ``PUT`` creates (or forks), ``POST`` appends or
closes, ``GET`` reads (catch-up, ``live=long-poll``, ``live=sse``), ``HEAD`` answers the metadata,
``DELETE`` deletes. Refusals are the protocol's statuses and headers, with a problem document
as the body: the rules, the store and the service say why they refuse (a
:class:`~lastword.errors.DsRefusal`'s reason and facts), and this module alone turns that into
a status and headers. Every answer carries the browser security headers the protocol recommends.

``HEAD`` is served here, not by :mod:`lastword.http.head`: the protocol's HEAD answers metadata
without reading the stream and leaves a sliding TTL alone, which a GET would not.

The route is a plain Starlette :class:`~starlette.routing.Route`, not a FastAPI one, and the app
puts it ahead of every other route: it reads its headers and body itself and has no
dependencies, so FastAPI's dependency solving is pure cost on a path a token stream hits once
per message, as is matching the request against every ``/v1`` route first. An append (``POST``)
goes shorter still: the app hands it to :func:`serve` past FastAPI's own layers
(:class:`lastword.main.App`), and it is answered with raw headers (:class:`_Answer`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from lastword.ds_service import StreamService, run_id_of
from lastword.errors import DsReason, DsRefusal, LastwordError, PayloadTooLarge, RunEnded, problem_json
from lastword.http import ds_runs, sse
from lastword.rules import ds
from lastword.rules.ds import AppendRequest, CreateRequest, Slice

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
SECURITY = {"X-Content-Type-Options": "nosniff", "Cross-Origin-Resource-Policy": "cross-origin"}
#: ``SECURITY`` as a response's raw headers.
_SECURITY_RAW = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in SECURITY.items()]
#: Catch-up reads of a stream's past do not change; the tail and live answers do.
CACHEABLE = "private, max-age=60, stale-while-revalidate=300"
ALLOWED_HEADERS = ("Content-Type, Authorization, If-None-Match, Stream-TTL, Stream-Expires-At, Stream-Closed, "
                   "Stream-Seq, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, "
                   "Stream-Fork-Sub-Offset")
EXPOSED_HEADERS = ("Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, "
                   "Stream-Expires-At, ETag, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, "
                   "Producer-Received-Seq, Location, Stream-SSE-Data-Encoding")


def streams_of(request: Request) -> StreamService:
    service: StreamService = request.app.state.core.streams
    return service


#: The status the protocol answers each refusal with.
REFUSAL_STATUS: dict[DsReason, int] = {
    "invalid": 400, "stale_epoch": 403, "not_found": 404, "not_deletable": 405, "conflict": 409,
    "closed": 409, "gone": 410, "too_large": 413,
}
#: What a path that cannot be deleted (a run's) can be asked.
RUN_METHODS = "GET, HEAD, PUT, POST"


def refusal_headers(error: DsRefusal) -> dict[str, str]:
    """The protocol's headers for a refusal's facts: what a producer is to send next, the
    current epoch, where a closed stream ends."""
    headers: dict[str, str] = {}
    if error.expected_seq is not None:
        headers["Producer-Expected-Seq"] = str(error.expected_seq)
    if error.received_seq is not None:
        headers["Producer-Received-Seq"] = str(error.received_seq)
    if error.epoch is not None:
        headers["Producer-Epoch"] = str(error.epoch)
    if error.reason == "closed":
        headers["Stream-Closed"] = "true"
        if error.tail is not None:
            headers["Stream-Next-Offset"] = ds.offset(error.tail)
    if error.reason == "not_deletable":
        headers["Allow"] = RUN_METHODS
    return headers


def _refused(error: LastwordError) -> Response:
    headers = dict(SECURITY)
    status = error.http_status
    if isinstance(error, DsRefusal):
        status = REFUSAL_STATUS[error.reason]
        headers.update(refusal_headers(error))
    elif isinstance(error, RunEnded):
        headers["Stream-Closed"] = "true"  # a run written as a stream (SPEC §17): its end closed it
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return Response(problem_json(error, status), status_code=status, media_type="application/problem+json",
                    headers=headers)


def _stream_headers(found: Slice, *, content_type: bool = True) -> dict[str, str]:
    state = found.state
    headers = dict(SECURITY)
    if content_type:
        headers["Content-Type"] = state.content_type
    headers["Stream-Next-Offset"] = ds.offset(found.end)
    if state.ttl is not None:
        headers["Stream-TTL"] = str(state.ttl)
    if state.expires_at is not None:
        headers["Stream-Expires-At"] = state.expires_at
    return headers


def _header_values(request: Request) -> dict[bytes, bytes]:
    """The request's headers by (lower-case) name, each the first of its name, as
    :class:`~starlette.datastructures.Headers` answers them: one pass, not one per header asked."""
    return dict(reversed(request.scope["headers"]))


def _text(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


async def _body(request: Request, declared: str | None) -> bytes:
    """The request's body (``declared``: its ``Content-Length``), refused past
    ``LASTWORD_MAX_BODY_BYTES``. Read from the ASGI messages as :meth:`Request.stream` reads them
    (a disconnect is :class:`ClientDisconnect`), without its generator: a token stream sends one
    small body per message."""
    limit: int = request.app.state.settings.max_body_bytes
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is over the {limit}-byte limit")
    receive = request.receive
    pieces: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            piece: bytes = message.get("body", b"")
            if piece:
                size += len(piece)
                if size > limit:
                    raise PayloadTooLarge(f"the body is over the {limit}-byte limit")
                pieces.append(piece)
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _name(path: str) -> str:
    return "/" + path.strip("/")


async def stream_route(request: Request) -> Response:
    try:
        method = request.method
        name = _name(request.path_params["path"])
        run_id = run_id_of(name)
        if method == "PUT":
            return await (ds_runs.create(request, run_id, SECURITY) if run_id else _create(request, name))
        if method == "POST":
            return await (ds_runs.append(request, run_id, SECURITY) if run_id else _append(request, name))
        if method == "DELETE":
            await streams_of(request).delete(name)
            return Response(status_code=204, headers=SECURITY)
        if method == "HEAD":
            return _head(await streams_of(request).head(name))
        if method == "OPTIONS":
            return Response(status_code=204, headers={
                **SECURITY, "Access-Control-Allow-Methods": "GET, HEAD, PUT, POST, DELETE",
                "Access-Control-Allow-Headers": ALLOWED_HEADERS, "Access-Control-Expose-Headers": EXPOSED_HEADERS})
        return await _read(request, name)
    except LastwordError as error:
        return _refused(error)


async def _create(request: Request, name: str) -> Response:
    headers = request.headers
    ttl = ds.parse_ttl(headers.get("stream-ttl"))
    expires_at = headers.get("stream-expires-at")
    expires_epoch = ds.parse_expires_at(expires_at)
    if ttl is not None and expires_epoch is not None:
        raise DsRefusal("invalid", "Stream-TTL and Stream-Expires-At exclude each other")
    forked_from = headers.get("stream-forked-from")
    sub_offset = headers.get("stream-fork-sub-offset")
    if forked_from is None and (headers.get("stream-fork-offset") is not None or sub_offset is not None):
        raise DsRefusal("invalid", "Stream-Fork-Offset needs Stream-Forked-From")
    fork_sub_offset = ds.parse_sub_offset(sub_offset)
    if forked_from is not None:
        forked_from = forked_from.strip()
        if forked_from.startswith("/ds/"):
            forked_from = forked_from[3:]
        forked_from = _name(forked_from)
    content_type = headers.get("content-type")
    body = await _body(request, headers.get("content-length"))
    outcome = await streams_of(request).create(CreateRequest(
        path=name, content_type=content_type.strip() if content_type else None, ttl=ttl,
        expires_at=expires_at.strip() if expires_at else None, expires_epoch=expires_epoch,
        closed=ds.flag(headers.get("stream-closed")), body=body, fork_of=forked_from,
        fork_offset=headers.get("stream-fork-offset"), fork_sub_offset=fork_sub_offset,
    ))
    state = outcome.state
    answer = _stream_headers(Slice(state, state.tail, []))
    if state.closed:
        answer["Stream-Closed"] = "true"
    if outcome.created:
        answer["Location"] = str(request.url.replace(query=""))
    return Response(status_code=201 if outcome.created else 200, headers=answer)


class _Answer(Response):
    """A response with no body whose raw headers are built by the caller: what an append
    answers, once per message of a token stream (a :class:`Response` builds them from a dict)."""

    def __init__(self, status_code: int, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status_code
        self.body = b""
        self.background: BackgroundTask | None = None
        self.raw_headers = raw_headers


async def _append(request: Request, name: str) -> Response:
    headers = _header_values(request)
    producer = ds.parse_producer(_text(headers, b"producer-id"), _text(headers, b"producer-epoch"),
                                 _text(headers, b"producer-seq"))
    body = await _body(request, _text(headers, b"content-length"))
    service = streams_of(request)
    outcome = await service.append(AppendRequest(
        path=name, content_type=_text(headers, b"content-type"), body=body,
        close=ds.flag(_text(headers, b"stream-closed")), producer=producer, stream_seq=_text(headers, b"stream-seq"),
        max_messages=service.max_json_messages,
    ))
    answer = [*_SECURITY_RAW, (b"stream-next-offset", ds.offset(outcome.state.tail).encode())]
    if outcome.state.closed:
        answer.append((b"stream-closed", b"true"))
    if outcome.producer is not None:
        epoch, seq = outcome.producer
        answer += [(b"producer-epoch", str(epoch).encode()), (b"producer-seq", str(seq).encode())]
        if outcome.stored:
            # The protocol's 200 acknowledges a producer's stored append; anything else is 204.
            answer.append((b"content-length", b"0"))
            return _Answer(200, answer)
    return _Answer(204, answer)


def _head(found: Slice) -> Response:
    headers = _stream_headers(found)
    headers["Cache-Control"] = "no-store"
    if found.state.closed:
        headers["Stream-Closed"] = "true"
    return Response(status_code=200, headers=headers)


def _read_headers(found: Slice, *, live: bool, client_cursor: str | None, service: StreamService) -> dict[str, str]:
    headers = _stream_headers(found)
    closed_at_end = found.state.closed and found.up_to_date
    if found.up_to_date:
        headers["Stream-Up-To-Date"] = "true"
    if closed_at_end:
        headers["Stream-Closed"] = "true"
    if live or not closed_at_end:
        headers["Stream-Cursor"] = service.cursor(client_cursor)
    return headers


async def _read(request: Request, name: str) -> Response:
    query = request.query_params
    service = streams_of(request)
    live = query.get("live")
    text = query.get("offset")
    if live is not None and live not in ("long-poll", "sse"):
        raise DsRefusal("invalid", f"live={live!r} is not a read mode (long-poll, sse)")
    if live is not None and text is None:
        raise DsRefusal("invalid", "a live read needs an offset")
    client_cursor = query.get("cursor")
    if text is not None and text not in (ds.START, ds.NOW) and ds.position_of(text) is None:
        raise DsRefusal("invalid", f"offset {text!r} is not one this server hands out")
    found = await service.read(name, text if text is not None else ds.START)
    if live == "sse":
        return _sse(request, service, name, found, client_cursor)
    if live == "long-poll" and not found.entries and not found.state.closed:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.app.state.settings.ds_long_poll_seconds
        while not (found.entries or found.state.closed or service.draining) and loop.time() < deadline:
            found = await service.wait(name, found.start, deadline - loop.time())
    if live == "long-poll" and not found.entries:
        headers = _read_headers(found, live=True, client_cursor=client_cursor, service=service)
        headers["Stream-Up-To-Date"] = "true"
        del headers["Content-Type"]
        return Response(status_code=204, headers=headers)
    headers = _read_headers(found, live=live is not None, client_cursor=client_cursor, service=service)
    if text == ds.NOW:
        headers["Cache-Control"] = "no-store"
    else:
        tag = ds.etag(found.state.uid, found.start, found.end, found.state.closed and found.up_to_date)
        headers["ETag"] = tag
        headers["Cache-Control"] = "no-store" if found.up_to_date else CACHEABLE
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={k: v for k, v in headers.items() if k != "Content-Type"})
    return Response(ds.body_of(found.entries, found.state.content_type), status_code=200, headers=headers)


#: Out of the OpenAPI schema (``include_in_schema``): :mod:`lastword.http.ds_docs` describes it.
route = Route("/ds/{path:path}", stream_route, methods=["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"],
              include_in_schema=False)


def _control(found: Slice, service: StreamService, client_cursor: str | None) -> bytes:
    closed = found.state.closed and found.up_to_date
    control: dict[str, object] = {"streamNextOffset": ds.offset(found.end)}
    if not closed:
        control["streamCursor"] = service.cursor(client_cursor)
    if found.up_to_date:
        control["upToDate"] = True
    if closed:
        control["streamClosed"] = True
    return _event("control", json.dumps(control, separators=(",", ":")))


def _event(name: str, data: str) -> bytes:
    """One SSE event, its data as ``data:`` lines with no space after the colon: the space would
    be taken off by any SSE parser anyway, and the protocol's examples and suite write none."""
    lines = _LINE_BREAK.split(data)
    return (f"event: {name}\n" + "".join(f"data:{line}\n" for line in lines) + "\n").encode()


class _LastDataEvent:
    """The ``data`` event of the last slice encoded: a change delivered to a thousand readers
    hands each the same slice, which is encoded once."""

    found: Slice | None = None
    content_type = ""
    event = b""


def _data_event(found: Slice, content_type: str) -> bytes:
    last = _LastDataEvent
    if last.found is not found or last.content_type != content_type:
        last.event = _event("data", ds.sse_data(found.entries, content_type))
        last.found, last.content_type = found, content_type
    return last.event


def _sse(request: Request, service: StreamService, name: str, first: Slice, client_cursor: str | None) -> Response:
    settings = request.app.state.settings
    content_type = first.state.content_type
    stop = asyncio.Event()
    gone = False

    def disconnected() -> None:
        nonlocal gone
        gone = True
        stop.set()

    async def messages() -> AsyncGenerator[bytes, None]:
        loop = asyncio.get_running_loop()
        ends_at = loop.time() + settings.ds_sse_seconds
        found = first
        while True:
            if found.entries:
                yield _data_event(found, content_type) + _control(found, service, client_cursor)
            elif found is first or found.state.closed:
                yield _control(found, service, client_cursor)
            if found.state.closed and found.up_to_date:
                return
            position = found.end
            if not found.up_to_date:
                found = await service.read(name, position, touch=False)
                continue
            while True:
                left = ends_at - loop.time()
                if gone or left <= 0 or service.draining:
                    return
                try:
                    found = await service.wait(name, position, min(left, settings.keepalive_seconds), stop,
                                               deliver if response.detached else None)
                except LastwordError:
                    return  # deleted or expired meanwhile: the stream ends
                if found.entries or found.state.closed:
                    break
                position = found.start  # past what was delivered meanwhile
                if not gone:
                    yield b":\r\n\r\n"

    def deliver(found: Slice) -> bool:
        """Write what a change brought while the stream waits (:meth:`StreamService.wait`)."""
        return response.write_now(_data_event(found, content_type) + _control(found, service, client_cursor))

    headers = {**SECURITY, "Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no"}
    if ds.sse_base64(content_type):
        headers["Stream-SSE-Data-Encoding"] = "base64"
    response = sse.EventStream(messages(), send_timeout=settings.sse_send_timeout_seconds,
                               on_disconnect=disconnected, release=lambda: None, headers=headers,
                               content_type="text/event-stream")
    return response
