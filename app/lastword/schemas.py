"""Request and response bodies of the HTTP API (camelCase on the wire), for validation and OpenAPI."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lastword.ids import RUN_ID_PATTERN
from lastword.records import RunMode, RunStatus
from lastword.limits import MAX_AGENT_LENGTH, MAX_EVENT_ID_LENGTH, MAX_LEASE_SECONDS
from lastword.stop_reasons import ACCEPTED_INPUTS, ACCEPTED_PATTERN, StopReason, normalise_stop_reason


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ForkOf(_Strict):
    """The run a fork continues, and the last ``seq`` of that run's log it inherits (SPEC §12)."""

    runId: str = Field(pattern=RUN_ID_PATTERN, description="The parent run (itself possibly a fork).")
    # At most 2**53 - 1: JSON readers hold larger numbers inexactly, and no log gets that long.
    afterSeq: int = Field(
        ge=0, le=2**53 - 1,
        description="Inherit the parent's history up to and including this seq; 0 inherits nothing.",
    )


class Selection(_Strict):
    """Opt-in variations of the selection rule (SPEC §14)."""

    joinContinuations: bool = Field(
        False, description="Join a reply split over max-tokens segments into one output."
    )


class RunCreate(_Strict):
    runId: str | None = Field(None, pattern=RUN_ID_PATTERN)
    parentRunId: str | None = Field(None, pattern=RUN_ID_PATTERN)
    agent: str | None = Field(None, max_length=MAX_AGENT_LENGTH)
    mode: RunMode = "oneshot"
    metadata: dict[str, Any] = Field(default_factory=dict)
    leaseSeconds: float | None = Field(None, ge=0, le=MAX_LEASE_SECONDS, allow_inf_nan=False)
    forkOf: ForkOf | None = None
    selection: Selection | None = None

    @field_validator("leaseSeconds", mode="before")
    @classmethod
    def _int_is_a_number(cls, value: Any) -> Any:
        # Strict mode refuses 30 for a float field; JSON has one number type.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class EndRequest(_Strict):
    stopReason: str = Field(
        description="A wire value or an accepted alias (SPEC §6).",
        json_schema_extra={"pattern": ACCEPTED_PATTERN, "examples": list(ACCEPTED_INPUTS)},
    )
    error: Any = None
    cascade: bool = False

    @field_validator("stopReason")
    @classmethod
    def _known(cls, value: str) -> str:
        return normalise_stop_reason(value)

    @property
    def stop_reason(self) -> StopReason:
        """``stopReason`` as the wire value it was normalised to."""
        return normalise_stop_reason(self.stopReason)


class ChunkText(_Strict):
    text: str
    eventId: str | None = Field(None, min_length=1, max_length=MAX_EVENT_ID_LENGTH)


class Usage(BaseModel):
    inputTokens: int
    outputTokens: int
    cacheReadTokens: int = 0
    cacheWriteTokens: int = 0


class Run(BaseModel):
    runId: str
    parentRunId: str | None = None
    agent: str | None = None
    mode: RunMode
    metadata: dict[str, Any]
    leaseSeconds: float
    status: RunStatus
    turn: int
    lastSeq: int
    forkOf: ForkOf | None = None
    selection: Selection | None = None
    leaseExpiresAt: str | None = None
    createdAt: str
    updatedAt: str


class TurnSummary(BaseModel):
    """A run's latest turn in a run list (``?include=result``): the result without its output."""

    runId: str
    turn: int
    status: Literal["running", "ended"]
    stopReason: str | None = None
    isError: bool
    usage: Usage | None = None
    error: Any = None
    startedAt: str
    endedAt: str | None = None


class RunInList(Run):
    result: TurnSummary | None = None


class RunList(BaseModel):
    runs: list[RunInList]
    nextCursor: str | None = None


class SubagentResult(BaseModel):
    runId: str
    turn: int
    status: Literal["running", "ended"]
    stopReason: StopReason | None = None
    isError: bool
    output: list[dict[str, Any]]
    usage: Usage
    error: Any = None
    startedAt: str
    endedAt: str | None = None


class TextContent(BaseModel):
    type: Literal["text"]
    text: str


class ToolResult(BaseModel):
    content: list[TextContent]
    isError: bool


class AppendResult(BaseModel):
    accepted: int
    duplicates: int
    lastSeq: int


class LoggedEvent(BaseModel):
    seq: int
    turn: int
    receivedAt: str
    event: dict[str, Any]


class EventPage(BaseModel):
    events: list[LoggedEvent]
    nextAfter: int


class Problem(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    code: str
    detail: str


class Health(BaseModel):
    status: str


class Omission(BaseModel):
    """A logged event left out of a transcript whole, or one block of it (``block``: its index)."""

    model_config = ConfigDict(extra="allow")

    runId: str = Field(description="The run whose log holds the event (a fork's ancestor, for inherited events).")
    seq: int
    block: int | None = Field(None, description="The index of the left-out block in the event's content.")
    reason: str = Field(
        description="empty, nothing_kept, blank_text, blank_refusal, bookkeeping, unsigned_reasoning, "
        "reasoning, unsupported_block, misplaced_block, misplaced_tool_result, duplicate_tool_call, "
        "unknown_tool_call, already_answered"
    )


class Insertion(BaseModel):
    """A placeholder the transcript added so that the format's rules hold."""

    model_config = ConfigDict(extra="allow")

    index: int = Field(description="The index of the message that holds it.")
    reason: str = Field(description="leading_assistant, interrupted_tool_call, empty_tool_result")


class TranscriptPage(BaseModel):
    """A run's model-visible history as a provider request's ``messages`` (SPEC §12)."""

    format: Literal["anthropic", "openai"]
    messages: list[dict[str, Any]]
    omitted: list[Omission]
    inserted: list[Insertion] | None = None
