"""Writing a run as a Durable Stream (SPEC §17): ``PUT`` and ``POST`` at ``/ds/runs/{runId}``.

A JSON stream created there is a run (``POST /v1/runs`` with that ``runId``); each JSON message
appended to it, or given as the creation's initial content, is a §4 event, validated, folded and
selected as on ``POST /v1/runs/{runId}/events`` (the same checks, the same store transaction):
a message that is not an event refuses the whole append and stores nothing. An idempotent
producer (``Producer-Id``/``Producer-Epoch``/``Producer-Seq``) is fenced in that transaction,
so a restarted child that claims a new epoch turns its old process's writes away (403).

What a run is not, a stream here cannot ask for: another content type (409, as the protocol
answers a stream created with another one), a TTL, an expiry or a fork (400: a run has a lease,
and forks are made with ``forkOf``), ``Stream-Closed`` (400: a run closes when its turn ends,
by a ``turn/end`` event). A run is read as a stream by :mod:`lastword.ds_service`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import ValidationError

from lastword.errors import DsRefusal, EmptyBatch, NotFound, Unprocessable
from lastword.http.body import body_of
from lastword.ingest import json_input
from lastword.ingest.body import read_body
from lastword.ingest.checks import check_pushed, encode_events
from lastword.rules import ds
from lastword.schemas import RunCreate
from lastword.service import RunService

#: The headers of a stream configuration a run cannot have.
NOT_FOR_RUNS = ("stream-ttl", "stream-expires-at", "stream-forked-from", "stream-fork-offset",
                "stream-fork-sub-offset")


def _service(request: Request) -> RunService:
    service: RunService = request.app.state.core.runs
    return service


def _require_json(content_type: str | None) -> None:
    if not ds.is_json(content_type or ""):
        raise DsRefusal("conflict", f"a run is a stream of JSON events (application/json), not {content_type!r}")


async def _events(request: Request, *, allow_empty: bool) -> list[dict[str, Any]]:
    """The body's messages as validated §4 events (an array's items, or the one event)."""
    settings = request.app.state.settings
    raw = await read_body(body_of(request), settings.max_body_bytes)
    if not raw.strip() and allow_empty:
        return []
    events = json_input.loads_events(raw)
    if not events and not allow_empty:
        raise EmptyBatch("an empty JSON array appends nothing")
    if len(events) > settings.max_batch_events:
        raise DsRefusal("too_large", f"the batch holds more than {settings.max_batch_events} events")
    check_pushed(events)
    return events


def _closed_headers(closed: bool) -> dict[str, str]:
    return {"Stream-Closed": "true"} if closed else {}


async def create(request: Request, run_id: str, security: dict[str, str]) -> Response:
    """``PUT /ds/runs/{runId}``: the run (201), or the same one again (200)."""
    headers = request.headers
    _require_json(headers.get("content-type"))
    given = [name for name in NOT_FOR_RUNS if name in headers]
    if given:
        raise DsRefusal("invalid", f"a run has no {given[0]} (it has a lease; forks are made with forkOf)")
    if ds.flag(headers.get("stream-closed")):
        raise DsRefusal("invalid", "a run closes when its turn ends: append a turn/end event")
    try:
        spec = RunCreate.model_validate({"runId": run_id})
    except ValidationError:
        raise Unprocessable(f"runId: {run_id!r} is not a run id", field="runId") from None
    events = await _events(request, allow_empty=True)
    service = _service(request)
    try:
        run = await service.reads.get_run(run_id)
        status = 200
    except NotFound:
        # One transaction: messages the store refuses leave no run behind (nothing half-appended).
        encoded = await encode_events(events, request.app.state.settings.max_event_bytes) if events else None
        run, created = await service.create_with_events(spec.new_run(), events, encoded)
        status = 201 if created else 200
    answer = {**security, "Content-Type": "application/json", "Stream-Next-Offset": ds.offset(run.last_seq),
              **_closed_headers(run.status == "ended")}
    if status == 201:
        answer["Location"] = str(request.url.replace(query=""))
    return Response(status_code=status, headers=answer)


async def append(request: Request, run_id: str, security: dict[str, str]) -> Response:
    """``POST /ds/runs/{runId}``: its messages appended as the run's events, all or nothing."""
    headers = request.headers
    producer = ds.parse_producer(headers.get("producer-id"), headers.get("producer-epoch"),
                                 headers.get("producer-seq"))
    if ds.flag(headers.get("stream-closed")):
        raise DsRefusal("invalid", "a run closes when its turn ends: append a turn/end event")
    _require_json(headers.get("content-type"))
    events = await _events(request, allow_empty=False)
    encoded = await encode_events(events, request.app.state.settings.max_event_bytes)
    service = _service(request)
    outcome, echo = await service.append_as_producer(run_id, events, encoded, producer)
    closed = outcome.ended is not None and (await service.reads.get_run(run_id)).status == "ended"
    answer = {**security, "Stream-Next-Offset": ds.offset(outcome.last_seq), **_closed_headers(closed)}
    if echo is not None:
        answer["Producer-Epoch"], answer["Producer-Seq"] = (str(number) for number in echo)
    return Response(status_code=200 if echo is not None and outcome.accepted else 204, headers=answer)
