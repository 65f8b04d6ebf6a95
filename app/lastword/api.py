"""The REST endpoints of SPEC §9 (the SSE endpoints are in ``lastword.streams``)."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from lastword.errors import BatchTooLarge, EventTooLarge, InvalidCursor, UnsupportedMedia
from lastword.events import EVENT_JSON_SCHEMA
from lastword.ingest import (
    ingest_json,
    ingest_ndjson,
    ingest_text,
    media_type,
    read_model,
    storable_json,
    text_delta,
)
from lastword.schemas import (
    AppendResult,
    ChunkText,
    EndRequest,
    EventPage,
    Problem,
    Run,
    RunCreate,
    RunList,
    SubagentResult,
    ToolResult,
)
from lastword.limits import MAX_INT64
from lastword.service import RunService
from lastword.records import AppendOutcome, RunStatus
from lastword.settings import Settings
from lastword.tool_result import tool_result
from lastword.stop_reasons import StopReason
from lastword.views import logged_event_view, result_view, run_view, turn_summary_view

router = APIRouter(prefix="/v1")

PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {**PROBLEM, "description": "A problem document."} for status in statuses}


def json_body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def service_of(request: Request) -> RunService:
    service: RunService = request.app.state.service
    return service


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


#: Page sizes when a request names none (each is lowered to LASTWORD_MAX_PAGE_SIZE too).
DEFAULT_RUNS_PAGE = 50
DEFAULT_EVENTS_PAGE = 100

RunIdPath = Annotated[str, "runId"]
TurnQuery = Annotated[
    int | None, Query(ge=1, le=MAX_INT64, description="A turn number (default: the latest).")
]
WaitQuery = Annotated[
    float,
    Query(ge=0, allow_inf_nan=False,
          description="Seconds to wait for the turn to end (lowered to LASTWORD_MAX_WAIT_SECONDS)."),
]
LimitQuery = Annotated[int, Query(ge=1, description="Most items in the page (lowered to LASTWORD_MAX_PAGE_SIZE).")]


@router.post(
    "/runs",
    status_code=201,
    response_model=Run,
    response_model_exclude_unset=True,
    responses={200: {"model": Run, "description": "The run existed with the same body."},
               **problems(400, 409, 413, 415, 422)},
    openapi_extra=json_body(RunCreate.model_json_schema(ref_template="#/components/schemas/{model}"), required=False),
)
async def create_run(request: Request, response: Response) -> dict[str, Any]:
    """Create a run (idempotent by ``runId``); starts turn 1 and emits ``subagent/start``."""
    body = await read_model(request, RunCreate, settings_of(request).max_body_bytes, optional=True)
    run, created = await service_of(request).create(body)
    response.status_code = 201 if created else 200
    return run_view(run)


def _cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(str(pk).encode()).decode().rstrip("=")


def _cursor_pk(cursor: str) -> int:
    try:
        pk = int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
    except ValueError:
        pk = 0
    # Keys are positive 64-bit integers: anything else was never given out (and would not fit
    # the database's integer type).
    if not 0 < pk < MAX_INT64:
        raise InvalidCursor("the cursor is not one this service gave out")
    return pk


@router.get("/runs", response_model=RunList, response_model_exclude_unset=True, responses=problems(400, 422))
async def list_runs(
    request: Request,
    parentRunId: str | None = None,
    status: RunStatus | None = None,
    agent: str | None = None,
    limit: LimitQuery = DEFAULT_RUNS_PAGE,
    cursor: str | None = None,
    stopReason: Annotated[StopReason | None, Query(
        description="Only runs whose latest turn ended with this stop reason.")] = None,
    include: Annotated[Literal["result"] | None, Query(
        description="'result' adds each run's latest turn as `result` (no output: see GET …/result).")] = None,
) -> dict[str, Any]:
    """Runs, newest first; ``nextCursor`` pages on, and is absent on the last page."""
    before = _cursor_pk(cursor) if cursor else None  # ``?cursor=`` (empty) is the first page
    limit = min(limit, settings_of(request).max_page_size)
    service = service_of(request)
    # One more than asked for tells whether another page exists, so the last page says so.
    runs = await service.list_runs(
        parent_run_id=parentRunId, status=status, agent=agent, limit=limit + 1, before_pk=before,
        stop_reason=stopReason,
    )
    page = runs[:limit]
    views = [run_view(run) for run in page]
    if include == "result":
        # One query for the page, not one per run: a dashboard lists stop reasons at a glance.
        turns = await service.current_turns([run.run_id for run in page])
        for view in views:
            if (turn := turns.get(view["runId"])) is not None:
                view["result"] = turn_summary_view(turn)
    body: dict[str, Any] = {"runs": views}
    if len(runs) > limit:
        body["nextCursor"] = _cursor(page[-1].pk)
    return body


@router.get("/runs/{runId}", response_model=Run, response_model_exclude_unset=True, responses=problems(404, 410))
async def get_run(request: Request, runId: str) -> dict[str, Any]:
    """The run with its current turn and status."""
    return run_view(await service_of(request).get_run(runId))


def _appender(service: RunService, settings: Settings, run_id: str) -> Callable[[list[dict[str, Any]]], Awaitable[AppendOutcome]]:
    """``append(events)`` for one run, refusing batches and events over the configured limits.

    A refused event names its index in the batch, so a streamed body keeps the events before it.
    """

    async def append(events: list[dict[str, Any]]) -> AppendOutcome:
        if len(events) > settings.max_batch_events:
            raise BatchTooLarge(
                f"the batch holds {len(events)} events; the limit is {settings.max_batch_events}",
                limit=settings.max_batch_events,
            )
        encoded = []
        for index, event in enumerate(events):
            body = storable_json(event, index)
            if len(body) > settings.max_event_bytes:
                raise EventTooLarge(
                    f"event {index} is {len(body)} bytes as JSON; the limit is {settings.max_event_bytes}",
                    index=index, limit=settings.max_event_bytes,
                )
            encoded.append(body.decode())
        return await service.append(run_id, events, encoded)

    return append


EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"oneOf": [{"$ref": "#/components/schemas/IngestEvent"},
                                     {"type": "array", "minItems": 1,
                                      "items": {"$ref": "#/components/schemas/IngestEvent"}}]}
            },
            "application/x-ndjson": {"schema": {"type": "string", "description": "One event per line."}},
        },
    }
}


@router.post(
    "/runs/{runId}/events",
    response_model=AppendResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=EVENTS_BODY,
)
async def append_events(request: Request, runId: str) -> dict[str, Any]:
    """Append events: a JSON object or array (all or nothing), or NDJSON applied line by line."""
    service, limit = service_of(request), settings_of(request).max_body_bytes
    append = _appender(service, settings_of(request), runId)
    kind = media_type(request)
    if kind in ("application/x-ndjson", "application/jsonl", "application/ndjson"):
        return await ingest_ndjson(request, limit, append)
    if kind in ("application/json", ""):
        return await ingest_json(request, limit, append)
    raise UnsupportedMedia(f"expected application/json or application/x-ndjson, got {kind!r}")


CHUNKS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "application/json": {"schema": ChunkText.model_json_schema()},
        },
    }
}


@router.post(
    "/runs/{runId}/chunks",
    response_model=AppendResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=CHUNKS_BODY,
)
async def append_chunks(request: Request, runId: str) -> dict[str, Any]:
    """Append bare chunk text: each piece of a streamed ``text/plain`` body is one text delta."""
    service, limit = service_of(request), settings_of(request).max_body_bytes
    append = _appender(service, settings_of(request), runId)
    kind = media_type(request)
    if kind == "text/plain":
        answer = await ingest_text(request, limit, append)
        if answer["lastSeq"] is None:
            # An empty body stores nothing; the run must still exist, and lastSeq is its own.
            answer["lastSeq"] = (await service.get_run(runId)).last_seq
        return answer
    if kind == "application/json":
        body = await read_model(request, ChunkText, limit)
        outcome = await append([text_delta(body.text, body.eventId)])
        return {"accepted": outcome.accepted, "duplicates": outcome.duplicates, "lastSeq": outcome.last_seq}
    raise UnsupportedMedia(f"expected text/plain or application/json, got {kind!r}")


@router.post(
    "/runs/{runId}/end",
    response_model=SubagentResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=json_body(EndRequest.model_json_schema()),
)
async def end_turn(request: Request, runId: str) -> dict[str, Any]:
    """End the current turn; the same end again answers the same result."""
    body = await read_model(request, EndRequest, settings_of(request).max_body_bytes)
    outcome = await service_of(request).end(runId, body.stop_reason, body.error, cascade=body.cascade)
    return result_view(outcome.turn)


@router.post("/runs/{runId}/turns", status_code=201, response_model=Run, response_model_exclude_unset=True, responses=problems(404, 410, 409))
async def next_turn(request: Request, runId: str) -> dict[str, Any]:
    """Start the next turn of an idle continuable run."""
    return run_view(await service_of(request).next_turn(runId))


@router.post("/runs/{runId}/close", response_model=Run, response_model_exclude_unset=True, responses=problems(404, 410, 409))
async def close_run(request: Request, runId: str) -> dict[str, Any]:
    """Close a continuable run for good (an open turn ends as ``cancelled``)."""
    return run_view(await service_of(request).close_run(runId))


@router.get("/runs/{runId}/result", response_model=SubagentResult, response_model_exclude_unset=True, responses=problems(404, 410, 422))
async def get_result(request: Request, runId: str, turn: TurnQuery = None, wait: WaitQuery = 0) -> dict[str, Any]:
    """The turn's ``SubagentResult``; ``?wait=S`` blocks up to S seconds for it to end."""
    wait = min(wait, settings_of(request).max_wait_seconds)
    _, record = await service_of(request).result(runId, turn, wait)
    return result_view(record)


@router.get(
    "/runs/{runId}/tool-result",
    response_model=ToolResult,
    response_model_exclude_unset=True,
    responses={202: {"description": "The turn is still running; try again after Retry-After."},
               **problems(404, 410, 422)},
)
async def get_tool_result(request: Request, runId: str, turn: TurnQuery = None, wait: WaitQuery = 0) -> Any:
    """The parent model's tool result (MCP ``CallToolResult``); 202 while the turn runs."""
    wait = min(wait, settings_of(request).max_wait_seconds)
    _, record = await service_of(request).result(runId, turn, wait)
    if not record.ended or record.stop_reason is None:
        return JSONResponse(
            {"runId": runId, "turn": record.turn, "status": "running"},
            status_code=202,
            headers={"Retry-After": "1"},
        )
    return tool_result(record.stop_reason, record.output, record.error)


@router.get("/runs/{runId}/events", response_model=EventPage, response_model_exclude_unset=True, responses=problems(404, 410, 422))
async def get_events(
    request: Request,
    runId: str,
    after: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
    limit: LimitQuery = DEFAULT_EVENTS_PAGE,
) -> dict[str, Any]:
    """The durable log in ``seq`` order; page on with ``after=nextAfter``."""
    limit = min(limit, settings_of(request).max_page_size)
    events = await service_of(request).events_after(runId, after, limit)
    return {
        "events": [logged_event_view(event) for event in events],
        "nextAfter": events[-1].seq if events else after,
    }


def event_schema_components() -> dict[str, Any]:
    """The ingest event schemas, for the OpenAPI document's components."""
    schema = dict(EVENT_JSON_SCHEMA)
    definitions = schema.pop("$defs", {})
    return {"IngestEvent": schema, **definitions}
