"""Request and response bodies of the HTTP API (camelCase on the wire), for validation and OpenAPI."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lastword.rules.ids import RUN_ID_PATTERN
from lastword.rules.limits import MAX_AGENT_LENGTH, MAX_EVENT_ID_LENGTH, MAX_LEASE_SECONDS
from lastword.rules.records import NewRun, RunMode, RunStatus, WebhookTarget
from lastword.rules.stop_reasons import ACCEPTED_INPUTS, ACCEPTED_PATTERN, StopReason, normalise_stop_reason


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class _Answer(BaseModel):
    # Each field's docstring is its description in the OpenAPI document.
    model_config = ConfigDict(use_attribute_docstrings=True)


class ForkOf(_Strict):
    """The run a fork continues, and the last ``seq`` of that run's log it inherits (SPEC §12)."""

    runId: str = Field(pattern=RUN_ID_PATTERN)
    """The parent run (itself possibly a fork)."""
    # At most 2**53 - 1: JSON readers hold larger numbers inexactly, and no log gets that long.
    afterSeq: int = Field(ge=0, le=2**53 - 1)
    """Inherit the parent's history up to and including this ``seq`` (lifecycle events count);
    0 inherits nothing. The fork's own events are numbered on from ``afterSeq + 1``."""


class Selection(_Strict):
    """Opt-in variations of the selection rule (SPEC §14)."""

    joinContinuations: bool = False
    """Answer a reply split over several max-tokens messages as one output, joined in order."""


class WebhookSpec(_Strict):
    """Where each ``subagent/end`` of the run is POSTed (Standard Webhooks, SPEC §14)."""

    url: str = Field(max_length=2048, description="An http(s) URL on an allowed host.")
    secret: str | None = Field(
        None, max_length=512,
        description="'whsec_' followed by base64; when set, each delivery carries webhook-signature.",
    )


class RunCreate(_Strict):
    """A run to create; every field is optional."""

    runId: str | None = Field(None, pattern=RUN_ID_PATTERN)
    """The run's id; the service makes a sortable one when none is given. Creating it again
    with the same body answers the run (200); with another body, 409."""
    parentRunId: str | None = Field(None, pattern=RUN_ID_PATTERN)
    """The run of the parent agent that started this child."""
    agent: str | None = Field(None, max_length=MAX_AGENT_LENGTH)
    """The child agent's name."""
    mode: RunMode = "oneshot"
    """``oneshot``: exactly one turn. ``continuable``: further turns after each end."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free JSON, kept and returned as sent."""
    leaseSeconds: float | None = Field(None, ge=0, le=MAX_LEASE_SECONDS, allow_inf_nan=False)
    """Seconds of silence after which an open turn ends as ``timeout``; 0: never. Default:
    ``LASTWORD_LEASE_SECONDS``."""
    forkOf: ForkOf | None = None
    """Make this run a fork: its history is the named run's up to and including ``afterSeq``,
    then its own (SPEC §12)."""
    selection: Selection | None = None
    """Opt-in variations of the selection rule (SPEC §14)."""

    webhook: WebhookSpec | None = Field(None, description="Deliver each subagent/end to a URL (SPEC §14).")

    @field_validator("leaseSeconds", mode="before")
    @classmethod
    def _int_is_a_number(cls, value: Any) -> Any:
        # Strict mode refuses 30 for a float field; JSON has one number type.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def new_run(self) -> NewRun:
        """The run as the service takes it."""
        return NewRun(
            run_id=self.runId, parent_run_id=self.parentRunId, agent=self.agent, mode=self.mode,
            metadata=self.metadata, lease_seconds=self.leaseSeconds,
            fork_of=None if self.forkOf is None else (self.forkOf.runId, self.forkOf.afterSeq),
            join_continuations=None if self.selection is None else self.selection.joinContinuations,
            webhook=None if self.webhook is None else WebhookTarget(url=self.webhook.url, secret=self.webhook.secret),
        )


class EndRequest(_Strict):
    """How the current turn ended."""

    stopReason: str = Field(
        description="A wire value or an accepted alias (SPEC §6), case-insensitive; stored as the wire value.",
        json_schema_extra={"pattern": ACCEPTED_PATTERN, "examples": list(ACCEPTED_INPUTS)},
    )
    error: Any = None
    """What went wrong (any JSON; a ``message`` field is shown in the tool result's headline)."""
    cascade: bool = False
    """Also end the open turns of every descendant run, as ``cancelled``."""

    @field_validator("stopReason")
    @classmethod
    def _known(cls, value: str) -> str:
        return normalise_stop_reason(value)

    @property
    def stop_reason(self) -> StopReason:
        """``stopReason`` as the wire value it was normalised to."""
        return normalise_stop_reason(self.stopReason)


class ChunkText(_Strict):
    """Bare chunk text as JSON."""

    text: str
    """The text, stored as one text delta."""
    eventId: str | None = Field(None, min_length=1, max_length=MAX_EVENT_ID_LENGTH)
    """The producer's idempotency key for this piece."""


class TurnUsage(_Answer):
    """A turn's usage: the sum over its assistant messages, empty ones included."""

    inputTokens: int
    """Input tokens not read from a cache."""
    outputTokens: int
    """Tokens the model produced."""
    cacheReadTokens: int = 0
    """Input tokens read from a prompt cache."""
    cacheWriteTokens: int = 0
    """Input tokens written to a prompt cache."""


class Run(_Answer):
    """A run (one child session) with its current turn and status."""

    runId: str
    """The run's id."""
    parentRunId: str | None = None
    """The parent agent's run, when one was given."""
    agent: str | None = None
    """The child agent's name, when one was given."""
    mode: RunMode
    """``oneshot``: one turn. ``continuable``: further turns after each end."""
    metadata: dict[str, Any]
    """Free JSON given at creation."""
    leaseSeconds: float
    """Seconds of silence after which an open turn ends as ``timeout``; 0: never."""
    status: RunStatus
    """``running``: a turn is open; ``idle``: a continuable run between turns; ``ended``."""
    turn: int
    """The current (or last) turn, from 1."""
    lastSeq: int
    """The ``seq`` of the last event in the run's log."""
    forkOf: ForkOf | None = None
    """The run this one forks and the boundary it inherits up to (only for forks)."""
    selection: Selection | None = None
    """The selection options the run was created with (only when given)."""
    leaseExpiresAt: str | None = None
    """When the open turn ends as ``timeout`` unless an event arrives (RFC 3339)."""
    createdAt: str
    """When the run was created (RFC 3339)."""
    updatedAt: str
    """When the run last changed (RFC 3339)."""


class TurnSummary(_Answer):
    """A run's latest turn in a run list (``?include=result``): the result without its output."""

    runId: str
    """The run's id."""
    turn: int
    """The run's latest turn."""
    status: Literal["running", "ended"]
    """``running`` while the turn is open, ``ended`` once it ended."""
    stopReason: StopReason | None = None
    """Why the turn ended (absent while it runs)."""
    isError: bool
    """True for every stop reason but ``completed``."""
    usage: TurnUsage | None = None
    """The turn's usage, summed over its messages."""
    error: Any = None
    """The error the turn ended with, if any."""
    startedAt: str
    """When the turn started (RFC 3339)."""
    endedAt: str | None = None
    """When the turn ended (RFC 3339); absent while it runs."""


class RunInList(Run):
    """A run as a run list shows it; with ``?include=result``, its latest turn too."""

    result: TurnSummary | None = None
    """The latest turn without its output (only with ``?include=result``)."""


class RunList(_Answer):
    """One page of runs, newest first."""

    runs: list[RunInList]
    """The runs of this page."""
    nextCursor: str | None = None
    """Pass as ``?cursor=`` for the next page; absent on the last page."""


class SubagentResult(_Answer):
    """A turn's result: its output by the selection rule, stop reason and usage."""

    runId: str
    """The run's id."""
    turn: int
    """The turn this is the result of."""
    status: Literal["running", "ended"]
    """``running`` while the turn is open (the output so far), ``ended`` once it ended."""
    stopReason: StopReason | None = None
    """Why the turn ended (absent while it runs)."""
    isError: bool
    """True for every stop reason but ``completed``."""
    output: list[dict[str, Any]]
    """The selected output: content blocks as the child sent them (SPEC §5); may be empty."""
    usage: TurnUsage
    """The turn's usage, summed over its messages."""
    error: Any = None
    """The error the turn ended with, if any."""
    startedAt: str
    """When the turn started (RFC 3339)."""
    endedAt: str | None = None
    """When the turn ended (RFC 3339); absent while it runs."""
    texts: list[str] | None = None
    """With ``?include=texts``: every visible text the assistant wrote in the turn, in order (each
    message's text blocks, and text streamed that no message told). Never the output: ``output`` is."""


class TextContent(_Answer):
    """A text item of a tool result."""

    type: Literal["text"]
    """Always ``text``."""
    text: str
    """Never empty."""


class DeliveryAttempt(_Answer):
    """One attempt of a webhook delivery."""

    at: str = Field(description="When the attempt started (RFC 3339).")
    statusCode: int | None = Field(None, description="The receiver's HTTP status, when it answered.")
    error: str | None = Field(None, description="Why no answer came (connection refused, time-out, …).")
    response: str | None = Field(None, description="The first characters of the receiver's answer.")
    durationMs: float = Field(description="How long the attempt took.")


class DeliveryView(_Answer):
    """One webhook delivery (one ``subagent/end``): its state and every attempt so far."""

    webhookId: str = Field(description="The webhook-id header of every attempt of this delivery.")
    turn: int = Field(description="The turn whose subagent/end is delivered.")
    state: Literal["pending", "delivered", "failed"] = Field(
        description="pending: will be (re)tried; delivered: a 2xx came back; failed: out of attempts.")
    attempts: list[DeliveryAttempt] = Field(description="Every attempt so far, oldest first.")
    lastStatus: int | None = Field(None, description="The status of the last attempt that got an answer.")
    nextAttemptAt: str | None = Field(None, description="When the next attempt is due (pending only).")


class DeliveryList(_Answer):
    """A run's webhook deliveries (SPEC §14)."""

    deliveries: list[DeliveryView] = Field(description="The run's deliveries, oldest first.")


class ChildrenJoin(_Answer):
    """A join of a parent's children: each child's current turn, and whether the wait was met."""

    runId: str = Field(description="The parent run.")
    done: bool = Field(description="Every child's current turn has ended (with ?any=true: at least one has).")
    children: list[SubagentResult] = Field(description="Each child's current turn, newest child first.")


class ToolResult(_Answer):
    """The parent model's tool result, in MCP ``CallToolResult`` shape."""

    content: list[TextContent]
    """One text: the output's text, or for a turn that did not complete a headline naming the
    stop reason followed by the partial text."""
    isError: bool
    """True unless the turn completed."""


class AppendResult(_Answer):
    """What an ingest request stored."""

    accepted: int
    """Events stored by this request."""
    duplicates: int
    """Events recognised by their ``eventId`` as already stored (retries), not stored again."""
    lastSeq: int
    """The ``seq`` of the run's last event after this request."""


class IngestResult(AppendResult):
    """What ``POST …/ingest/{format}`` stored, and how the provider's stream stopped."""

    stopReason: str | None = Field(
        None, description="The stream's stop reason (SPEC §6), when it is terminal; absent when the turn stays open."
    )
    providerStopReason: str | None = Field(
        None, description="The provider's own word for the stop (tool_use, max_output_tokens, …), when it gave one."
    )


class LoggedEvent(_Answer):
    """One entry of a run's durable log."""

    seq: int
    """Its place in the run's log: increasing, never reused."""
    turn: int
    """The turn it belongs to."""
    receivedAt: str
    """When the service accepted it (RFC 3339)."""
    event: dict[str, Any]
    """The event exactly as it was sent (or, for lifecycle events, as the service wrote it)."""


class EventPage(_Answer):
    """One page of a run's log, in ``seq`` order."""

    events: list[LoggedEvent]
    """The events of this page."""
    nextAfter: int
    """Pass as ``?after=`` for the next page."""


class Problem(_Answer):
    """An RFC 9457 problem document: why a request was refused. Some problems carry more
    fields (``index``, ``field``, ``limit``, ``stopReason``, ``accepted``, …)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    type: str
    """A URI naming the kind of problem."""
    title: str
    """A short summary of the kind of problem."""
    status: int
    """The HTTP status."""
    code: str
    """A stable machine-readable code (``run_not_found``, ``run_ended``, …)."""
    detail: str
    """What went wrong with this request, in words."""


class Health(_Answer):
    """A health probe's answer."""

    status: str
    """``ok`` (liveness) or ``ready`` (readiness)."""


class Omission(_Answer):
    """A logged event left out of a transcript whole, or one block of it (``block``: its index)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    runId: str
    """The run whose log holds the event (a fork's ancestor, for inherited events)."""
    seq: int
    """The event's ``seq`` in that run's log."""
    block: int | None = None
    """The index of the left-out block in the event's content (absent: the whole event)."""
    reason: str
    """Why: ``empty``, ``nothing_kept``, ``blank_text``, ``blank_refusal``, ``bookkeeping``,
    ``unsigned_reasoning``, ``reasoning``, ``unsupported_block``, ``misplaced_block``,
    ``misplaced_tool_result``, ``duplicate_tool_call``, ``unknown_tool_call``,
    ``already_answered``, ``unnamed_tool_call`` (docs/TRANSCRIPT.md)."""


class Insertion(_Answer):
    """A placeholder the transcript added so that the format's rules hold."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    index: int
    """The index of the message that holds it."""
    reason: str
    """Why: ``leading_assistant``, ``interrupted_tool_call``, ``empty_tool_result``,
    ``unsafe_tool_call_id`` (a tool call id a provider would refuse, replaced)."""
    toolCallId: str | None = None
    """The tool call it concerns, by the id sent in ``messages`` (absent for ``leading_assistant``)."""
    original: str | None = None
    """``unsafe_tool_call_id`` only: the id as it was logged, which ``toolCallId`` replaces (the
    same in the call and every result naming it, and on every request)."""


class TranscriptPage(_Answer):
    """A run's model-visible history as a provider request's ``messages`` (SPEC §12)."""

    format: Literal["anthropic", "openai"]
    """The format asked for."""
    messages: list[dict[str, Any]]
    """Ready to send as the request's ``messages`` (Anthropic Messages API or OpenAI Chat Completions)."""
    omitted: list[Omission]
    """Every event left out whole and every block left out, with the reason."""
    inserted: list[Insertion] | None = None
    """Every placeholder added (absent when none was)."""
