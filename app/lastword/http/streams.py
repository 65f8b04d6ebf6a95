"""Server-sent event streams: one run's lifecycle (and chunks), and the firehose of every run.

Ids: a run stream's message ids are the run's ``seq`` (the ``run/snapshot`` takes the ``seq``
it reflects), the firehose's are its own global order. Either way a client resumes with
``Last-Event-ID`` (or ``?after=``) and gets exactly what followed.

The catch-up (the log after the resume point, then live events, back to the log after an
overflow) is :mod:`lastword.follow`'s; this face frames it as SSE (:data:`SSE_FRAMING`).

The subscription is registered in the route, before the response's headers go out, so a client
that has its headers misses nothing that happens afterwards (the firehose has no snapshot to
mark that point). It is released by the response, not by the message generator: when a client
leaves before the first message the generator never starts, and a generator that never
started never runs its ``finally``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request

from lastword.errors import InvalidLastEventId
from lastword.fanout.hub import Subscription
from lastword.follow import Cursor, Framing, feed_cursor, follow_feed, follow_run, run_cursor
from lastword.http.sse import EventStream, encode, json_message
from lastword.http.strict_ints import DecimalDigits, parse_decimal
from lastword.http.views import result_view, run_view
from lastword.rules.lifecycle import LIFECYCLE_TYPES
from lastword.rules.limits import MAX_INT64
from lastword.rules.records import RunRecord, StoredEvent
from lastword.schemas import Problem
from lastword.service import RunService

router = APIRouter(prefix="/v1", tags=["streams"])

SSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": "An SSE stream."},
    400: {"model": Problem, "description": "A bad resume id."},
    404: {"model": Problem, "description": "Unknown run."},
    410: {"model": Problem, "description": "The run was deleted by retention."},
    503: {"model": Problem, "description": "The replica is draining (`draining`, with `Retry-After`): "
          "resume elsewhere, or here after the restart, with Last-Event-ID."},
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
        encoded = event.encoded[message_id] = json_message(orjson.dumps(event.body), event=event.type, id=message_id)
    return encoded


def _reconnect(reason: str, last: int) -> bytes:
    """The last message of a stream the service ends: the client should reconnect.

    It has no id, so a client's Last-Event-ID stays the last real event's; ``retry`` tells an
    EventSource how long to wait before it reconnects.
    """
    data = orjson.dumps({"reason": reason, "lastEventId": last}).decode()
    return encode(data, event="server/reconnect", retry_ms=1000)


#: The keep-alive: one comment line, without the blank line that would end an event.
#:
#: A comment followed by a blank line is a valid no-op by the SSE specification, but some
#: clients (httpx-sse 0.4 among them) dispatch an empty ``message`` event on that blank line,
#: repeating the last id: a reader would see a phantom event after every keep-alive. A lone
#: comment line is skipped by every parser, and the next event's lines follow it as usual.
#: A stream sends it when its subscription's timer says it has been quiet for
#: ``LASTWORD_KEEPALIVE_SECONDS`` (:meth:`lastword.fanout.hub.Subscription.pace`): no task per
#: connection for it.
KEEPALIVE = b": ping\r\n"

#: How both streams frame what :mod:`lastword.follow` yields.
SSE_FRAMING = Framing(event=_message, keepalive=KEEPALIVE, ended=_reconnect)


def _releaser(service: RunService, run_id: str | None, subscription: Subscription) -> Callable[[], None]:
    """The callable that ends the subscription (call it exactly once)."""

    def release() -> None:
        service.unsubscribe(run_id, subscription)

    return release


def _response(
    request: Request, subscription: Subscription, messages: AsyncGenerator[bytes, None], release: Callable[[], None],
    cursor: Cursor,
) -> EventStream:
    settings = request.app.state.settings
    subscription.pace(settings.keepalive_seconds, settings.sse_max_lifetime_seconds)
    response = EventStream(
        messages,
        # A client that stops reading is cut off once a send has waited this long; it
        # resumes with Last-Event-ID. Its hub buffer is bounded meanwhile.
        send_timeout=settings.sse_send_timeout_seconds,
        on_disconnect=lambda: subscription.end("disconnect"),
        release=release,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
    cursor.write_now = response.write_now
    return response


@router.get("/runs/{runId}/stream", responses=SSE_RESPONSES, response_class=EventStream)
async def run_stream(
    request: Request,
    runId: str,
    include: Annotated[str | None, Query(description="'chunks' adds live assistant/chunk deltas.")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_INT64, description="Resume after this id."), DecimalDigits] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventStream:
    """SSE of one run: ``run/snapshot``, ``subagent/start``, ``subagent/end`` (and chunks)."""
    service: RunService = request.app.state.core.runs
    service.refuse_if_draining()
    types = LIFECYCLE_TYPES | ({"assistant/chunk"} if include == "chunks" else set())
    resume = _resume_point(last_event_id, after)
    subscription = service.subscribe_run(runId, frozenset(types))
    release = _releaser(service, runId, subscription)
    try:
        if resume is None:
            run, turn = await service.reads.snapshot(runId)
            snapshot: bytes | None = encode(
                orjson.dumps({"run": run_view(run), "result": result_view(turn)}).decode(),
                event="run/snapshot",
                id=run.last_seq,
            )
        else:
            run = await service.reads.get_run(runId)
            _check_sent(resume, run.last_seq)
            snapshot = None
    except BaseException:
        release()
        raise
    cursor = run_cursor(run, run.last_seq if resume is None else resume, SSE_FRAMING)
    messages = _run_messages(service, subscription, run, snapshot, cursor, frozenset(types))
    return _response(request, subscription, messages, release, cursor)


async def _run_messages(
    service: RunService,
    subscription: Subscription,
    run: RunRecord,
    snapshot: bytes | None,
    cursor: Cursor,
    types: frozenset[str],
) -> AsyncGenerator[bytes, None]:
    if snapshot is not None:
        yield snapshot
        if run.status == "ended":
            return
    async with contextlib.aclosing(follow_run(service, subscription, run, cursor, SSE_FRAMING, types)) as follow:
        async for chunk in follow:
            yield chunk


@router.get("/stream", responses=SSE_RESPONSES, response_class=EventStream)
async def firehose(
    request: Request,
    parentRunId: str | None = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_INT64, description="Resume after this id."), DecimalDigits] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventStream:
    """SSE of every run's lifecycle events, for dashboards; ``?parentRunId=`` filters."""
    service: RunService = request.app.state.core.runs
    service.refuse_if_draining()
    resume = _resume_point(last_event_id, after)
    subscription = service.subscribe_feed(parentRunId)
    release = _releaser(service, None, subscription)
    try:
        if resume is None:
            start = await service.reads.last_feed_id()
        else:
            # Against the highest id ever issued: retention may have deleted the newest rows,
            # and an id the stream did send must still resume (from what follows it).
            _check_sent(resume, await service.reads.highest_feed_id_issued())
            start = resume
    except BaseException:
        release()
        raise
    cursor = feed_cursor(start, SSE_FRAMING)
    messages = follow_feed(service, subscription, parentRunId, cursor, SSE_FRAMING)
    return _response(request, subscription, messages, release, cursor)
