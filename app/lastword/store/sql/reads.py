"""The queries that read runs, turns and logs (inside a transaction the backend runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lastword.errors import RunDeleted, RunNotFound, TurnNotFound
from lastword.rules import lifecycle
from lastword.rules.records import RunRecord, RunStatus, StoredEvent, TurnRecord
from lastword.rules.stop_reasons import StopReason
from lastword.store.sql.dialect import Dialect
from lastword.store.sql.retention import deleted_at
from lastword.store.sql.rows import (
    EVENT_COLUMNS,
    RUN_COLUMNS,
    TURN_COLUMNS,
    event_from_row,
    loads,
    run_from_row,
    turn_from_row,
)
from lastword.store.sql.tx import Tx

#: Most runs one sweep ends; the next sweep takes the rest.
EXPIRED_BATCH = 500


def run(tx: Tx, dialect: Dialect, run_id: str, *, lock: bool) -> RunRecord:
    """The run; ``lock`` holds its row until the transaction ends (every change does)."""
    if lock:
        known = tx.known_run(run_id)
        if known is not None:
            return known
    row = tx.locked_run(run_id) if lock else None
    if row is None:
        row = tx.one(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?" + (dialect.lock_clause if lock else ""), (run_id,)
        )
    if row is None:
        refuse_deleted(tx, run_id)
        raise RunNotFound(f"no run with id {run_id!r}", runId=run_id)
    return run_from_row(row)


def refuse_deleted(tx: Tx, run_id: str) -> None:
    """Raise :class:`RunDeleted` for a run retention deleted: a reader learns it is gone for good."""
    when = deleted_at(tx, run_id)
    if when is not None:
        raise RunDeleted(
            f"run {run_id!r} ended and was deleted by retention at {lifecycle.rfc3339(when)}",
            runId=run_id, deletedAt=lifecycle.rfc3339(when),
        )


def turn(tx: Tx, run_id: str, number: int) -> TurnRecord:
    row = tx.one(f"SELECT {TURN_COLUMNS} FROM turns WHERE run_id = ? AND turn = ?", (run_id, number))
    if row is None:
        raise TurnNotFound(f"run {run_id!r} has no turn {number}", runId=run_id, turn=number)
    return turn_from_row(row)


def event_ids(events: Sequence[dict[str, Any]]) -> list[str]:
    """The ``eventId``s these events carry, each once, in order."""
    carried = [event.get("eventId") for event in events]
    if carried.count(None) == len(carried):  # most appends carry none: no second pass
        return []
    return list(dict.fromkeys(event_id for event_id in carried if event_id is not None))


def stored_event_ids(tx: Tx, dialect: Dialect, run_id: str, ids: list[str]) -> dict[str, Any]:
    """The bodies already in the run's log under ``ids`` (:func:`event_ids`)."""
    if not ids:
        return {}
    rows = tx.stored_ids(run_id, ids)
    if rows is None:
        rows = tx.all(
            f"SELECT event_id, body FROM {dialect.events_by_id} WHERE run_id = ? AND {dialect.match_ids(len(ids))}",
            (run_id, *dialect.id_params(ids)),
        )
    return {event_id: loads(body) for event_id, body in rows}


def list_runs(
    tx: Tx, *, parent_run_id: str | None, status: RunStatus | None, agent: str | None, limit: int,
    before_pk: int | None, stop_reason: StopReason | None = None,
) -> list[RunRecord]:
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("parent_run_id", parent_run_id), ("status", status), ("agent", agent)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if stop_reason is not None:
        # The stop reason of the run's latest turn; an open turn has none.
        where.append("EXISTS (SELECT 1 FROM turns t WHERE t.run_id = runs.run_id "
                     "AND t.turn = runs.turn AND t.stop_reason = ?)")
        params.append(stop_reason)
    if before_pk is not None:
        where.append("pk < ?")
        params.append(before_pk)
    sql = f"SELECT {RUN_COLUMNS} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = tx.all(sql + " ORDER BY pk DESC LIMIT ?", (*params, limit))
    return [run_from_row(row) for row in rows]


def current_turns(tx: Tx, run_ids: list[str]) -> dict[str, TurnRecord]:
    """Each run's latest turn as stored, by run id, in one query for a page of runs."""
    columns = ", ".join("t." + column.strip() for column in TURN_COLUMNS.split(","))
    rows = tx.all(
        f"SELECT {columns} FROM turns t JOIN runs r ON r.run_id = t.run_id AND r.turn = t.turn "
        f"WHERE t.run_id IN ({','.join('?' * len(run_ids))})",
        run_ids,
    )
    return {row[0]: turn_from_row(row) for row in rows}


def events_after(
    tx: Tx, dialect: Dialect, run_id: str, after: int, limit: int, types: frozenset[str] | None
) -> list[StoredEvent]:
    sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ?"
    params: list[Any] = [run_id, after]
    if types is not None:
        ordered = sorted(types)
        sql += " AND type IN (" + ",".join("?" * len(ordered)) + ")"
        params.extend(ordered)
    rows = tx.all(sql + " ORDER BY seq LIMIT ?", (*params, limit))
    if not rows:
        run(tx, dialect, run_id, lock=False)  # 404 for an unknown run, [] for a quiet one
    return [event_from_row(row) for row in rows]


def feed_after(tx: Tx, after: int, parent_run_id: str | None, limit: int) -> list[StoredEvent]:
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
    return [event_from_row(row[2:], feed_id=row[0], parent_run_id=row[1]) for row in rows]


def last_feed_id(tx: Tx) -> int:
    row = tx.one("SELECT MAX(id) FROM feed")
    return int(row[0] or 0)


def expired_runs(tx: Tx, now: float) -> list[str]:
    rows = tx.all(
        "SELECT run_id FROM runs WHERE status = 'running' AND lease_expires_at IS NOT NULL "
        "AND lease_expires_at <= ? ORDER BY lease_expires_at LIMIT ?",
        (now, EXPIRED_BATCH),
    )
    return [row[0] for row in rows]


def count_runs(tx: Tx) -> dict[str, int]:
    return {status: count for status, count in tx.all("SELECT status, COUNT(*) FROM runs GROUP BY status")}
