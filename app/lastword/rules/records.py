"""The records the service works with: runs, turns and logged events, as plain values.

Nothing here knows SQL or HTTP. The store hands these out, the run state machine
(:mod:`lastword.rules.runstate`) decides over them, the views render them. Every record is built with
keywords, so a field added or reordered cannot silently shift the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from lastword.rules.stop_reasons import StopReason

RunStatus = Literal["running", "idle", "ended"]
RunMode = Literal["oneshot", "continuable"]


@dataclass(slots=True, frozen=True, kw_only=True)
class NewRun:
    """A run a client asks to create, as the service takes it (every face converts its own input).

    ``None`` is "not asked for": the service makes the id and the store applies the default
    lease; ``join_continuations`` is ``None`` when no selection was sent at all, which the
    idempotency comparison tells apart from an explicit ``False``.
    """

    run_id: str | None = None
    parent_run_id: str | None = None
    agent: str | None = None
    mode: RunMode = "oneshot"
    metadata: dict[str, Any] = field(default_factory=dict)
    lease_seconds: float | None = None
    fork_of: tuple[str, int] | None = None  # (parent run id, afterSeq): SPEC §12 forks
    join_continuations: bool | None = None  # SPEC §14 selection
    webhook: WebhookTarget | None = None  # the secret as sent (the service stores its digest)


@dataclass(slots=True, frozen=True, kw_only=True)
class RunSpec:
    """What a client asked for when it created a run (kept to answer a repeated create)."""

    run_id: str
    parent_run_id: str | None
    agent: str | None
    mode: RunMode
    metadata: dict[str, Any]
    lease_seconds: float | None
    canonical: str  # the request body, canonical JSON, for the idempotency comparison
    webhook: WebhookTarget | None = None
    fork_of: tuple[str, int] | None = None  # (parent run id, afterSeq): SPEC §12 forks
    #: ``selection.joinContinuations`` as asked (SPEC §14); None when no ``selection`` was sent.
    join_continuations: bool | None = None


@dataclass(slots=True, frozen=True, kw_only=True)
class WebhookTarget:
    """Where a run's ``subagent/end`` events are POSTed (SPEC §14); the secret is never shown."""

    url: str
    secret: str | None


# Not frozen, unlike the other records: the state machine builds one per ingest request, and a
# frozen dataclass takes twice as long to build. Nothing changes a record in place.
@dataclass(slots=True, kw_only=True)
class RunRecord:
    pk: int  # the store's key, 0 until the run is stored
    run_id: str
    parent_run_id: str | None
    agent: str | None
    mode: RunMode
    metadata: dict[str, Any]
    lease_seconds: float
    canonical: str
    status: RunStatus
    turn: int
    last_seq: int
    lease_expires_at: float | None
    created_at: float
    updated_at: float
    #: The run's options as asked, each a value of its own (``canonical`` is only for telling a
    #: repeated create from a different one): ``forkOf`` (SPEC §12) and
    #: ``selection.joinContinuations`` (SPEC §14; None when no ``selection`` was sent).
    fork_of: tuple[str, int] | None = None
    join_continuations: bool | None = None


@dataclass(slots=True, frozen=True, kw_only=True)
class TurnRecord:
    run_id: str
    turn: int
    start_seq: int
    started_at: float
    ended_at: float | None
    stop_reason: StopReason | None
    error: Any
    output: list[dict[str, Any]]
    usage: dict[str, int]

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


@dataclass(slots=True, kw_only=True)
class StoredEvent:
    run_id: str
    seq: int
    turn: int
    type: str
    body: dict[str, Any]
    received_at: float
    event_id: str | None = None
    parent_run_id: str | None = None
    feed_id: int | None = None  # set on lifecycle events: their place in the firehose
    #: The SSE bytes of this event by message id, filled by the first subscriber that sends it
    #: (the hub hands one object to every subscriber, so the rest reuse them).
    encoded: dict[int, bytes] | None = None


@dataclass(slots=True, kw_only=True)
class AppendOutcome:
    accepted: int
    duplicates: int
    last_seq: int
    stored: list[StoredEvent] = field(default_factory=list)
    ended: TurnRecord | None = None
    #: How many events of each type this append stored (duplicates left out), for the metrics.
    accepted_types: dict[str, int] = field(default_factory=dict)
    #: ``stored`` leaves out the chunks this append stored (too many to hand to subscribers).
    chunks_left_out: bool = False


@dataclass(slots=True, kw_only=True)
class EndOutcome:
    run: RunRecord
    turn: TurnRecord
    changed: bool  # False when the turn had already ended the same way
    stored: list[StoredEvent] = field(default_factory=list)


@dataclass(slots=True, frozen=True, kw_only=True)
class Delivery:
    """One webhook delivery (one ``subagent/end``) and its attempts so far."""

    id: int
    webhook_id: str
    run_id: str
    turn: int
    state: str  # pending, delivered, failed
    attempts: list[dict[str, Any]]
    last_status: int | None
    next_attempt_at: float | None


@dataclass(slots=True, frozen=True, kw_only=True)
class DeliveryJob:
    """A due delivery this replica has leased, with what it needs to make one attempt."""

    id: int
    webhook_id: str
    url: str
    secret: str | None
    payload: str
    attempts: list[dict[str, Any]]
    leased_until: float
