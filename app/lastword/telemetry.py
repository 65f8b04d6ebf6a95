"""OpenTelemetry (SPEC §15): each ended subagent turn as a GenAI ``invoke_agent`` client span.

Telemetry was the fourth place the original failure reached: a span made from "the last
assistant message" carried the empty usage record, not the child's partial answer. Here the span
is made from the ``subagent/end`` event itself, whose ``lastAssistantMessage`` is the selected
output (``lastword.rules.fold``), so the span cannot disagree with the result.

Choices made here, for the reader who wonders why:

* **Off unless an endpoint is set.** ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` turns it on (OTLP over HTTP, protobuf); every other setting
  is the SDK's own ``OTEL_*`` variable (headers, timeout, batch delay, service name, resource
  attributes); ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keep it off.
* **After the fact, with the turn's own times.** A span starts at the turn's ``startedAt`` and
  ends at its ``endedAt``; it is made when the end commits, by the replica that committed it
  (never once per replica), and exported by the SDK's batch processor in its own thread: a slow
  or dead collector costs a dropped span, never an ingest.
* **One trace per fleet, without shared state.** Span ids are derived from ``(runId, turn)`` and
  trace ids from the root run of the ``parentRunId`` chain, so a child's span names its parent's
  span (the parent's turn that was current when the child was created) even when the two ended
  on different replicas or the parent has not ended yet. A run whose ``metadata.traceparent``
  holds a W3C ``traceparent`` joins the caller's own trace instead: its spans are children of
  that span, and its descendants share the trace.
* **Usage as the GenAI conventions count it.** ``gen_ai.usage.input_tokens`` includes cached
  input (the conventions make cache reads and writes subsets of input), while lastword's
  ``inputTokens`` is uncached input; the cache counts are also given on their own.
* **Content only when asked.** Outputs can hold private data, so ``gen_ai.output.messages`` is
  set only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
* **The GenAI conventions' first release** (``semantic-conventions-genai`` 0.1.0) by default:
  lastword watches each child from outside, as a client of a remote agent, so its span is the
  ``invoke_agent`` *client* span: kind ``CLIENT``, ``gen_ai.provider.name`` (required there:
  the run's ``metadata.provider`` when a parent says it, else ``lastword``, the system that
  reports), finish reasons in the conventions' words (``completed`` → ``stop``, ``max_tokens``
  → ``length``, ``refusal`` → ``content_filter``; lastword's own word for the reasons they do
  not name). ``LASTWORD_OTEL_GENAI_CONVENTIONS=legacy`` keeps the spans as lastword made them
  before (kind ``INTERNAL``, lastword's stop reasons as finish reasons, no provider) for one
  release, while dashboards move.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)

from lastword.errors import Gone, NotFound
from lastword.rules.records import RunRecord, StoredEvent, TurnRecord
from lastword.rules.stop_reasons import is_error
from lastword.rules.tool_result import headline

log = logging.getLogger("lastword")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: How far up a ``parentRunId`` chain the trace root is looked for (chains can even be cycles).
MAX_ANCESTORS = 32
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

# GenAI semantic-convention attribute names, written once.
OPERATION_NAME = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
OUTPUT_MESSAGES = "gen_ai.output.messages"
PROVIDER_NAME = "gen_ai.provider.name"
ERROR_TYPE = "error.type"

#: ``LASTWORD_OTEL_GENAI_CONVENTIONS``: the conventions' release the spans follow, or ``legacy``.
CONVENTIONS = ("0.1.0", "legacy")
#: The provider named when a run's metadata names none: the system that reports the span.
DEFAULT_PROVIDER = "lastword"
#: lastword's stop reasons in the conventions' finish-reason words, where they have one.
FINISH_REASONS_0_1 = {"completed": "stop", "max_tokens": "length", "refusal": "content_filter", "error": "error"}

RunLookup = Callable[[str], Awaitable[RunRecord | None]]
TurnLookup = Callable[[str, int], Awaitable[TurnRecord]]


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def span_id_of(run_id: str, turn: int) -> int:
    """The span id of one turn of one run, the same on every replica."""
    return _derived_id(f"span/{run_id}/{turn}", 8)


def trace_id_of(root_run_id: str) -> int:
    """The trace id of a fleet whose root run is ``root_run_id``."""
    return _derived_id(f"trace/{root_run_id}", 16)


def _derived_id(key: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(key.encode()).digest()[:size], "big")
    return value or 1  # zero is the invalid id


@dataclass(frozen=True, slots=True)
class PlannedIds:
    """The ids a turn's span must get: its own span id and, for the root of a trace (a span
    without a parent), the trace id; a span with a parent takes the parent's trace id."""

    span_id: int
    trace_id: int | None = None


#: The ids planned for the span being started in this context, set only around ``start_span``
#: (:func:`_start_planned`). The SDK asks its id generator for ids with no say in their values,
#: so the plan travels beside the call, not through it; a context variable keeps concurrent
#: recordings (tasks, threads) from ever reading each other's plan.
_PLANNED: ContextVar[PlannedIds | None] = ContextVar("lastword_planned_span_ids", default=None)


class _PlannedIdGenerator(IdGenerator):
    """Gives the SDK the ids planned for the span being started; random ones otherwise."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        planned = _PLANNED.get()
        return planned.span_id if planned is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        planned = _PLANNED.get()
        if planned is not None and planned.trace_id is not None:
            return planned.trace_id
        return self._random.generate_trace_id()


def _start_planned(tracer: Tracer, planned: PlannedIds, name: str, parent: SpanContext | None,
                   **options: Any) -> Span:
    """``tracer.start_span`` whose span gets the ids ``planned`` (under ``parent``, or a root)."""
    token = _PLANNED.set(planned)
    try:
        context = set_span_in_context(NonRecordingSpan(parent)) if parent is not None else None
        return tracer.start_span(name, context=context, **options)
    finally:
        _PLANNED.reset(token)


def finish_reason(stop_reason: str, conventions: str) -> str:
    """A stop reason as the conventions name a finish reason (``legacy``: as lastword names it)."""
    return stop_reason if conventions == "legacy" else FINISH_REASONS_0_1.get(stop_reason, stop_reason)


def output_messages(output: list[dict[str, Any]], finish: str) -> str:
    """The selected output as the GenAI conventions' output messages (one assistant message)."""
    parts: list[dict[str, Any]] = []
    for block in output:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif kind == "reasoning":
            parts.append({"type": "reasoning", "content": block.get("text", "")})
        elif kind == "tool_call":
            parts.append({"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                          "arguments": block.get("input")})
        else:
            parts.append(block)  # kept as sent, like every block lastword selects
    return orjson.dumps([{"role": "assistant", "parts": parts, "finish_reason": finish}]).decode()


class TurnSpans:
    """Makes and exports one span per ended turn; :meth:`ended` is called on each local end."""

    def __init__(
        self,
        provider: TracerProvider,
        run: RunLookup,
        turn: TurnLookup,
        *,
        capture_content: bool,
        conventions: str = CONVENTIONS[0],
    ) -> None:
        self._provider = provider
        self._conventions = conventions
        self._tracer = provider.get_tracer("lastword")
        self._run = run
        self._turn = turn
        self._capture_content = capture_content
        self._pending: set[asyncio.Task[None]] = set()

    def ended(self, event: StoredEvent) -> None:
        """Record the turn that this committed ``subagent/end`` event ended (in the background)."""
        task = asyncio.get_running_loop().create_task(self._record(event.body))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _record(self, end: dict[str, Any]) -> None:
        try:
            run = await self._run(end["runId"])
            turn = await self._turn(end["runId"], end["turn"])
            parent, root_trace_id = await self._parent_context(run, end)
            self._emit(end, run, turn, parent, root_trace_id)
        except Exception:  # telemetry must never disturb the service
            log.exception("could not record the span of run %s turn %s", end.get("runId"), end.get("turn"))

    async def _parent_context(
        self, run: RunRecord | None, end: dict[str, Any]
    ) -> tuple[SpanContext, None] | tuple[None, int]:
        """The span this turn's span hangs under, or, for a root, the trace id it starts."""
        remote = _traceparent(run.metadata if run is not None else {})
        if remote is not None:
            return remote, None
        parent_id = end.get("parentRunId")
        if parent_id is None:
            return None, trace_id_of(end["runId"])
        parent = await self._run(parent_id)
        trace_id = await self._trace_id(parent_id, parent)
        if parent is None:
            # The parent is not a run lastword knows: siblings still share one trace.
            return None, trace_id
        created = run.created_at if run is not None else float("inf")
        parent_turn = await self._turn_current_at(parent, created)
        return SpanContext(trace_id=trace_id, span_id=span_id_of(parent_id, parent_turn), is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED)), None

    async def _trace_id(self, run_id: str, run: RunRecord | None) -> int:
        seen = {run_id}
        for _ in range(MAX_ANCESTORS):
            if run is None:
                break
            remote = _traceparent(run.metadata)
            if remote is not None:
                return remote.trace_id
            if run.parent_run_id is None or run.parent_run_id in seen:
                break
            run_id = run.parent_run_id
            seen.add(run_id)
            run = await self._run(run_id)
        return trace_id_of(run_id)

    async def _turn_current_at(self, parent: RunRecord, when: float) -> int:
        """The parent's turn that was current at ``when`` (the child's creation)."""
        for number in range(parent.turn, 1, -1):
            if (await self._turn(parent.run_id, number)).started_at <= when:
                return number
        return 1

    def _emit(self, end: dict[str, Any], run: RunRecord | None, turn: TurnRecord, parent: SpanContext | None,
              root_trace_id: int | None) -> None:
        stop_reason = str(end["stopReason"])
        finish = finish_reason(stop_reason, self._conventions)
        legacy = self._conventions == "legacy"
        agent = end.get("agent")
        usage = end.get("usage") or {}
        cache_read = int(usage.get("cacheReadTokens", 0))
        cache_write = int(usage.get("cacheWriteTokens", 0))
        attributes: dict[str, Any] = {
            OPERATION_NAME: "invoke_agent",
            AGENT_ID: end["runId"],
            CONVERSATION_ID: end["runId"],
            FINISH_REASONS: [finish],
            INPUT_TOKENS: int(usage.get("inputTokens", 0)) + cache_read + cache_write,
            OUTPUT_TOKENS: int(usage.get("outputTokens", 0)),
            CACHE_READ_TOKENS: cache_read,
            CACHE_CREATION_TOKENS: cache_write,
            "lastword.turn": int(end["turn"]),
        }
        if agent is not None:
            attributes[AGENT_NAME] = agent
        if not legacy:
            provider = (run.metadata if run is not None else {}).get("provider")
            attributes[PROVIDER_NAME] = provider if isinstance(provider, str) and provider else DEFAULT_PROVIDER
        if end.get("parentRunId") is not None:
            attributes["lastword.parent_run_id"] = end["parentRunId"]
        if is_error(stop_reason):
            attributes[ERROR_TYPE] = stop_reason
        if self._capture_content and "lastAssistantMessage" in end:
            attributes[OUTPUT_MESSAGES] = output_messages(end["lastAssistantMessage"], finish)
        span = _start_planned(
            self._tracer,
            PlannedIds(span_id_of(end["runId"], int(end["turn"])), root_trace_id),
            f"invoke_agent {agent}" if agent else "invoke_agent",
            parent,
            kind=SpanKind.INTERNAL if legacy else SpanKind.CLIENT,
            attributes=attributes,
            start_time=_nanoseconds(turn.started_at),
        )
        if is_error(stop_reason):
            span.set_status(Status(StatusCode.ERROR, headline(stop_reason, end.get("error"))))
        span.end(end_time=_nanoseconds(datetime.fromisoformat(end["endedAt"]).timestamp()))

    async def close(self) -> None:
        """Record what is pending, then flush and stop the exporter (off the event loop)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=5)
        await asyncio.to_thread(self._provider.shutdown)


def _traceparent(metadata: Mapping[str, Any]) -> SpanContext | None:
    value = metadata.get("traceparent") if isinstance(metadata, Mapping) else None
    match = TRACEPARENT.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                       trace_flags=TraceFlags(int(match.group(3), 16)))


def _nanoseconds(seconds: float) -> int:
    return int(round(seconds * 1e9))


def open_turn_spans(run: RunLookup, turn: TurnLookup, environ: Mapping[str, str] = os.environ, *,
                    conventions: str = CONVENTIONS[0]) -> TurnSpans | None:
    """The span recorder the ``OTEL_*`` variables ask for, or ``None`` when tracing is off;
    ``conventions`` is the GenAI conventions' release its spans follow (or ``legacy``)."""
    if not enabled(environ):
        return None
    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "lastword"}))
    provider = TracerProvider(resource=resource, id_generator=_PlannedIdGenerator())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    capture = environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
    return TurnSpans(provider, run, turn, capture_content=capture, conventions=conventions)


async def run_or_none(lookup: Callable[[str], Awaitable[RunRecord]], run_id: str) -> RunRecord | None:
    """``lookup(run_id)``, or ``None`` for a run that is not (or no longer) stored."""
    try:
        return await lookup(run_id)
    except (NotFound, Gone):
        return None
