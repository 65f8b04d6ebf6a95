"""The store over SQL, written once over DB-API connections, shared by SQLite and PostgreSQL.

Each write is one transaction that a backend runs in a worker thread: read the run under its
row lock (and the open turn's fold under its lock, :mod:`lastword.store.sql.folds`), ask the run
state machine (:mod:`lastword.rules.runstate`) what changes, persist that (:mod:`lastword.store.sql.writes`).
This module decides nothing about runs or turns; it sequences reads, decisions and writes.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

from lastword.errors import LastwordError
from lastword.rules import runstate
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
from lastword.rules.runstate import Appended, Change
from lastword.rules.stop_reasons import StopReason
from lastword.rules.ds import AppendRequest, CreateRequest, Outcome, Producer, Slice
from lastword.store.sql import ds, forks, outbox, reads, retention, writes
from lastword.store.base import Store
from lastword.store.sql.dialect import Dialect
from lastword.store.sql.folds import FOLD_CACHE_BYTES, FOLD_CACHE_SIZE, FoldCache, FoldSlot, caught_up
from lastword.store.sql.tx import Tx

T = TypeVar("T")
P = ParamSpec("P")


#: Chunks one append hands to the fan-out at most; more and subscribers read them from the log
#: (a subscriber buffers no more than about this many: past it, it goes to the log anyway).
LIVE_CHUNKS = 1000


def _shift_index(error: LastwordError, offset: int) -> None:
    """An error about the ``index``-th event of a batch, made to name its place in the whole append."""
    index = error.extra.get("index")
    if offset and isinstance(index, int):
        error.extra["index"] = index + offset
        error.detail = error.detail.replace(f"event {index}", f"event {index + offset}", 1)


def _anyone_may_listen(run_id: str) -> bool:
    """Until told who listens, every append hands its chunks to the fan-out."""
    return True


#: Most events of an append whose eventIds are looked up with its batch's (SQLite's group
#: commit): a bigger append looks up its own, one statement among its many rows, and is not
#: made to list its ids on the event loop as well (listing them costs as much as a small append).
BATCHED_IDS_UP_TO = 64


def _batched_ids(events: Sequence[dict[str, Any]]) -> list[str] | None:
    """The eventIds of a small append (:func:`reads.event_ids`), listed once for its batch's look-up
    and its own write; None for a bigger one (its write lists them)."""
    return reads.event_ids(events) if len(events) <= BATCHED_IDS_UP_TO else None


#: Most events an append counts one by one (:func:`_count_types`).
COUNTED_ONE_BY_ONE_UP_TO = 8


def _count_types(logged: Sequence[Appended]) -> dict[str, int]:
    """How many of the logged events are of each type, in the order the types first come.

    Counted a type at a time (``list.count``, in C): a few types among many events. A loop
    adding one an event was a twentieth of a 1,000-event append's instructions; a ``Counter``
    costs more than the loop for the one-event appends of a fleet. Those few are counted by
    the loop: listing the types first, then each once, cost a fleet's delta four times as much.
    """
    if len(logged) <= COUNTED_ONE_BY_ONE_UP_TO:
        counted: dict[str, int] = {}
        for _, event, _ in logged:
            kind = event["type"]
            counted[kind] = counted.get(kind, 0) + 1
        return counted
    types = [event["type"] for _, event, _ in logged]
    return {kind: types.count(kind) for kind in dict.fromkeys(types)}


class SqlStore(Store):
    """The operations over SQL; subclasses bring connections, schema and transactions, and the
    dialect (:mod:`lastword.store.sql.dialect`) the queries ask what differs."""

    def __init__(
        self, dialect: Dialect, *, default_lease_seconds: float, fold_cache_size: int = FOLD_CACHE_SIZE,
        fold_cache_bytes: int = FOLD_CACHE_BYTES, chunk_listeners: Callable[[str], bool] | None = None,
    ) -> None:
        self.dialect = dialect
        self.default_lease_seconds = default_lease_seconds
        self.folds = FoldCache(fold_cache_size, fold_cache_bytes)
        #: Whether run ``run_id`` has a live subscriber now, asked by an append in its transaction
        #: (the hub's, where the store hands chunks to this process's hub: :mod:`lastword.registry`).
        #: When it has none, the append leaves its chunks out of the outcome (``chunks_left_out``)
        #: and the service sends a subscriber that registered meanwhile to the log.
        self.chunk_listeners = chunk_listeners or _anyone_may_listen

    # -- what a backend provides ---------------------------------------------------------

    @abc.abstractmethod
    async def _write(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(tx, *args, **kwargs)`` in a write transaction, committed before this returns."""

    async def _write_on(
        self, run_id: str, ids: Sequence[str], fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """:meth:`_write` of a write that changes no run but ``run_id`` (an append), looking up
        ``ids`` in its log: a store may take such writes of many runs together (SQLite reads
        their rows, and the events under their ids, in one go)."""
        return await self._write(fn, *args, **kwargs)

    @abc.abstractmethod
    async def _read(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(tx, *args, **kwargs)`` in a read-only transaction."""

    # -- writes ----------------------------------------------------------------------------

    def _persist(
        self, tx: Tx, before: RunRecord, change: Change, now: float, *, appended_stored: bool = False,
        live_chunks: bool = True,
    ) -> list[StoredEvent]:
        stored = writes.persist(
            tx, self.dialect, change, first_seq=before.last_seq + 1, now=now, appended_stored=appended_stored,
            live_chunks=live_chunks,
        )
        if change.ended is not None:
            self.folds.forget(before.run_id, change.ended.turn)
        return stored

    async def create_run(self, spec: RunSpec, now: float) -> tuple[RunRecord, bool, list[StoredEvent]]:
        return await self._write(self._create_run, spec, now)

    def _create_run(self, tx: Tx, spec: RunSpec, now: float) -> tuple[RunRecord, bool, list[StoredEvent]]:
        change = runstate.create(spec, now, self.default_lease_seconds)
        pk = writes.insert_run(tx, change.run)
        if pk is None:
            return runstate.repeated_create(reads.run(tx, self.dialect, spec.run_id, lock=False), spec), False, []
        # A deleted run's id is not given out again: its old readers would mistake the new run.
        reads.refuse_deleted(tx, spec.run_id)
        if spec.fork_of is not None:
            forks.inherit(tx, spec.run_id, *spec.fork_of)
        if spec.webhook is not None:
            outbox.add_target(tx, spec.run_id, spec.webhook)
        stored = writes.persist(tx, self.dialect, change, first_seq=change.run.last_seq, now=now, new_run=True)
        return replace(change.run, pk=pk), True, stored

    async def create_run_with_events(
        self, spec: RunSpec, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None
    ) -> tuple[RunRecord, bool, list[StoredEvent], AppendOutcome | None]:
        return await self._write(self._create_run_with_events, spec, events, now, encoded)

    def _create_run_with_events(
        self, tx: Tx, spec: RunSpec, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None
    ) -> tuple[RunRecord, bool, list[StoredEvent], AppendOutcome | None]:
        run, created, stored = self._create_run(tx, spec, now)
        if not created or not events:
            return run, created, stored, None
        # A refusal raised here rolls the run back with the events: nothing half-appended.
        outcome = self._append(tx, spec.run_id, events, now, encoded)
        run = reads.run(tx, self.dialect, spec.run_id, lock=False)
        return run, created, stored + outcome.stored, outcome

    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        ids = _batched_ids(events)
        return await self._write_on(run_id, ids or (), self._append, run_id, events, now, encoded, ids)

    def _append(
        self, tx: Tx, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None,
        ids: list[str] | None = None,
    ) -> AppendOutcome:
        """``ids``: :func:`reads.event_ids` of ``events``, if the caller listed them (None: listed here)."""
        run = reads.run(tx, self.dialect, run_id, lock=True)
        if ids is None:
            ids = reads.event_ids(events)
        fresh, duplicates = runstate.without_duplicates(
            events, reads.stored_event_ids(tx, self.dialect, run_id, ids), carried=ids)
        if not fresh:
            # A retry of events that were all stored answers the same, even after the end.
            return AppendOutcome(accepted=0, duplicates=duplicates, last_seq=run.last_seq)
        if not runstate.accepts_events(run):
            raise runstate.turn_has_ended(run, reads.turn(tx, run_id, run.turn), fresh[0][0])
        fold = self.folds.held(tx, run)
        # The rows go to the store before the events are folded: PostgreSQL's server inserts
        # them while this thread folds (the COPY completes with the transaction's next statement).
        logged = runstate.numbered(run, fresh, encoded)
        self.dialect.insert_events(tx, run_id, run.turn, logged, now, with_ids=bool(ids))
        change = runstate.append(run, fold, fresh, now, logged=logged)
        # A chunk event for each delta nobody streams was a twentieth of a batch's CPU: made
        # only when the run has a subscriber now (one that comes before the commit is sent to
        # the log by the service: chunks_left_out).
        live_chunks = not self.dialect.returns_chunks or self.chunk_listeners(run_id)
        stored = self._persist(tx, run, change, now, appended_stored=True, live_chunks=live_chunks)
        accepted_types = _count_types(logged)
        return AppendOutcome(
            accepted=len(fresh), duplicates=duplicates, last_seq=change.run.last_seq, stored=stored,
            ended=None if change.ended is None else reads.turn(tx, run_id, run.turn),
            accepted_types=accepted_types,
            chunks_left_out=not live_chunks and "assistant/chunk" in accepted_types,
        )

    async def append_as_producer(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None,
        producer: Producer | None,
    ) -> tuple[AppendOutcome, tuple[int, int] | None]:
        ids = _batched_ids(events)
        return await self._write_on(
            run_id, ids or (), self._append_as_producer, run_id, events, now, encoded, producer, ids)

    def _append_as_producer(
        self, tx: Tx, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None,
        producer: Producer | None, ids: list[str] | None = None,
    ) -> tuple[AppendOutcome, tuple[int, int] | None]:
        if producer is None:
            return self._append(tx, run_id, events, now, encoded, ids), None
        # The run's lock first: it orders this producer check as it orders the run's appends.
        run = reads.run(tx, self.dialect, run_id, lock=True)
        repeated = ds.producer_repeat(tx, ds.run_producers(run_id), producer)
        if repeated is not None:
            return AppendOutcome(accepted=0, duplicates=len(events), last_seq=run.last_seq), repeated
        return self._append(tx, run_id, events, now, encoded, ids), (producer.epoch, producer.seq)

    async def append_batches(
        self, run_id: str, batches: Iterable[tuple[list[dict[str, Any]], list[str]]], now: float
    ) -> AppendOutcome:
        return await self._write_on(run_id, (), self._append_batches, run_id, batches, now)

    def _append_batches(
        self, tx: Tx, run_id: str, batches: Iterable[tuple[list[dict[str, Any]], list[str]]], now: float
    ) -> AppendOutcome:
        total: AppendOutcome | None = None
        types: Counter[str] = Counter()
        offset = 0
        for events, encoded in batches:
            try:
                outcome = self._append(tx, run_id, events, now, encoded)
            except LastwordError as error:
                _shift_index(error, offset)
                raise
            offset += len(events)
            types.update(outcome.accepted_types)
            if total is None:
                total = outcome
                continue
            total.accepted += outcome.accepted
            total.duplicates += outcome.duplicates
            total.last_seq = outcome.last_seq
            total.ended = outcome.ended or total.ended
            total.stored.extend(outcome.stored)
            total.chunks_left_out = total.chunks_left_out or outcome.chunks_left_out
            if not total.chunks_left_out and sum(e.type == "assistant/chunk" for e in total.stored) > LIVE_CHUNKS:
                total.chunks_left_out = True
            if total.chunks_left_out:
                total.stored = [event for event in total.stored if event.type != "assistant/chunk"]
        if total is None:
            raise ValueError("append_batches without a batch")
        total.accepted_types = dict(types)
        return total

    async def end_turn(
        self, run_id: str, stop_reason: StopReason, error: Any, now: float, *, only_if_expired: bool = False
    ) -> EndOutcome | None:
        return await self._write(self._end_turn, run_id, stop_reason, error, now, only_if_expired)

    async def renew_lease(self, run_id: str, now: float) -> None:
        await self._write(writes.renew_lease, run_id, now)

    def _end_turn(
        self, tx: Tx, run_id: str, stop_reason: StopReason, error: Any, now: float, only_if_expired: bool
    ) -> EndOutcome | None:
        run = reads.run(tx, self.dialect, run_id, lock=True)
        decision = runstate.decide_end(run, now, only_if_expired=only_if_expired)
        if decision == "skip":
            return None
        if decision == "repeat":
            last = runstate.repeated_end(run, reads.turn(tx, run_id, run.turn), stop_reason)
            return EndOutcome(run=run, turn=last, changed=False)
        change = runstate.end_turn(run, self.folds.held(tx, run), stop_reason, error, now)
        stored = self._persist(tx, run, change, now)
        return EndOutcome(run=change.run, turn=reads.turn(tx, run_id, run.turn), changed=True, stored=stored)

    async def start_turn(self, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        return await self._write(self._start_next_turn, run_id, now)

    def _start_next_turn(self, tx: Tx, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        run = reads.run(tx, self.dialect, run_id, lock=True)
        change = runstate.next_turn(run, now)
        return change.run, self._persist(tx, run, change, now)

    async def close_run(self, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        return await self._write(self._close_run, run_id, now)

    def _close_run(self, tx: Tx, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        run = reads.run(tx, self.dialect, run_id, lock=True)
        decision = runstate.decide_close(run)
        if decision == "closed":
            return run, []
        fold = self.folds.held(tx, run) if decision == "end_and_close" else None
        change = runstate.close(run, fold, now)
        return change.run, self._persist(tx, run, change, now)

    async def delete_ended_runs(self, ended_before: float, now: float, limit: int = 200) -> list[str]:
        return await self._write(retention.delete_ended_runs, ended_before, now, limit)

    # -- reads -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord:
        return await self._read(reads.run, self.dialect, run_id, lock=False)

    async def list_runs(
        self, *, parent_run_id: str | None, status: RunStatus | None, agent: str | None,
        limit: int, before_pk: int | None, stop_reason: StopReason | None = None,
    ) -> list[RunRecord]:
        return await self._read(
            reads.list_runs, parent_run_id=parent_run_id, status=status, agent=agent, limit=limit,
            before_pk=before_pk, stop_reason=stop_reason,
        )

    async def current_turns(self, run_ids: Sequence[str]) -> dict[str, TurnRecord]:
        return await self._read(reads.current_turns, list(run_ids)) if run_ids else {}

    async def turn_result(self, run_id: str, turn: int | None) -> tuple[RunRecord, TurnRecord]:
        return await self._read(self._turn_result, run_id, turn)

    async def snapshot(self, run_id: str) -> tuple[RunRecord, TurnRecord]:
        return await self._read(self._turn_result, run_id, None)

    def _turn_result(self, tx: Tx, run_id: str, turn: int | None) -> tuple[RunRecord, TurnRecord]:
        run = reads.run(tx, self.dialect, run_id, lock=False)
        record = reads.turn(tx, run_id, run.turn if turn is None else turn)
        if record.ended or record.turn != run.turn:
            return run, record
        slot = self.folds.slot(run_id, run.turn)
        with slot.lock:
            fold = caught_up(tx, slot, run)
            ahead = fold.last_seq > run.last_seq
            output, usage = fold.collect(), fold.usage
        if ahead:
            # A writer committed after this read took its view of the run: the shared fold
            # holds events past ``run.last_seq``. The answer must reflect exactly the events up
            # to it (a stream's snapshot is followed by the events after its id), so it is
            # folded afresh from the log, up to that id.
            fold = caught_up(tx, FoldSlot(), run)
            output, usage = fold.collect(), fold.usage
        return run, replace(record, output=output, usage=usage)

    async def events_after(
        self, run_id: str, after: int, limit: int, types: frozenset[str] | None = None
    ) -> list[StoredEvent]:
        return await self._read(reads.events_after, self.dialect, run_id, after, limit, types)

    async def inherited_events(self, run_id: str) -> list[StoredEvent]:
        return await self._read(forks.inherited_events, run_id)

    async def feed_after(self, after: int, parent_run_id: str | None, limit: int) -> list[StoredEvent]:
        return await self._read(reads.feed_after, after, parent_run_id, limit)

    async def last_feed_id(self) -> int:
        return await self._read(reads.last_feed_id)

    async def highest_feed_id_issued(self) -> int:
        return await self._read(self._highest_feed_id_issued)

    def _highest_feed_id_issued(self, tx: Tx) -> int:
        # The id generator remembers ids whose rows retention has deleted; MAX(id) does not.
        return max(reads.last_feed_id(tx), self.dialect.feed_ids_issued(tx))

    async def expired_runs(self, now: float) -> list[str]:
        return await self._read(reads.expired_runs, now)

    async def count_runs(self) -> dict[str, int]:
        return await self._read(reads.count_runs)

    # -- the webhook outbox (lastword.store.sql.outbox) -----------------------------------------

    async def claim_deliveries(self, now: float, lease_seconds: float, limit: int) -> list[DeliveryJob]:
        return await self._write(outbox.claim, self.dialect.claim_clause, now, lease_seconds, limit)

    async def record_attempt(
        self, job: DeliveryJob, attempts: list[dict[str, Any]], state: str, status: int | None,
        next_attempt_at: float | None,
    ) -> bool:
        return await self._write(outbox.record_attempt, job, attempts, state, status, next_attempt_at)

    async def release_deliveries(self, jobs: list[DeliveryJob]) -> int:
        return await self._write(outbox.release, jobs)

    async def deliveries(self, run_id: str) -> list[Delivery]:
        return await self._read(self._deliveries, run_id)

    def _deliveries(self, tx: Tx, run_id: str) -> list[Delivery]:
        reads.run(tx, self.dialect, run_id, lock=False)  # 404 or 410 for a run that is not here
        return outbox.of_run(tx, run_id)

    async def outbox_stats(self) -> tuple[int, float | None]:
        return await self._read(outbox.pending_stats)

    async def next_delivery_due(self) -> float | None:
        return await self._read(outbox.next_due)

    # -- Durable Streams (lastword.store.sql.ds) ---------------------------------------------

    async def ds_create(self, request: CreateRequest, now: float) -> Outcome:
        return await self._write(self._ds_create, request, now)

    def _ds_create(self, tx: Tx, request: CreateRequest, now: float) -> Outcome:
        outcome = ds.create(tx, request, now, self.dialect.lock_clause)
        self.dialect.after_stream_notice(tx, request.path)
        return outcome

    async def ds_append(self, request: AppendRequest, now: float) -> Outcome:
        return await self._write(self._ds_append, request, now)

    def _ds_append(self, tx: Tx, request: AppendRequest, now: float) -> Outcome:
        outcome = ds.append(tx, request, now, self.dialect.lock_clause)
        self.dialect.after_stream_notice(tx, request.path)
        return outcome

    async def ds_read(self, path: str, position: int | str, now: float, max_bytes: int) -> Slice:
        return await self._read(ds.read, path, position, now, max_bytes)

    async def ds_touch(self, path: str, now: float) -> None:
        await self._write(ds.touch, path, now)

    async def ds_delete(self, path: str, now: float) -> None:
        await self._write(self._ds_delete, path, now)

    def _ds_delete(self, tx: Tx, path: str, now: float) -> None:
        ds.delete(tx, path, now, self.dialect.lock_clause)
        self.dialect.after_stream_notice(tx, path)
