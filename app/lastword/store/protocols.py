"""The storage contract, in small protocols: each names what one part of the service needs.

:class:`lastword.store.base.Store` is all of them, and each backend
(:class:`lastword.store.sql.store.SqlStore`) is a ``Store``; a caller names only the protocols it
uses (the webhook sender an :class:`Outbox`, the fan-out a :class:`Feed` and a :class:`RunLog`),
and each protocol has its own abstract test suite that every backend runs
(``tests/store_contract.py``). Every operation is atomic and durable when it returns.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from lastword.rules.ds import AppendRequest, CreateRequest, Outcome, Producer, Slice
from lastword.rules.records import (
    AppendOutcome,
    Delivery,
    DeliveryJob,
    EndOutcome,
    RunRecord,
    RunSpec,
    RunStatus,
    StoredEvent,
    TurnRecord,
)
from lastword.rules.stop_reasons import StopReason


class Ping(Protocol):
    """Reaching the database (readiness), without the power to open or close it."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise :class:`lastword.errors.Unavailable` when the database cannot be reached."""


class Lifetime(Ping, Protocol):
    """Opening, closing and reaching the database: the composition root's part."""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


class RunReads(Protocol):
    """Reading runs, their turns and their logs, as the faces show them (no write, no lock)."""

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRecord: ...

    @abc.abstractmethod
    async def list_runs(
        self,
        *,
        parent_run_id: str | None,
        status: RunStatus | None,
        agent: str | None,
        limit: int,
        before_pk: int | None,
        stop_reason: StopReason | None = None,
    ) -> list[RunRecord]:
        """Runs newest first; ``stop_reason`` keeps runs whose latest turn ended with it."""

    @abc.abstractmethod
    async def current_turns(self, run_ids: Sequence[str]) -> dict[str, TurnRecord]:
        """The stored row of each run's latest turn, by run id (unknown ids are left out).

        An open turn's row has no stop reason and not its usage so far: that lives in its fold.
        """

    @abc.abstractmethod
    async def snapshot(self, run_id: str) -> tuple[RunRecord, TurnRecord]:
        """Run and latest turn as of one point in the log (``run.last_seq``)."""

    @abc.abstractmethod
    async def events_after(
        self, run_id: str, after: int, limit: int, types: frozenset[str] | None = None
    ) -> list[StoredEvent]: ...


class RunLog(RunReads, Protocol):
    """Runs, their turns and their logs: every write to a run is here, each one transaction under
    the run's lock, so ``seq`` is gap-free in commit order and a turn ends exactly once."""

    @abc.abstractmethod
    async def create_run(
        self, spec: RunSpec, now: float
    ) -> tuple[RunRecord, bool, list[StoredEvent]]:
        """Create a run and its first turn; a repeat of the same spec returns the run."""

    @abc.abstractmethod
    async def create_run_with_events(
        self, spec: RunSpec, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None
    ) -> tuple[RunRecord, bool, list[StoredEvent], AppendOutcome | None]:
        """:meth:`create_run` and, when it created the run, :meth:`append` of ``events`` in the
        same transaction: all or nothing, so events the store refuses leave no run behind (a
        stream created with initial content, SPEC §17). The run is returned as it is after the
        append; the outcome is None when nothing was appended (no events, or a repeat)."""

    @abc.abstractmethod
    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        """Append validated events to the run's open turn, all or nothing.

        ``encoded`` holds each event's JSON when the caller has it already (saves encoding twice).
        """

    @abc.abstractmethod
    async def append_as_producer(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None,
        producer: Producer | None,
    ) -> tuple[AppendOutcome, tuple[int, int] | None]:
        """:meth:`append`, fenced by an idempotent producer's epoch and seq (SPEC §17) checked and
        recorded in the same transaction: a stale epoch is 403, a gap 409 (nothing stored), a
        repeat stores nothing and answers ``accepted == 0``. The second value is the producer's
        ``(epoch, seq)`` as now recorded (None without a producer)."""

    @abc.abstractmethod
    async def append_batches(
        self, run_id: str, batches: Iterable[tuple[list[dict[str, Any]], list[str]]], now: float
    ) -> AppendOutcome:
        """Append validated events, given as batches of (events, their JSON), all in one
        transaction: all or nothing, like :meth:`append` of every batch's events at once.

        ``batches`` is consumed in the store's worker thread, one batch at a time, so a caller
        that reads them from a file never holds all the events as dicts. When they hold more
        chunks than one subscriber buffers, the outcome's ``stored`` leaves the chunks out and
        says so (``chunks_left_out``): subscribers read them from the log.
        """

    @abc.abstractmethod
    async def end_turn(
        self,
        run_id: str,
        stop_reason: StopReason,
        error: Any,
        now: float,
        *,
        only_if_expired: bool = False,
    ) -> EndOutcome | None:
        """End the open turn. ``only_if_expired`` (the sweep) ends it only if its lease ran out."""

    @abc.abstractmethod
    async def renew_lease(self, run_id: str, now: float) -> None:
        """Renew the open turn's lease from ``now`` without an event (an ingest body whose bytes
        keep arriving); nothing for a run that is not running or has no lease."""

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
    async def inherited_events(self, run_id: str) -> list[StoredEvent]:
        """A fork's inherited history in ``seq`` order, each event under the run and turn it was
        logged in (``[]`` for a run that is not a fork)."""

    @abc.abstractmethod
    async def expired_runs(self, now: float) -> list[str]: ...


class Feed(Protocol):
    """The firehose: every run's lifecycle events in one order (``feed_id``), written by the
    :class:`RunLog`'s transactions that start, end or close a turn."""

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


class Retention(Protocol):
    """Deleting runs that ended long ago, leaving tombstones."""

    @abc.abstractmethod
    async def delete_ended_runs(self, ended_before: float, now: float, limit: int = 200) -> list[str]:
        """Delete up to ``limit`` runs that ended before ``ended_before``, with all they hold
        (their log, turns, webhook targets, sent deliveries, Durable Streams producers); their ids.

        Each deleted run leaves a tombstone: reading it later answers 410, not 404.
        """


class Stats(Protocol):
    """Counts for ``/metrics``."""

    @abc.abstractmethod
    async def count_runs(self) -> dict[str, int]:
        """How many runs there are in each status."""


class Reads(RunReads, Feed, Stats, Protocol):
    """Everything the faces read: what :attr:`lastword.service.RunService.reads` is, so the
    service carries no method that only passes a read on to the store."""


class Outbox(Protocol):
    """The webhook outbox: deliveries written in the transaction that ends a turn
    (:meth:`RunLog.end_turn` and the others that end one), leased to one sender at a time."""

    @abc.abstractmethod
    async def claim_deliveries(self, now: float, lease_seconds: float, limit: int) -> list[DeliveryJob]:
        """Lease up to ``limit`` due deliveries to the caller (one replica at a time each)."""

    @abc.abstractmethod
    async def record_attempt(
        self, job: DeliveryJob, attempts: list[dict[str, Any]], state: str, status: int | None,
        next_attempt_at: float | None,
    ) -> bool:
        """Store an attempt's outcome if the caller still holds the lease; whether it did."""

    @abc.abstractmethod
    async def release_deliveries(self, jobs: list[DeliveryJob]) -> int:
        """Give up the caller's leases on ``jobs``, unattempted: each is due again at once for any
        replica. How many leases it still held (a lease already run out is not touched)."""

    @abc.abstractmethod
    async def deliveries(self, run_id: str) -> list[Delivery]:
        """The run's deliveries, oldest first (404/410 for an unknown or deleted run)."""

    @abc.abstractmethod
    async def outbox_stats(self) -> tuple[int, float | None]:
        """Pending deliveries: how many, and when the oldest was created."""

    @abc.abstractmethod
    async def next_delivery_due(self) -> float | None:
        """When the earliest pending delivery can next be claimed (a leased one: when its lease
        runs out)."""


class Streams(Protocol):
    """Durable Streams (SPEC §17, :mod:`lastword.store.sql.ds`)."""

    @abc.abstractmethod
    async def ds_create(self, request: CreateRequest, now: float) -> Outcome:
        """Create a stream (or a fork), or find the same one there already (200; else 409)."""

    @abc.abstractmethod
    async def ds_append(self, request: AppendRequest, now: float) -> Outcome:
        """Append (and/or close) under the stream's lock, producer state in the same transaction."""

    @abc.abstractmethod
    async def ds_read(self, path: str, position: int | str, now: float, max_bytes: int) -> Slice:
        """The entries after ``position`` (an offset as sent, or a position), up to about ``max_bytes``."""

    @abc.abstractmethod
    async def ds_touch(self, path: str, now: float) -> None:
        """Reset a sliding TTL (a read)."""

    @abc.abstractmethod
    async def ds_delete(self, path: str, now: float) -> None:
        """Delete a stream (soft while forks point at it)."""
