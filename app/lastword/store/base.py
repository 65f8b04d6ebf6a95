"""The storage contract every backend meets, and the records it hands out.

A store owns the durable log and the folds of open turns: every operation that changes a run
runs in one database transaction, holding the run's row lock, so that ``seq`` is assigned
gap-free in commit order and a turn ends exactly once, whichever replica asks.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, frozen=True)
class RunSpec:
    """What a client asked for when it created a run (kept to answer a repeated create)."""

    run_id: str
    parent_run_id: str | None
    agent: str | None
    mode: str
    metadata: dict[str, Any]
    lease_seconds: float | None
    canonical: str  # the request body, canonical JSON, for the idempotency comparison


@dataclass(slots=True, frozen=True)
class RunRecord:
    pk: int
    run_id: str
    parent_run_id: str | None
    agent: str | None
    mode: str
    metadata: dict[str, Any]
    lease_seconds: float
    canonical: str
    status: str  # running | idle | ended
    turn: int
    last_seq: int
    lease_expires_at: float | None
    created_at: float
    updated_at: float


@dataclass(slots=True, frozen=True)
class TurnRecord:
    run_id: str
    turn: int
    start_seq: int
    started_at: float
    ended_at: float | None
    stop_reason: str | None
    error: Any
    output: list[dict[str, Any]]
    usage: dict[str, int]

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


@dataclass(slots=True)
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


@dataclass(slots=True)
class AppendOutcome:
    accepted: int
    duplicates: int
    last_seq: int
    stored: list[StoredEvent] = field(default_factory=list)
    ended: TurnRecord | None = None


@dataclass(slots=True)
class EndOutcome:
    run: RunRecord
    turn: TurnRecord
    changed: bool  # False when the turn had already ended the same way
    stored: list[StoredEvent] = field(default_factory=list)


class Store(abc.ABC):
    """The operations the service needs; each is atomic and durable when it returns."""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise :class:`lastword.errors.Unavailable` when the database cannot be reached."""

    @abc.abstractmethod
    async def create_run(
        self, spec: RunSpec, now: float
    ) -> tuple[RunRecord, bool, list[StoredEvent]]:
        """Create a run and its first turn; a repeat of the same spec returns the run."""

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRecord: ...

    @abc.abstractmethod
    async def list_runs(
        self,
        *,
        parent_run_id: str | None,
        status: str | None,
        agent: str | None,
        limit: int,
        before_pk: int | None,
    ) -> list[RunRecord]: ...

    @abc.abstractmethod
    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        """Append validated events to the run's open turn, all or nothing.

        ``encoded`` holds each event's JSON when the caller has it already (saves encoding twice).
        """

    @abc.abstractmethod
    async def end_turn(
        self,
        run_id: str,
        stop_reason: str,
        error: Any,
        now: float,
        *,
        only_if_expired: bool = False,
    ) -> EndOutcome | None:
        """End the open turn. ``only_if_expired`` (the sweep) ends it only if its lease ran out."""

    @abc.abstractmethod
    async def start_turn(self, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]: ...

    @abc.abstractmethod
    async def close_run(
        self, run_id: str, now: float
    ) -> tuple[RunRecord, list[StoredEvent]]: ...

    @abc.abstractmethod
    async def turn_result(
        self, run_id: str, turn: int | None
    ) -> tuple[RunRecord, TurnRecord]:
        """The run and one turn (default: the latest), with the output selected so far."""

    @abc.abstractmethod
    async def snapshot(self, run_id: str) -> tuple[RunRecord, TurnRecord]:
        """Run and latest turn as of one point in the log (``run.last_seq``)."""

    @abc.abstractmethod
    async def events_after(
        self, run_id: str, after: int, limit: int, types: frozenset[str] | None = None
    ) -> list[StoredEvent]: ...

    @abc.abstractmethod
    async def feed_after(
        self, after: int, parent_run_id: str | None, limit: int
    ) -> list[StoredEvent]:
        """Lifecycle events of every run, in firehose order (``feed_id``)."""

    @abc.abstractmethod
    async def last_feed_id(self) -> int:
        """The highest firehose id in the feed now (0 when it is empty): where a new stream starts."""

    @abc.abstractmethod
    async def highest_feed_id_issued(self) -> int:
        """The highest firehose id ever given out, whether or not retention deleted it since.

        A resume point up to it is one the firehose may have sent; only beyond it is a resume
        point "past the end".
        """

    @abc.abstractmethod
    async def expired_runs(self, now: float) -> list[str]: ...

    @abc.abstractmethod
    async def delete_ended_runs(self, ended_before: float, now: float, limit: int = 200) -> list[str]:
        """Delete up to ``limit`` runs that ended before ``ended_before``; their ids.

        Each deleted run leaves a tombstone: reading it later answers 410, not 404.
        """

    @abc.abstractmethod
    async def count_runs(self) -> dict[str, int]:
        """How many runs there are in each status."""
