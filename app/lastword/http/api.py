"""The REST endpoints of SPEC §9 (the SSE endpoints are in ``lastword.http.streams``)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import orjson
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from lastword.adapters import CLI_ADAPTERS, INGEST_FORMATS
from lastword.errors import InvalidCursor, UnsupportedMedia
from lastword.http.body import body_of
from lastword.ingest.checks import encode_events
from lastword.ingest.cli import ingest_cli_stream
from lastword.ingest.events import ingest_json, ingest_ndjson, ingest_text, read_model, text_delta
from lastword.ingest.provider import ingest_provider_stream
from lastword.http.strict_ints import DecimalDigits, parse_decimal
from lastword.http.views import delivery_view, logged_event_view, result_view, run_view, turn_summary_view
from lastword.rules.events import EVENT_JSON_SCHEMA
from lastword.rules.limits import MAX_INT64
from lastword.rules.records import AppendOutcome, RunStatus, TurnRecord
from lastword.rules.stop_reasons import StopReason
from lastword.rules.tool_result import tool_result
from lastword.rules.transcript import Format
from lastword.schemas import (
    AppendResult,
    ChildrenJoin,
    ChunkText,
    DeliveryList,
    EndRequest,
    EventPage,
    IngestResult,
    Problem,
    Run,
    RunCreate,
    RunList,
    SubagentResult,
    ToolResult,
    TranscriptPage,
)
from lastword.service import RunService
from lastword.settings import Settings

router = APIRouter(prefix="/v1", tags=["runs"])

T = TypeVar("T")

PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {**PROBLEM, "description": "A problem document."} for status in statuses}


def json_body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def service_of(request: Request) -> RunService:
    service: RunService = request.app.state.core.runs
    return service


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


#: Page sizes when a request names none (each is lowered to LASTWORD_MAX_PAGE_SIZE too).
DEFAULT_RUNS_PAGE = 50
DEFAULT_EVENTS_PAGE = 100

TurnQuery = Annotated[
    int | None, Query(ge=1, le=MAX_INT64, description="A turn number (default: the latest)."), DecimalDigits
]
WaitQuery = Annotated[
    float,
    Query(ge=0, allow_inf_nan=False,
          description="Seconds to wait for the turn to end (lowered to LASTWORD_MAX_WAIT_SECONDS)."),
]
LimitQuery = Annotated[
    int, Query(ge=1, description="Most items in the page (lowered to LASTWORD_MAX_PAGE_SIZE)."), DecimalDigits
]


@router.post(
    "/runs",
    status_code=201,
    response_model=Run,
    response_model_exclude_unset=True,
    responses={200: {"model": Run, "description": "The run existed with the same body."},
               **problems(400, 404, 409, 410, 413, 415, 422)},
    openapi_extra=json_body(RunCreate.model_json_schema(ref_template="#/components/schemas/{model}"), required=False),
)
async def create_run(request: Request, response: Response) -> dict[str, Any]:
    """Create a run (idempotent by ``runId``); starts turn 1 and emits ``subagent/start``."""
    body = await read_model(body_of(request), RunCreate, settings_of(request).max_body_bytes, optional=True)
    run, created = await service_of(request).create(body.new_run())
    response.status_code = 201 if created else 200
    return run_view(run)


def _cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(str(pk).encode()).decode().rstrip("=")


def _cursor_pk(cursor: str) -> int:
    try:
        pk = parse_decimal(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")) or 0
    except ValueError:
        pk = 0
    # Keys are positive 64-bit integers, written out exactly as _cursor writes them: anything
    # else (another base64 spelling, ``3_0``, leading zeros) was never given out.
    if not 0 < pk < MAX_INT64 or _cursor(pk) != cursor:
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
    runs = await service.reads.list_runs(
        parent_run_id=parentRunId, status=status, agent=agent, limit=limit + 1, before_pk=before,
        stop_reason=stopReason,
    )
    page = runs[:limit]
    views = [run_view(run) for run in page]
    if include == "result":
        # One query for the page, not one per run: a dashboard lists stop reasons at a glance.
        turns = await service.reads.current_turns([run.run_id for run in page])
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
    return run_view(await service_of(request).reads.get_run(runId))


def _appender(service: RunService, settings: Settings, run_id: str) -> Callable[[list[dict[str, Any]]], Awaitable[AppendOutcome]]:
    """``append(events)`` for one run, refusing events over the configured size limit.

    A refused event names its index in the batch, so a streamed body keeps the events before it.
    """

    async def append(events: list[dict[str, Any]]) -> AppendOutcome:
        return await service.append(run_id, events, await encode_events(events, settings.max_event_bytes))

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


class PlainRoute(APIRoute):
    """A route whose endpoint is called with the request and its path parameters as they are.

    For every request FastAPI's own handler solves the endpoint's parameters, and validates and
    serialises what it returns against ``response_model``. The ingest endpoints a streaming
    child calls once per delta read their body themselves and answer three integers, so that
    work bought nothing there, and it was a third of the route's time in the event loop
    (docs/BENCHMARKS.md). Their declared parameters and ``response_model`` still
    make their OpenAPI operation. Only ``request`` and path parameters (strings, with nothing
    to validate) are allowed: anything else would be silently ignored, so it is refused here.
    FastAPI's own telemetry (off unless an OpenTelemetry provider is set globally) still spans
    the request, without the child spans its handler adds (dependencies, serialisation).
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant = self.dependant
        if (dependant.query_params or dependant.header_params or dependant.cookie_params
                or dependant.body_params or dependant.dependencies):
            raise TypeError(f"{self.path}: a PlainRoute endpoint takes only the request and path parameters")
        endpoint = self.endpoint

        async def handle(request: Request) -> Response:
            response: Response = await endpoint(request, **request.path_params)
            return response

        return handle


def plain_json(answer: dict[str, Any]) -> Response:
    """What a :class:`PlainRoute` answers: its ``response_model`` (an ``AppendResult``, a
    ``SubagentResult``) as JSON, from a dict already written in that model's shape."""
    return Response(orjson.dumps(answer), media_type="application/json")


async def append_events(request: Request, runId: str) -> Response:
    """Append events: a JSON object or array (all or nothing), or NDJSON applied line by line."""
    service, limit = service_of(request), settings_of(request).max_body_bytes
    append = _appender(service, settings_of(request), runId)
    body = body_of(request)
    kind = body.media_type
    if kind in ("application/x-ndjson", "application/jsonl", "application/ndjson"):
        return plain_json((await ingest_ndjson(body, limit, append)).answer())
    if kind in ("application/json", ""):
        return plain_json((await ingest_json(body, limit, settings_of(request).max_batch_events, append)).answer())
    raise UnsupportedMedia(f"expected application/json or application/x-ndjson, got {kind!r}")


router.add_api_route(
    "/runs/{runId}/events",
    append_events,
    methods=["POST"],
    response_model=AppendResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=EVENTS_BODY,
    route_class_override=PlainRoute,
)


CHUNKS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "application/json": {"schema": ChunkText.model_json_schema()},
        },
    }
}


async def append_chunks(request: Request, runId: str) -> Response:
    """Append bare chunk text: each piece of a streamed ``text/plain`` body is one text delta."""
    service, limit = service_of(request), settings_of(request).max_body_bytes
    append = _appender(service, settings_of(request), runId)
    body = body_of(request)
    kind = body.media_type
    if kind == "text/plain":
        stored = await ingest_text(body, limit, append)
        if stored.last_seq is None:
            # An empty body stores nothing; the run must still exist, and lastSeq is its own.
            stored.last_seq = (await service.reads.get_run(runId)).last_seq
        return plain_json(stored.answer())
    if kind == "application/json":
        chunk = await read_model(body, ChunkText, limit)
        outcome = await append([text_delta(chunk.text, chunk.eventId)])
        return plain_json({"accepted": outcome.accepted, "duplicates": outcome.duplicates, "lastSeq": outcome.last_seq})
    raise UnsupportedMedia(f"expected text/plain or application/json, got {kind!r}")


router.add_api_route(
    "/runs/{runId}/chunks",
    append_chunks,
    methods=["POST"],
    response_model=AppendResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=CHUNKS_BODY,
    route_class_override=PlainRoute,
)


if TYPE_CHECKING:
    IngestFormat = str
else:  # the ``{format}`` values, from the adapters' registry (an enum in the OpenAPI document)
    IngestFormat = Literal[INGEST_FORMATS]

INGEST_BODY = {
    "parameters": [
        {"name": "Idempotency-Key", "in": "header", "required": False,
         "schema": {"type": "string", "maxLength": 160, "pattern": "^[!-~]+$"},
         "description": "Event ids are derived from it instead of the provider's ids (ACP has none)."},
    ],
    "requestBody": {
        "required": True,
        "content": {
            "text/event-stream": {"schema": {"type": "string", "description": "The provider's SSE body as received."}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
            "application/x-ndjson": {"schema": {"type": "string", "description": (
                "One provider event per line; for an agent CLI, its standard output: a child's whole turn in "
                "one body, streamed as it is printed.")}},
        },
    },
}


@router.post(
    "/runs/{runId}/ingest/{format}",
    response_model=IngestResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=INGEST_BODY,
)
async def ingest_provider(
    request: Request,
    runId: str,
    format: Annotated[IngestFormat,
                      Path(description="Whose stream the body is: Anthropic Messages, OpenAI Responses or ACP "
                                       "(one model call, SPEC §13); or the standard output of an agent CLI, "
                                       "Claude Code, Codex or opencode (a whole run, stored as it arrives, §16).")],
    end: Annotated[bool, Query(description="A terminal stop reason of the stream also ends the turn "
                                           "(provider streams; a CLI's terminal line always does).")] = False,
    acpVersion: Annotated[int, Query(ge=1, le=2, description=(
        "The ACP version of an `acp` body that holds no `initialize` response (which names it): "
        "1 or 2."))] = 1,
    toolUseId: Annotated[str | None, Query(
        max_length=200, description="claude-code-transcript: the id of the tool call that ran the subagent whose "
                                    "transcript the body is (its agent-<agentId>.meta.json names it); not needed "
                                    "when the session's transcript comes first in the body (SPEC §19).")] = None,
) -> dict[str, Any]:
    """Store a provider's own stream (SPEC §13) or an agent CLI's output (§16) as session events.

    **From an agent SDK** (the Claude Agent SDK, the Codex SDK): send a child's turn as **one
    streamed request**, not one request per message. Open the request when the turn starts, write
    each message the SDK yields into its body as the JSON line the CLI printed, the moment it is
    yielded (fetch: a `ReadableStream` body with `duplex: "half"`; httpx: an async generator), and
    close the body in a `finally` when the SDK's loop ends: also when the SDK throws (both throw on
    the runs that end badly, max tokens included) or the parent aborts. Separate requests break the
    turn: a reply is assembled from several lines, each line's `eventId` counts its place in its
    body, requests overtake one another, and a Claude Code turn ends only when its body does.
    An answer without `stopReason` means the child never printed its last line (aborted, killed):
    end the turn with `POST /v1/runs/{runId}/end` (`cancelled`, or `error`). `lastword.integrations`
    (Python) and docs/examples (TypeScript) do all of this.
    """
    body = body_of(request)
    if format in CLI_ADAPTERS:
        return (await ingest_cli_stream(body, service_of(request), settings_of(request), runId, format,
                                        toolUseId)).answer()
    return (await ingest_provider_stream(body, service_of(request), settings_of(request), runId, format, end,
                                         acp_version=acpVersion)).answer()


async def end_turn(request: Request, runId: str) -> Response:
    """End the current turn; the same end again answers the same result."""
    body = await read_model(body_of(request), EndRequest, settings_of(request).max_body_bytes)
    outcome = await service_of(request).end(runId, body.stop_reason, body.error, cascade=body.cascade)
    return plain_json(result_view(outcome.turn))


# A plain route: every subscriber of the run waits for this request to commit, and FastAPI's
# solving of the parameters came first (0.14 ms of the 1.4 ms from the request's arrival to the
# hub's publish, issue 44); ``result_view`` is already a ``SubagentResult`` as it is written.
router.add_api_route(
    "/runs/{runId}/end",
    end_turn,
    methods=["POST"],
    response_model=SubagentResult,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 410, 409, 413, 415, 422),
    openapi_extra=json_body(EndRequest.model_json_schema()),
    route_class_override=PlainRoute,
)


@router.post("/runs/{runId}/turns", status_code=201, response_model=Run, response_model_exclude_unset=True, responses=problems(404, 410, 409))
async def next_turn(request: Request, runId: str) -> dict[str, Any]:
    """Start the next turn of an idle continuable run."""
    return run_view(await service_of(request).next_turn(runId))


@router.post("/runs/{runId}/close", response_model=Run, response_model_exclude_unset=True, responses=problems(404, 410, 409))
async def close_run(request: Request, runId: str) -> dict[str, Any]:
    """Close a continuable run for good (an open turn ends as ``cancelled``)."""
    return run_view(await service_of(request).close_run(runId))


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (a GET's body is empty: what follows it is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_client_leaves(request: Request, waiting: Awaitable[T]) -> T | None:
    """What ``waiting`` returns; None when the client left first (it is then cancelled).

    A long poll whose client disconnects is released at once: otherwise every dropped poll
    would hold its waiter, task and memory until its ``wait`` ran out.
    """
    poll = asyncio.ensure_future(waiting)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((poll, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (poll, gone):
            if not task.done():
                task.cancel()
        await asyncio.gather(poll, gone, return_exceptions=True)
    if poll.cancelled():
        return None
    return poll.result()  # raises what the poll raised (404, 410, …)


async def _long_poll(request: Request, run_id: str, turn: int | None, wait: float) -> TurnRecord | None:
    """The turn's result after up to ``wait`` seconds; None when the client left first."""
    service = service_of(request)
    if wait <= 0:
        return (await service.result(run_id, turn, 0))[1]
    service.refuse_if_draining()  # 503: the client waits on another replica instead
    answer = await _unless_client_leaves(request, service.result(run_id, turn, wait))
    return None if answer is None else answer[1]


#: The status logged for a long poll whose client had gone (nginx's); nobody reads the answer.
CLIENT_GONE = 499


@router.get("/runs/{runId}/result", response_model=SubagentResult, response_model_exclude_unset=True, responses=problems(404, 410, 422))
async def get_result(
    request: Request, runId: str, turn: TurnQuery = None, wait: WaitQuery = 0,
    include: Annotated[Literal["texts"] | None, Query(
        description="'texts' adds `texts`: every visible text the assistant wrote in the turn, in order "
                    "(for a child whose last message points back at an earlier one); `output` is unchanged.")] = None,
) -> Any:
    """The turn's ``SubagentResult``; ``?wait=S`` blocks up to S seconds for it to end."""
    record = await _long_poll(request, runId, turn, min(wait, settings_of(request).max_wait_seconds))
    if record is None:
        return Response(status_code=CLIENT_GONE)
    view = result_view(record)
    if include == "texts":
        view["texts"] = await service_of(request).texts(record)
    return view


@router.get(
    "/runs/{runId}/tool-result",
    response_model=ToolResult,
    response_model_exclude_unset=True,
    responses={202: {"description": "The turn is still running; try again after Retry-After."},
               **problems(404, 410, 422)},
)
async def get_tool_result(request: Request, runId: str, turn: TurnQuery = None, wait: WaitQuery = 0) -> Any:
    """The parent model's tool result (MCP ``CallToolResult``); 202 while the turn runs."""
    record = await _long_poll(request, runId, turn, min(wait, settings_of(request).max_wait_seconds))
    if record is None:
        return Response(status_code=CLIENT_GONE)
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
    after: Annotated[int, Query(ge=0, le=MAX_INT64), DecimalDigits] = 0,
    limit: LimitQuery = DEFAULT_EVENTS_PAGE,
) -> dict[str, Any]:
    """The durable log in ``seq`` order; page on with ``after=nextAfter``."""
    limit = min(limit, settings_of(request).max_page_size)
    events = await service_of(request).reads.events_after(runId, after, limit)
    return {
        "events": [logged_event_view(event) for event in events],
        "nextAfter": events[-1].seq if events else after,
    }


@router.get(
    "/runs/{runId}/messages",
    response_model=TranscriptPage,
    response_model_exclude_unset=True,
    responses=problems(404, 410, 422),
)
async def get_messages(
    request: Request,
    runId: str,
    format: Annotated[Format, Query(
        description="anthropic: Messages API `messages`; openai: Chat Completions `messages`.")],
    turn: TurnQuery = None,
) -> dict[str, Any]:
    """The provider-safe transcript: the run's history up to the end of ``turn``, ready to send."""
    return (await service_of(request).messages(runId, format, turn)).as_json()


def event_schema_components() -> dict[str, Any]:
    """The ingest event schemas, for the OpenAPI document's components."""
    schema = dict(EVENT_JSON_SCHEMA)
    definitions = schema.pop("$defs", {})
    return {"IngestEvent": schema, **definitions}


@router.get("/runs/{runId}/deliveries", response_model=DeliveryList, response_model_exclude_unset=True,
            responses=problems(404, 410))
async def get_deliveries(request: Request, runId: str) -> dict[str, Any]:
    """The run's webhook deliveries (one per ended turn) with every attempt and the next try."""
    return {"deliveries": [delivery_view(d) for d in await service_of(request).deliveries(runId)]}


@router.get("/runs/{runId}/children", response_model=ChildrenJoin, response_model_exclude_unset=True,
            responses=problems(422))
async def join_children(
    request: Request,
    runId: str,
    wait: WaitQuery = 0,
    any: Annotated[bool, Query(description="Answer as soon as one child's turn has ended.")] = False,  # noqa: A002
    expect: Annotated[int, Query(
        ge=0, le=MAX_INT64,
        description="Not done before at least this many children exist (a parent may join before its "
                    "children register). Without it, a run with no children is done at once."),
        DecimalDigits] = 0,
) -> Any:
    """Join: each child's current turn, once at least ``expect`` children exist and every one has
    ended (``?any=true``: the first) or the wait runs out; ``done`` says which. The children are
    the runs naming ``runId`` as parent."""
    wait = min(wait, settings_of(request).max_wait_seconds)
    if wait > 0:
        service_of(request).refuse_if_draining()  # 503: the client waits on another replica instead
    joining = service_of(request).join(runId, wait, any_child=any, expect=expect)
    joined = await joining if wait <= 0 else await _unless_client_leaves(request, joining)
    if joined is None:
        return Response(status_code=CLIENT_GONE)
    done, turns = joined
    return {"runId": runId, "done": done, "children": [result_view(turn) for turn in turns]}
