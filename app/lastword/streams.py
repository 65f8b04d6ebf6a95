"""Server-sent event streams: one run's lifecycle (and chunks), and the firehose of every run.

Ids: a run stream's message ids are the run's ``seq`` (the ``run/snapshot`` takes the ``seq``
it reflects), the firehose's are its own global order. Either way a client resumes with
``Last-Event-ID`` (or ``?after=``) and gets exactly what followed.

Order of work for a subscription: register with the hub first, then read the log after the
resume point, then take live events, dropping any the log already gave. A subscriber that
fell behind (its bounded buffer filled) goes back to the log instead of being fed from memory.

The subscription is registered in the route, before the response's headers go out, so a client
that has its headers misses nothing that happens afterwards (the firehose has no snapshot to
mark that point). It is released by the response, not by the message generator: when a client
leaves before the first message the generator never starts, and a generator that never
started never runs its ``finally``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from lastword.limits import MAX_INT64
from lastword.strict_ints import DecimalDigits, parse_decimal
from lastword.errors import InvalidLastEventId
from lastword.hub import IDLE, Subscription
from lastword.lifecycle import LIFECYCLE_TYPES, closes_run_stream
from lastword.schemas import Problem
from lastword.service import RunService
from lastword.records import RunRecord, StoredEvent
from lastword.views import result_view, run_view

router = APIRouter(prefix="/v1")

SSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": "An SSE stream."},
    400: {"model": Problem, "description": "A bad resume id."},
    404: {"model": Problem, "description": "Unknown run."},
    410: {"model": Problem, "description": "The run was deleted by retention."},
}


def _resume_point(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is not None and last_event_id.strip():
        value = parse_decimal(last_event_id.strip())
        if value is None or value > MAX_INT64:
            # Ids are 64-bit in both databases; a larger one is none this stream sent.
            raise InvalidLastEventId("Last-Event-ID must be an id this stream sent")
        return value
    return after


def _check_sent(resume: int, last_id: int) -> None:
    """Refuse a resume point past the stream's end: no stream sent it, and waiting for the
    stream to reach it would silently skip everything up to there."""
    if resume > last_id:
        raise InvalidLastEventId(
            f"resume id {resume} is past the end of this stream (its last id is {last_id})", lastId=last_id,
        )


def _message(event: StoredEvent, message_id: int) -> bytes:
    """The event as SSE bytes, encoded once however many subscribers it goes to."""
    if event.encoded is None:
        event.encoded = {}
    encoded = event.encoded.get(message_id)
    if encoded is None:
        data = orjson.dumps(event.body).decode()
        encoded = event.encoded[message_id] = ServerSentEvent(data=data, event=event.type, id=str(message_id)).encode()
    return encoded


def _reconnect(reason: str, last: int) -> ServerSentEvent:
    """The last message of a stream the service ends: the client should reconnect.

    It has no id, so a client's Last-Event-ID stays the last real event's; ``retry`` tells an
    EventSource how long to wait before it reconnects.
    """
    data = orjson.dumps({"reason": reason, "lastEventId": last}).decode()
    return ServerSentEvent(data=data, event="server/reconnect", retry=1000)


def _ended(subscription: Subscription, deadline: float) -> str | None:
    """Why the service ends this stream now: shutdown, or the connection's lifetime is over."""
    if subscription.ended_by is not None:
        return subscription.ended_by
    return "lifetime" if time.monotonic() >= deadline else None


def _closes(event: StoredEvent, run: RunRecord) -> bool:
    return closes_run_stream(event.type, run.mode)


#: The keep-alive: one comment line, without the blank line that would end an event.
#:
#: A comment followed by a blank line is a valid no-op by the SSE specification, but some
#: clients (httpx-sse 0.4 among them) dispatch an empty ``message`` event on that blank line,
#: repeating the last id: a reader would see a phantom event after every keep-alive. A lone
#: comment line is skipped by every parser, and the next event's lines follow it as usual.
#: The streams send it themselves while they wait (sse-starlette's ping would cost every
#: connection a task of its own, most of the memory an idle subscriber holds).
KEEPALIVE = b": ping\r\n"


async def _live(
    subscription: Subscription, deadline: float, keepalive: float
) -> AsyncIterator[StoredEvent | bytes]:
    """Live events as they come, keep-alives while none do; ends when the subscriber fell
    behind (its caller goes back to the log), was ended, or its lifetime is over."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        event = await subscription.next(min(keepalive, left))
        if event is None:
            return
        yield KEEPALIVE if event is IDLE else event


def _releaser(service: RunService, run_id: str | None, subscription: Subscription) -> Callable[[], None]:
    """The callable that ends the subscription (call it exactly once)."""

    def release() -> None:
        service.unsubscribe(run_id, subscription)

    return release


class _SubscribedResponse(EventSourceResponse):
    """An SSE response that releases its hub subscription however the response ends."""

    def __init__(self, messages: AsyncIterator[ServerSentEvent | bytes], release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(messages, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _response(
    request: Request, messages: AsyncIterator[ServerSentEvent | bytes], release: Callable[[], None]
) -> EventSourceResponse:
    settings = request.app.state.settings
    return _SubscribedResponse(
        messages,
        release,
        ping=0,  # the streams send their own keep-alives (KEEPALIVE)
        # A client that stops reading is cut off once a send has waited this long; it
        # resumes with Last-Event-ID. Its hub buffer is bounded meanwhile.
        send_timeout=settings.sse_send_timeout_seconds,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get("/runs/{runId}/stream", responses=SSE_RESPONSES, response_class=EventSourceResponse)
async def run_stream(
    request: Request,
    runId: str,
    include: Annotated[str | None, Query(description="'chunks' adds live assistant/chunk deltas.")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_INT64, description="Resume after this id."), DecimalDigits] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventSourceResponse:
    """SSE of one run: ``run/snapshot``, ``subagent/start``, ``subagent/end`` (and chunks)."""
    service: RunService = request.app.state.service
    types = LIFECYCLE_TYPES | ({"assistant/chunk"} if include == "chunks" else set())
    resume = _resume_point(last_event_id, after)
    subscription = service.subscribe_run(runId, frozenset(types))
    release = _releaser(service, runId, subscription)
    try:
        if resume is None:
            run, turn = await service.snapshot(runId)
            snapshot = ServerSentEvent(
                data=orjson.dumps({"run": run_view(run), "result": result_view(turn)}).decode(),
                event="run/snapshot",
                id=str(run.last_seq),
            )
        else:
            run = await service.get_run(runId)
            _check_sent(resume, run.last_seq)
            snapshot = None
    except BaseException:
        release()
        raise
    start = run.last_seq if resume is None else resume
    deadline = time.monotonic() + request.app.state.settings.sse_max_lifetime_seconds
    keepalive = request.app.state.settings.keepalive_seconds
    messages = _run_messages(service, subscription, run, snapshot, start, frozenset(types), deadline, keepalive)
    return _response(request, messages, release)


async def _run_messages(
    service: RunService,
    subscription: Subscription,
    run: RunRecord,
    snapshot: ServerSentEvent | None,
    last: int,
    types: frozenset[str],
    deadline: float,
    keepalive: float,
) -> AsyncIterator[ServerSentEvent | bytes]:
    if snapshot is not None:
        yield snapshot
        if run.status == "ended":
            return
    while True:
        # Cleared before the log is read: an overflow from now on sends us back here.
        subscription.caught_up()
        # From the log: everything after the last id sent, page by page.
        while True:
            events = await service.events_after(run.run_id, last, service.page_size, types)
            for event in events:
                yield _message(event, event.seq)
                last = event.seq
                if _closes(event, run):
                    return
            if len(events) < service.page_size:
                break
        run = await service.get_run(run.run_id)
        if run.status == "ended" and last >= run.last_seq:
            return
        # Live, until the buffer overflows and the log takes over again.
        async for item in _live(subscription, deadline, keepalive):
            if isinstance(item, bytes):
                yield item
                continue
            event = item
            if event.seq <= last:
                continue
            yield _message(event, event.seq)
            last = event.seq
            if _closes(event, run):
                return
        if ended := _ended(subscription, deadline):
            yield _reconnect(ended, last)
            return


@router.get("/stream", responses=SSE_RESPONSES, response_class=EventSourceResponse)
async def firehose(
    request: Request,
    parentRunId: str | None = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_INT64, description="Resume after this id."), DecimalDigits] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventSourceResponse:
    """SSE of every run's lifecycle events, for dashboards; ``?parentRunId=`` filters."""
    service: RunService = request.app.state.service
    resume = _resume_point(last_event_id, after)
    subscription = service.subscribe_feed(parentRunId)
    release = _releaser(service, None, subscription)
    try:
        if resume is None:
            start = await service.last_feed_id()
        else:
            # Against the highest id ever issued: retention may have deleted the newest rows,
            # and an id the stream did send must still resume (from what follows it).
            _check_sent(resume, await service.highest_feed_id_issued())
            start = resume
    except BaseException:
        release()
        raise
    deadline = time.monotonic() + request.app.state.settings.sse_max_lifetime_seconds
    keepalive = request.app.state.settings.keepalive_seconds
    messages = _feed_messages(service, subscription, parentRunId, start, deadline, keepalive)
    return _response(request, messages, release)


async def _feed_messages(
    service: RunService,
    subscription: Subscription,
    parent_run_id: str | None,
    last: int,
    deadline: float,
    keepalive: float,
) -> AsyncIterator[ServerSentEvent | bytes]:
    while True:
        subscription.caught_up()
        while True:
            events = await service.feed_after(last, parent_run_id, service.page_size)
            for event in events:
                assert event.feed_id is not None
                yield _message(event, event.feed_id)
                last = event.feed_id
            if len(events) < service.page_size:
                break
        async for item in _live(subscription, deadline, keepalive):
            if isinstance(item, bytes):
                yield item
                continue
            event = item
            assert event.feed_id is not None
            if event.feed_id <= last:
                continue
            yield _message(event, event.feed_id)
            last = event.feed_id
        if ended := _ended(subscription, deadline):
            yield _reconnect(ended, last)
            return
