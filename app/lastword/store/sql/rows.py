"""Row mapping: the columns of each table, and records from rows (JSON columns decoded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from lastword.rules.records import RunRecord, StoredEvent, TurnRecord

RUN_COLUMNS = (
    "pk, run_id, parent_run_id, agent, mode, metadata, lease_seconds, spec, status, turn, "
    "last_seq, lease_expires_at, created_at, updated_at, fork_of_run_id, fork_after_seq, join_continuations"
)
#: Where ``run_id`` is in a row of ``RUN_COLUMNS``.
RUN_ID_COLUMN = [column.strip() for column in RUN_COLUMNS.split(",")].index("run_id")
TURN_COLUMNS = "run_id, turn, start_seq, started_at, ended_at, stop_reason, error, output, usage"
EVENT_COLUMNS = "run_id, seq, turn, type, event_id, body, received_at"
#: The events a turn's fold is built from.
FOLD_EVENT_TYPES = ("assistant/chunk", "assistant/message", "turn/end")


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
        fork_of=None if row[14] is None else (row[14], row[15]),
        join_continuations=None if row[16] is None else bool(row[16]),  # SQLite: 0 or 1
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


def event_from_row(row: Sequence[Any], feed_id: int | None = None, parent_run_id: str | None = None) -> StoredEvent:
    return StoredEvent(
        run_id=row[0],
        seq=row[1],
        turn=row[2],
        type=row[3],
        event_id=row[4],
        body=loads(row[5]),
        received_at=row[6],
        feed_id=feed_id,
        parent_run_id=parent_run_id,
    )
