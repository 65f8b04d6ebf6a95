"""The storage logic, written once over DB-API connections, shared by SQLite and PostgreSQL.

Every operation is a plain function over a :class:`Tx` that a backend runs in a worker thread
inside one transaction. Why threads and synchronous drivers: the logic that assigns ``seq``,
dedupes ``eventId`` and ends turns must hold the run's row lock and the turn's fold together,
and writing it once for both backends matters more than an async driver would (psycopg offers
the same synchronous API as ``sqlite3``; the event loop only waits on a future).

The folds of open turns live here, one per turn, each guarded by a lock. A writer holds the
fold's lock from the moment it catches the fold up with the log until its transaction commits,
and drops the fold if the transaction fails, so a fold never holds an event the log does not.
A fold is caught up from the log whenever the log has moved past it (another replica wrote, or
the process restarted), which is how any replica serves any run.
"""

from __future__ import annotations

import abc
import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from lastword import lifecycle
from lastword.errors import Conflict, Gone, NotFound, RunEnded
from lastword.fold import TurnFold
from lastword.stop_reasons import normalise_stop_reason
from lastword.store.base import (
    AppendOutcome,
    EndOutcome,
    RunRecord,
    RunSpec,
    Store,
    StoredEvent,
    TurnRecord,
)

T = TypeVar("T")

RUN_COLUMNS = (
    "pk, run_id, parent_run_id, agent, mode, metadata, lease_seconds, spec, status, turn, "
    "last_seq, lease_expires_at, created_at, updated_at"
)
TURN_COLUMNS = "run_id, turn, start_seq, started_at, ended_at, stop_reason, error, output, usage"
EVENT_COLUMNS = "run_id, seq, turn, type, event_id, body, received_at"
FOLD_EVENT_TYPES = ("assistant/chunk", "assistant/message", "turn/end")
#: Events the service hands to its live subscribers after a commit.
LIVE_TYPES = frozenset({"assistant/chunk"}) | lifecycle.LIFECYCLE_TYPES


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | bytes | None) -> Any:
    return None if text is None else orjson.loads(text)


def run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        pk=row[0],
        run_id=row[1],
        parent_run_id=row[2],
        agent=row[3],
        mode=row[4],
        metadata=loads(row[5]),
        lease_seconds=row[6],
        canonical=row[7],
        status=row[8],
        turn=row[9],
        last_seq=row[10],
        lease_expires_at=row[11],
        created_at=row[12],
        updated_at=row[13],
    )


def turn_from_row(row: Sequence[Any]) -> TurnRecord:
    return TurnRecord(
        run_id=row[0],
        turn=row[1],
        start_seq=row[2],
        started_at=row[3],
        ended_at=row[4],
        stop_reason=row[5],
        error=loads(row[6]),
        output=loads(row[7]) or [],
        usage=loads(row[8]) or {},
    )


def event_from_row(row: Sequence[Any], feed_id: int | None = None) -> StoredEvent:
    return StoredEvent(
        run_id=row[0],
        seq=row[1],
        turn=row[2],
        type=row[3],
        event_id=row[4],
        body=loads(row[5]),
        received_at=row[6],
        feed_id=feed_id,
    )


@dataclass(slots=True)
class FoldSlot:
    """The fold of one open turn and the lock that serialises its readers and writers."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    fold: TurnFold | None = None


class Tx:
    """One transaction on a DB-API cursor, with the backend's placeholder style.

    Statements are written with ``?`` placeholders; ``convert`` rewrites them for the driver.
    Slots held by the transaction are released after it commits or rolls back; a rollback
    also drops their folds, since they may hold events the log never got.
    """

    def __init__(self, cursor: Any, convert: Callable[[str], str]) -> None:
        self.cursor = cursor
        self._convert = convert
        self._held: list[FoldSlot] = []

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self.cursor.execute(self._convert(sql), params)
        return list(self.cursor.fetchall())

    def rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[Any]:
        """The rows one at a time, for results too long to hold as one list."""
        self.cursor.execute(self._convert(sql), params)
        return iter(self.cursor)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.cursor.execute(self._convert(sql), params)
        return self.cursor.fetchone()

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.cursor.execute(self._convert(sql), params)

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.cursor.executemany(self._convert(sql), rows)

    def hold(self, slot: FoldSlot) -> None:
        slot.lock.acquire()
        self._held.append(slot)

    def finish(self, committed: bool) -> None:
        for slot in self._held:
            if not committed:
                slot.fold = None
            slot.lock.release()
        self._held.clear()


class SqlStore(Store):
    """The store's logic over SQL; subclasses bring connections, schema and transactions."""

    def __init__(self, *, default_lease_seconds: float, fold_cache_size: int = 50_000) -> None:
        self.default_lease_seconds = default_lease_seconds
        self._folds: OrderedDict[tuple[str, int], FoldSlot] = OrderedDict()
        self._folds_lock = threading.Lock()
        self._fold_cache_size = fold_cache_size

    # -- what a backend provides ---------------------------------------------------------

    @abc.abstractmethod
    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(tx, *args)`` in a write transaction, committed before this returns."""

    @abc.abstractmethod
    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(tx, *args)`` in a read-only transaction."""

    def _match_ids(self, count: int) -> str:
        """SQL that matches ``event_id`` against ``count`` parameters."""
        return "event_id IN (" + ",".join("?" * count) + ")"

    def _id_params(self, ids: list[str]) -> list[Any]:
        return ids

    #: The events table as the eventId lookup names it (SQLite forces its index there).
    events_by_id = "events"

    def _lock_clause(self) -> str:
        return ""

    def _insert_events(self, tx: Tx, rows: list[tuple[Any, ...]]) -> None:
        """Hook: store a batch of event rows (``EVENT_COLUMNS`` order; PostgreSQL uses COPY)."""
        tx.many(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def _before_feed_insert(self, tx: Tx) -> None:
        """Hook: serialise firehose writers where the database would not (PostgreSQL)."""

    def _after_commit_notice(
        self, tx: Tx, run_id: str, first_seq: int, last_seq: int, feed_id: int | None
    ) -> None:
        """Hook: say, inside the transaction, that ``first_seq..last_seq`` of the run commit with it.

        PostgreSQL sends a NOTIFY that is delivered to every replica when (and only if) the
        transaction commits; ``feed_id`` is set when the range ends with a lifecycle event.
        """

    # -- folds ---------------------------------------------------------------------------

    def _slot(self, run_id: str, turn: int) -> FoldSlot:
        key = (run_id, turn)
        with self._folds_lock:
            slot = self._folds.get(key)
            if slot is None:
                slot = self._folds[key] = FoldSlot()
                if len(self._folds) > self._fold_cache_size:
                    # The oldest open folds are rebuilt from the log if they are asked for again.
                    self._folds.popitem(last=False)
            else:
                self._folds.move_to_end(key)
            return slot

    def _forget_fold(self, run_id: str, turn: int) -> None:
        with self._folds_lock:
            self._folds.pop((run_id, turn), None)

    def _caught_up(self, tx: Tx, slot: FoldSlot, run: RunRecord, upto: int) -> TurnFold:
        """The turn's fold with every event of the log up to ``upto`` pushed (slot lock held)."""
        fold = slot.fold
        if fold is None:
            row = tx.one("SELECT start_seq FROM turns WHERE run_id = ? AND turn = ?", (run.run_id, run.turn))
            fold = slot.fold = TurnFold(last_seq=row[0])
        if fold.last_seq < upto:
            rows = tx.rows(
                "SELECT seq, body FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
                "AND turn = ? AND type IN (?, ?, ?) ORDER BY seq",
                (run.run_id, fold.last_seq, upto, run.turn, *FOLD_EVENT_TYPES),
            )
            for seq, body in rows:
                fold.push(loads(body), seq)
            fold.last_seq = upto
        return fold

    # -- shared pieces of transactions ---------------------------------------------------

    def _run(self, tx: Tx, run_id: str, *, lock: bool) -> RunRecord:
        row = tx.one(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?" + (self._lock_clause() if lock else ""),
            (run_id,),
        )
        if row is None:
            self._refuse_deleted(tx, run_id)
            raise NotFound(f"no run with id {run_id!r}", code="run_not_found", runId=run_id)
        return run_from_row(row)

    def _refuse_deleted(self, tx: Tx, run_id: str) -> None:
        """410 for a run that retention deleted: a reader learns it is gone for good."""
        row = tx.one("SELECT deleted_at FROM deleted_runs WHERE run_id = ?", (run_id,))
        if row is not None:
            raise Gone(
                f"run {run_id!r} ended and was deleted by retention at {lifecycle.rfc3339(row[0])}",
                runId=run_id, deletedAt=lifecycle.rfc3339(row[0]),
            )

    def _turn(self, tx: Tx, run_id: str, turn: int) -> TurnRecord:
        row = tx.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE run_id = ? AND turn = ?", (run_id, turn))
        if row is None:
            raise NotFound(f"run {run_id!r} has no turn {turn}", code="turn_not_found", runId=run_id, turn=turn)
        return turn_from_row(row)

    def _lease_expiry(self, run: RunRecord | RunSpec, now: float) -> float | None:
        lease = run.lease_seconds if run.lease_seconds is not None else self.default_lease_seconds
        return now + lease if lease and lease > 0 else None

    def _insert_lifecycle(
        self, tx: Tx, run: RunRecord, seq: int, turn: int, body: dict[str, Any], now: float
    ) -> StoredEvent:
        tx.run(
            f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run.run_id, seq, turn, body["type"], None, dumps(body), now),
        )
        self._before_feed_insert(tx)
        row = tx.one(
            "INSERT INTO feed (run_id, parent_run_id, seq) VALUES (?, ?, ?) RETURNING id",
            (run.run_id, run.parent_run_id, seq),
        )
        return StoredEvent(
            run.run_id, seq, turn, body["type"], body, now,
            parent_run_id=run.parent_run_id, feed_id=row[0],
        )

    def _start_turn(self, tx: Tx, run: RunRecord, turn: int, seq: int, now: float) -> StoredEvent:
        tx.run(
            f"INSERT INTO turns ({TURN_COLUMNS}) VALUES (?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL)",
            (run.run_id, turn, seq, now),
        )
        body = lifecycle.start_event(run.run_id, run.parent_run_id, run.agent, turn, now)
        return self._insert_lifecycle(tx, run, seq, turn, body, now)

    def _finish_turn(
        self, tx: Tx, run: RunRecord, fold: TurnFold, stop_reason: str, error: Any, seq: int, now: float
    ) -> tuple[TurnRecord, StoredEvent]:
        """Record the turn's end with the output the fold selects, and log ``subagent/end``."""
        output = fold.collect()
        usage = fold.usage
        body = lifecycle.end_event(
            run.run_id, run.parent_run_id, run.agent, run.turn, stop_reason, output, usage, error, now
        )
        stored = self._insert_lifecycle(tx, run, seq, run.turn, body, now)
        tx.run(
            "UPDATE turns SET ended_at = ?, stop_reason = ?, error = ?, output = ?, usage = ? "
            "WHERE run_id = ? AND turn = ?",
            (now, stop_reason, None if error is None else dumps(error), dumps(output), dumps(usage),
             run.run_id, run.turn),
        )
        return self._turn(tx, run.run_id, run.turn), stored

    def _update_run(
        self, tx: Tx, run_id: str, *, last_seq: int, status: str, turn: int, lease: float | None, now: float
    ) -> None:
        tx.run(
            "UPDATE runs SET last_seq = ?, status = ?, turn = ?, lease_expires_at = ?, updated_at = ? "
            "WHERE run_id = ?",
            (last_seq, status, turn, lease, now, run_id),
        )

    def _ended_problem(self, tx: Tx, run: RunRecord, index: int | None) -> RunEnded:
        turn = self._turn(tx, run.run_id, run.turn)
        extra: dict[str, Any] = {"runId": run.run_id, "turn": run.turn, "stopReason": turn.stop_reason}
        if index is not None:
            extra["index"] = index
        return RunEnded(
            f"turn {run.turn} of run {run.run_id!r} has ended ({turn.stop_reason}); "
            "no more events are accepted for it",
            **extra,
        )

    # -- operations ----------------------------------------------------------------------

    async def create_run(self, spec: RunSpec, now: float) -> tuple[RunRecord, bool, list[StoredEvent]]:
        return await self._write(self._create_run, spec, now)

    def _create_run(self, tx: Tx, spec: RunSpec, now: float) -> tuple[RunRecord, bool, list[StoredEvent]]:
        lease = spec.lease_seconds if spec.lease_seconds is not None else self.default_lease_seconds
        row = tx.one(
            f"INSERT INTO runs ({RUN_COLUMNS.replace('pk, ', '')}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', 1, 1, ?, ?, ?) "
            "ON CONFLICT (run_id) DO NOTHING RETURNING pk",
            (spec.run_id, spec.parent_run_id, spec.agent, spec.mode, dumps(spec.metadata), lease,
             spec.canonical, self._lease_expiry(spec, now), now, now),
        )
        if row is None:
            existing = self._run(tx, spec.run_id, lock=False)
            if existing.canonical != spec.canonical:
                raise Conflict(
                    f"run {spec.run_id!r} exists with a different body",
                    code="run_exists", runId=spec.run_id,
                )
            return existing, False, []
        # A deleted run's id is not given out again: its old readers would mistake the new run.
        self._refuse_deleted(tx, spec.run_id)
        run = self._run(tx, spec.run_id, lock=False)
        start = self._start_turn(tx, run, 1, 1, now)
        self._after_commit_notice(tx, run.run_id, 1, 1, start.feed_id)
        return run, True, [start]

    async def get_run(self, run_id: str) -> RunRecord:
        return await self._read(lambda tx: self._run(tx, run_id, lock=False))

    async def list_runs(
        self, *, parent_run_id: str | None, status: str | None, agent: str | None,
        limit: int, before_pk: int | None,
    ) -> list[RunRecord]:
        return await self._read(self._list_runs, parent_run_id, status, agent, limit, before_pk)

    def _list_runs(
        self, tx: Tx, parent_run_id: str | None, status: str | None, agent: str | None,
        limit: int, before_pk: int | None,
    ) -> list[RunRecord]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("parent_run_id", parent_run_id), ("status", status), ("agent", agent)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if before_pk is not None:
            where.append("pk < ?")
            params.append(before_pk)
        sql = f"SELECT {RUN_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = tx.all(sql + " ORDER BY pk DESC LIMIT ?", (*params, limit))
        return [run_from_row(row) for row in rows]

    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        return await self._write(self._append, run_id, events, now, encoded)

    def _append(
        self, tx: Tx, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None
    ) -> AppendOutcome:
        run = self._run(tx, run_id, lock=True)
        fresh, duplicates = self._without_duplicates(tx, run_id, events)
        if not fresh:
            # A retry of events that were all stored answers the same, even after the end.
            return AppendOutcome(0, duplicates, run.last_seq)
        if run.status != "running":
            raise self._ended_problem(tx, run, fresh[0][0])

        slot = self._slot(run_id, run.turn)
        tx.hold(slot)
        fold = self._caught_up(tx, slot, run, run.last_seq)
        seq = run.last_seq
        rows = []
        live: list[StoredEvent] = []
        end: tuple[str, Any] | None = None
        for index, event in fresh:
            if end is not None:
                raise RunEnded(
                    f"event {index} follows the turn/end of the same request",
                    index=index, runId=run_id, turn=run.turn, stopReason=end[0],
                )
            seq += 1
            kind = event["type"]
            body = encoded[index] if encoded is not None else dumps(event)
            rows.append((run_id, seq, run.turn, kind, event.get("eventId"), body, now))
            fold.push(event, seq)
            if kind == "assistant/chunk":
                live.append(StoredEvent(run_id, seq, run.turn, kind, event, now, event.get("eventId")))
            elif kind == "turn/end":
                end = (normalise_stop_reason(event["stopReason"]), event.get("error"))
        self._insert_events(tx, rows)

        outcome = AppendOutcome(len(rows), duplicates, seq, live)
        if end is None:
            self._update_run(tx, run_id, last_seq=seq, status="running", turn=run.turn,
                             lease=self._lease_expiry(run, now), now=now)
            self._after_commit_notice(tx, run_id, run.last_seq + 1, seq, None)
            return outcome
        seq += 1
        turn, stored = self._finish_turn(tx, run, fold, end[0], end[1], seq, now)
        self._update_run(tx, run_id, last_seq=seq, status=self._status_after_turn(run),
                         turn=run.turn, lease=None, now=now)
        self._after_commit_notice(tx, run_id, run.last_seq + 1, seq, stored.feed_id)
        self._forget_fold(run_id, run.turn)
        outcome.last_seq = seq
        outcome.stored.append(stored)
        outcome.ended = turn
        return outcome

    def _without_duplicates(
        self, tx: Tx, run_id: str, events: Sequence[dict[str, Any]]
    ) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        """The events not yet stored (with their request index) and the count of repeats.

        A repeated ``eventId`` with the same content is a retry and is stored once; with
        other content it is a producer bug, refused with 409.
        """
        ids = [event["eventId"] for event in events if event.get("eventId") is not None]
        known: dict[str, Any] = {}
        if ids:
            unique = list(dict.fromkeys(ids))
            rows = tx.all(
                f"SELECT event_id, body FROM {self.events_by_id} WHERE run_id = ? AND {self._match_ids(len(unique))}",
                (run_id, *self._id_params(unique)),
            )
            known = {event_id: loads(body) for event_id, body in rows}
        fresh: list[tuple[int, dict[str, Any]]] = []
        duplicates = 0
        for index, event in enumerate(events):
            event_id = event.get("eventId")
            if event_id is not None:
                if event_id in known:
                    if known[event_id] != event:
                        raise Conflict(
                            f"event {index}: eventId {event_id!r} was already used for other content",
                            code="event_id_conflict", index=index, eventId=event_id,
                        )
                    duplicates += 1
                    continue
                known[event_id] = event
            fresh.append((index, event))
        return fresh, duplicates

    @staticmethod
    def _status_after_turn(run: RunRecord) -> str:
        return "idle" if run.mode == "continuable" else "ended"

    async def end_turn(
        self, run_id: str, stop_reason: str, error: Any, now: float, *, only_if_expired: bool = False
    ) -> EndOutcome | None:
        return await self._write(self._end_turn, run_id, stop_reason, error, now, only_if_expired)

    def _end_turn(
        self, tx: Tx, run_id: str, stop_reason: str, error: Any, now: float, only_if_expired: bool
    ) -> EndOutcome | None:
        run = self._run(tx, run_id, lock=True)
        if run.status == "running":
            if only_if_expired and (run.lease_expires_at is None or run.lease_expires_at > now):
                return None
            return self._end_open_turn(tx, run, stop_reason, error, now, status=self._status_after_turn(run))
        if only_if_expired:
            return None
        last = self._turn(tx, run_id, run.turn)
        if last.stop_reason == stop_reason:
            return EndOutcome(run, last, changed=False)
        raise Conflict(
            f"turn {run.turn} of run {run_id!r} already ended with {last.stop_reason}",
            code="turn_already_ended", runId=run_id, turn=run.turn, stopReason=last.stop_reason,
        )

    def _end_open_turn(
        self, tx: Tx, run: RunRecord, stop_reason: str, error: Any, now: float, *, status: str
    ) -> EndOutcome:
        slot = self._slot(run.run_id, run.turn)
        tx.hold(slot)
        fold = self._caught_up(tx, slot, run, run.last_seq)
        seq = run.last_seq + 1
        turn, stored = self._finish_turn(tx, run, fold, stop_reason, error, seq, now)
        self._update_run(tx, run.run_id, last_seq=seq, status=status, turn=run.turn, lease=None, now=now)
        self._after_commit_notice(tx, run.run_id, seq, seq, stored.feed_id)
        self._forget_fold(run.run_id, run.turn)
        return EndOutcome(self._run(tx, run.run_id, lock=False), turn, True, [stored])

    async def start_turn(self, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        return await self._write(self._start_next_turn, run_id, now)

    def _start_next_turn(self, tx: Tx, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        run = self._run(tx, run_id, lock=True)
        if run.mode != "continuable":
            raise Conflict(f"run {run_id!r} is oneshot: it has exactly one turn", code="not_continuable")
        if run.status != "idle":
            raise Conflict(
                f"run {run_id!r} is {run.status}: a new turn starts only when the run is idle",
                code=f"run_{run.status}", runStatus=run.status,
            )
        seq = run.last_seq + 1
        stored = self._start_turn(tx, run, run.turn + 1, seq, now)
        self._update_run(tx, run_id, last_seq=seq, status="running", turn=run.turn + 1,
                         lease=self._lease_expiry(run, now), now=now)
        self._after_commit_notice(tx, run_id, seq, seq, stored.feed_id)
        return self._run(tx, run_id, lock=False), [stored]

    async def close_run(self, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        return await self._write(self._close_run, run_id, now)

    def _close_run(self, tx: Tx, run_id: str, now: float) -> tuple[RunRecord, list[StoredEvent]]:
        run = self._run(tx, run_id, lock=True)
        if run.mode != "continuable":
            raise Conflict(f"run {run_id!r} is oneshot; it ends with its turn", code="not_continuable")
        if run.status == "ended":
            return run, []
        stored: list[StoredEvent] = []
        if run.status == "running":
            ended = self._end_open_turn(
                tx, run, "cancelled", {"message": "the run was closed"}, now, status="running"
            )
            stored.extend(ended.stored)
            run = ended.run
        seq = run.last_seq + 1
        body = lifecycle.closed_event(run.run_id, run.parent_run_id, run.agent, now)
        closed = self._insert_lifecycle(tx, run, seq, run.turn, body, now)
        stored.append(closed)
        self._update_run(tx, run_id, last_seq=seq, status="ended", turn=run.turn, lease=None, now=now)
        self._after_commit_notice(tx, run_id, seq, seq, closed.feed_id)
        return self._run(tx, run_id, lock=False), stored

    async def turn_result(self, run_id: str, turn: int | None) -> tuple[RunRecord, TurnRecord]:
        return await self._read(self._turn_result, run_id, turn)

    async def snapshot(self, run_id: str) -> tuple[RunRecord, TurnRecord]:
        return await self._read(self._turn_result, run_id, None)

    def _turn_result(self, tx: Tx, run_id: str, turn: int | None) -> tuple[RunRecord, TurnRecord]:
        run = self._run(tx, run_id, lock=False)
        record = self._turn(tx, run_id, run.turn if turn is None else turn)
        if record.ended or record.turn != run.turn:
            return run, record
        slot = self._slot(run_id, run.turn)
        with slot.lock:
            fold = self._caught_up(tx, slot, run, run.last_seq)
            ahead = fold.last_seq > run.last_seq
            output, usage = fold.collect(), fold.usage
        if ahead:
            # A writer committed after this read took its view of the run: the shared fold
            # now holds events past ``run.last_seq``. The answer must reflect exactly the
            # events up to it (a stream's snapshot is followed by the events after its id), so
            # it is folded afresh from the log, up to that id.
            fold = self._caught_up(tx, FoldSlot(), run, run.last_seq)
            output, usage = fold.collect(), fold.usage
        return run, TurnRecord(
            run_id, record.turn, record.start_seq, record.started_at, None, None, None, output, usage
        )

    async def events_after(
        self, run_id: str, after: int, limit: int, types: frozenset[str] | None = None
    ) -> list[StoredEvent]:
        return await self._read(self._events_after, run_id, after, limit, types)

    def _events_after(
        self, tx: Tx, run_id: str, after: int, limit: int, types: frozenset[str] | None
    ) -> list[StoredEvent]:
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ?"
        params: list[Any] = [run_id, after]
        if types is not None:
            ordered = sorted(types)
            sql += " AND type IN (" + ",".join("?" * len(ordered)) + ")"
            params.extend(ordered)
        rows = tx.all(sql + " ORDER BY seq LIMIT ?", (*params, limit))
        if not rows:
            self._run(tx, run_id, lock=False)  # 404 for an unknown run, [] for a quiet one
        return [event_from_row(row) for row in rows]

    async def feed_after(self, after: int, parent_run_id: str | None, limit: int) -> list[StoredEvent]:
        return await self._read(self._feed_after, after, parent_run_id, limit)

    def _feed_after(self, tx: Tx, after: int, parent_run_id: str | None, limit: int) -> list[StoredEvent]:
        sql = (
            "SELECT f.id, f.parent_run_id, e.run_id, e.seq, e.turn, e.type, e.event_id, e.body, "
            "e.received_at FROM feed f JOIN events e ON e.run_id = f.run_id AND e.seq = f.seq "
            "WHERE f.id > ?"
        )
        params: list[Any] = [after]
        if parent_run_id is not None:
            sql += " AND f.parent_run_id = ?"
            params.append(parent_run_id)
        rows = tx.all(sql + " ORDER BY f.id LIMIT ?", (*params, limit))
        found = []
        for row in rows:
            event = event_from_row(row[2:], feed_id=row[0])
            event.parent_run_id = row[1]
            found.append(event)
        return found

    async def last_feed_id(self) -> int:
        return await self._read(self._last_feed_id)

    def _last_feed_id(self, tx: Tx) -> int:
        row = tx.one("SELECT MAX(id) FROM feed")
        return row[0] or 0

    async def highest_feed_id_issued(self) -> int:
        return await self._read(self._highest_feed_id_issued)

    def _highest_feed_id_issued(self, tx: Tx) -> int:
        # The id generator remembers ids whose rows retention has deleted; MAX(id) does not.
        return max(self._last_feed_id(tx), self._feed_ids_issued(tx))

    @abc.abstractmethod
    def _feed_ids_issued(self, tx: Tx) -> int:
        """Hook: the last value the feed's id generator handed out (0 if none)."""

    async def expired_runs(self, now: float) -> list[str]:
        return await self._read(self._expired_runs, now)

    def _expired_runs(self, tx: Tx, now: float) -> list[str]:
        rows = tx.all(
            "SELECT run_id FROM runs WHERE status = 'running' AND lease_expires_at IS NOT NULL "
            "AND lease_expires_at <= ? ORDER BY lease_expires_at LIMIT 500",
            (now,),
        )
        return [row[0] for row in rows]

    async def delete_ended_runs(self, ended_before: float, now: float, limit: int = 200) -> list[str]:
        """Delete up to ``limit`` runs that ended before ``ended_before``, with all they hold.

        Each leaves a tombstone, so readers asking for it later get 410 rather than 404.
        Only ended runs go: no writer or live stream can still be using them.
        """
        return await self._write(self._delete_ended_runs, ended_before, now, limit)

    def _delete_ended_runs(self, tx: Tx, ended_before: float, now: float, limit: int) -> list[str]:
        rows = tx.all(
            "SELECT run_id FROM runs WHERE status = 'ended' AND updated_at < ? ORDER BY updated_at LIMIT ?",
            (ended_before, limit),
        )
        run_ids = [(row[0],) for row in rows]
        if run_ids:
            for table in ("events", "turns", "feed", "runs"):
                tx.many(f"DELETE FROM {table} WHERE run_id = ?", run_ids)
            tx.many(
                "INSERT INTO deleted_runs (run_id, deleted_at) VALUES (?, ?) ON CONFLICT (run_id) DO NOTHING",
                [(run_id, now) for (run_id,) in run_ids],
            )
        return [run_id for (run_id,) in run_ids]

    async def count_runs(self) -> dict[str, int]:
        return await self._read(self._count_runs)

    def _count_runs(self, tx: Tx) -> dict[str, int]:
        return {status: count for status, count in tx.all("SELECT status, COUNT(*) FROM runs GROUP BY status")}


async def run_in(executor: Any, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on ``executor`` and wait for it without blocking the event loop."""
    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)



def upgrade_schema(tx: Tx, migrations: Sequence[str]) -> int:
    """Bring the schema up to version ``len(migrations)``; the version it was found at.

    ``migrations[i]`` holds the statements (``;``-separated) that take version ``i`` to
    ``i + 1``. The caller holds the lock that serialises start-ups (SQLite: ``BEGIN
    IMMEDIATE``; PostgreSQL: an advisory lock), so replicas starting together apply each step
    once, one after the other, and the later ones find nothing to do. A database written by a
    newer release is refused rather than run with a schema this code does not know.
    """
    tx.run("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = tx.one("SELECT value FROM meta WHERE key = 'schema_version'")
    found = int(row[0]) if row is not None else 0
    if found > len(migrations):
        raise RuntimeError(
            f"the database has schema version {found}, newer than this release's {len(migrations)}"
        )
    for step in migrations[found:]:
        for statement in step.split(";"):
            if statement.strip():
                tx.run(statement)
    if found < len(migrations):
        tx.run(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(len(migrations)),),
        )
    return found
