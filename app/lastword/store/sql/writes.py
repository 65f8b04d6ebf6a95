"""Persisting a :class:`lastword.rules.runstate.Change`: the rows it adds and updates, as it says.

Nothing here decides: the run state machine did. Events are stored in ``seq`` order: the
ingested ones in one batch (the dialect may use COPY), then the lifecycle ones one by one with
their firehose row; a commit notice covers each range of ``seq`` up to and including a
lifecycle event, so a replica learns every feed id it must publish.
"""

from __future__ import annotations

from typing import Any

from lastword.rules.lifecycle import LIFECYCLE_TYPES
from lastword.rules.records import RunRecord, StoredEvent
from lastword.rules.runstate import Change, NewEvent
from lastword.rules.webhook_payload import payload, webhook_id
from lastword.store.sql import outbox
from lastword.store.sql.dialect import INSERT_EVENT, Dialect
from lastword.store.sql.rows import RUN_COLUMNS, TURN_COLUMNS, dumps
from lastword.store.sql.tx import Tx

#: Events the service hands to its live subscribers after a commit.
LIVE_TYPES = frozenset({"assistant/chunk"}) | LIFECYCLE_TYPES

_INSERT_RUN = (
    f"INSERT INTO runs ({RUN_COLUMNS.replace('pk, ', '')}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (run_id) DO NOTHING RETURNING pk"
)


def insert_run(tx: Tx, run: RunRecord) -> int | None:
    """Insert a new run's row; its key, or None if the run id is taken."""
    row = tx.one(_INSERT_RUN, (
        run.run_id, run.parent_run_id, run.agent, run.mode, dumps(run.metadata), run.lease_seconds,
        run.canonical, run.status, run.turn, run.last_seq, run.lease_expires_at, run.created_at, run.updated_at,
        *(run.fork_of or (None, None)), run.join_continuations,
    ))
    return None if row is None else int(row[0])


def renew_lease(tx: Tx, run_id: str, now: float) -> None:
    """The open turn's lease from ``now``, as an accepted event would renew it (``lease_expiry``)."""
    tx.run(
        "UPDATE runs SET lease_expires_at = ? + lease_seconds "
        "WHERE run_id = ? AND status = 'running' AND lease_seconds > 0",
        (now, run_id),
    )


def persist(
    tx: Tx, dialect: Dialect, change: Change, *, first_seq: int, now: float, new_run: bool = False,
    appended_stored: bool = False, live_chunks: bool = True,
) -> list[StoredEvent]:
    """Write ``change`` (whose events start at ``first_seq``); the live events it stored
    (its chunks only where ``dialect.returns_chunks`` and ``live_chunks``).

    ``new_run``: the run's row was just inserted as ``change.run`` (so it is not updated).
    ``appended_stored``: the caller already inserted the rows of ``change.appended``.
    """
    run = change.run
    if change.started is not None:
        started = change.started
        tx.run(
            f"INSERT INTO turns ({TURN_COLUMNS}) VALUES (?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL)",
            (run.run_id, started.turn, started.start_seq, started.started_at),
        )
    live: list[StoredEvent] = []
    if change.appended:
        if not appended_stored:
            dialect.insert_events(tx, run.run_id, run.turn, change.appended, now)
        if dialect.returns_chunks and live_chunks:
            live = [
                StoredEvent(run_id=run.run_id, seq=seq, turn=run.turn, type="assistant/chunk", body=event,
                            received_at=now, event_id=event.get("eventId"))
                for seq, event, _ in change.appended if event["type"] == "assistant/chunk"
            ]
    start = first_seq
    for event in change.events:
        stored = _insert_lifecycle(tx, dialect, run, event, now)
        live.append(stored)
        dialect.after_commit_notice(tx, run.run_id, start, event.seq, stored.feed_id)
        start = event.seq + 1
    if start <= run.last_seq:
        dialect.after_commit_notice(tx, run.run_id, start, run.last_seq, None)
    if change.ended is not None:
        ended = change.ended
        tx.run(
            "UPDATE turns SET ended_at = ?, stop_reason = ?, error = ?, output = ?, usage = ? "
            "WHERE run_id = ? AND turn = ?",
            (ended.ended_at, ended.stop_reason, None if ended.error is None else dumps(ended.error),
             dumps(ended.output), dumps(ended.usage), run.run_id, ended.turn),
        )
    if not new_run:
        tx.run(
            "UPDATE runs SET last_seq = ?, status = ?, turn = ?, lease_expires_at = ?, updated_at = ? "
            "WHERE run_id = ?",
            (run.last_seq, run.status, run.turn, run.lease_expires_at, run.updated_at, run.run_id),
        )
        tx.wrote_run(run)  # the columns it did not set are ``before``'s, as ``run`` holds them
    return live


def _insert_lifecycle(tx: Tx, dialect: Dialect, run: RunRecord, event: NewEvent, now: float) -> StoredEvent:
    tx.run(INSERT_EVENT, (run.run_id, event.seq, event.turn, event.type, None, dumps(event.body), now))
    if event.type == "subagent/end":
        # In the end's own transaction: the end and its webhook delivery commit together.
        outbox.enqueue(tx, run.run_id, event.turn, webhook_id(run.run_id, event.turn), payload(event.body), now)
    dialect.before_feed_insert(tx)
    row = tx.one(
        "INSERT INTO feed (run_id, parent_run_id, seq) VALUES (?, ?, ?) RETURNING id",
        (run.run_id, run.parent_run_id, event.seq),
    )
    return StoredEvent(
        run_id=run.run_id, seq=event.seq, turn=event.turn, type=event.type, body=event.body, received_at=now,
        parent_run_id=run.parent_run_id, feed_id=row[0],
    )
