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


class RunCreate(_Strict):
    runId: str | None = Field(None, pattern=RUN_ID_PATTERN)
    parentRunId: str | None = Field(None, pattern=RUN_ID_PATTERN)
    agent: str | None = Field(None, max_length=MAX_AGENT_LENGTH)
    mode: RunMode = "oneshot"
    metadata: dict[str, Any] = Field(default_factory=dict)
    leaseSeconds: float | None = Field(None, ge=0, le=MAX_LEASE_SECONDS, allow_inf_nan=False)

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
    leaseExpiresAt: str | None = None
    createdAt: str
    updatedAt: str


class RunList(BaseModel):
    runs: list[Run]
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
