"""Forks (SPEC §12): what a fork inherits from its parent, stored apart from its own log.

A fork made with ``forkOf: {runId, afterSeq}`` inherits the parent's history up to and
including ``afterSeq``: the boundary is the number itself. At creation, in the same
transaction, the parent's transcript-relevant events with ``seq <= afterSeq`` — its own and
those it inherited itself, so a fork of a fork inherits along the chain — are copied into
``inherited_events``, each keeping the run and turn it was logged in. Copying rather than
pointing at the parent's log is deliberate: retention deletes ended runs whole, and a fork's
history must not lose its beginning when its parent is deleted. The fork's own events go to
``events`` as any run's do, numbered on from ``afterSeq + 1``.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from lastword.errors import ForkAfterSeqOutOfRange, ForkParentNotFound
from lastword.rules.records import StoredEvent
from lastword.rules.transcript import HISTORY_TYPES
from lastword.store.sql.rows import loads


SCHEMA = """
CREATE TABLE IF NOT EXISTS inherited_events (
    run_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    origin_run_id TEXT NOT NULL,
    origin_turn INTEGER NOT NULL,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
)
"""


class Cursor(Protocol):
    """The part of a store transaction this module uses (``?`` placeholders)."""

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> None: ...


def inherit(tx: Cursor, run_id: str, parent_run_id: str, after_seq: int) -> None:
    """Copy the parent's history up to ``after_seq`` into the new fork ``run_id``.

    404 ``fork_parent_not_found`` for a parent that does not exist (or was deleted); 422 for an
    ``after_seq`` past the parent's last ``seq``.
    """
    row = None if parent_run_id == run_id else tx.one(
        "SELECT last_seq FROM runs WHERE run_id = ?", (parent_run_id,)
    )
    if row is None:
        raise ForkParentNotFound(f"forkOf names run {parent_run_id!r}, which does not exist", runId=parent_run_id)
    if after_seq > row[0]:
        raise ForkAfterSeqOutOfRange(
            f"forkOf.afterSeq {after_seq} is past the last seq ({row[0]}) of run {parent_run_id!r}",
            field="forkOf.afterSeq", lastSeq=row[0],
        )
    marks = ", ".join("?" * len(HISTORY_TYPES))
    tx.run(
        "INSERT INTO inherited_events (run_id, seq, origin_run_id, origin_turn, type, body) "
        "SELECT CAST(? AS TEXT), seq, origin_run_id, origin_turn, type, body FROM inherited_events "
        "WHERE run_id = ? AND seq <= ?",
        (run_id, parent_run_id, after_seq),
    )
    tx.run(
        "INSERT INTO inherited_events (run_id, seq, origin_run_id, origin_turn, type, body) "
        "SELECT CAST(? AS TEXT), seq, run_id, turn, type, body FROM events "
        f"WHERE run_id = ? AND seq <= ? AND type IN ({marks})",
        (run_id, parent_run_id, after_seq, *HISTORY_TYPES),
    )


def inherited_events(tx: Cursor, run_id: str) -> list[StoredEvent]:
    """The fork's inherited events in ``seq`` order, each under the run and turn that logged it."""
    rows = tx.all(
        "SELECT origin_run_id, seq, origin_turn, type, body FROM inherited_events "
        "WHERE run_id = ? ORDER BY seq",
        (run_id,),
    )
    return [
        StoredEvent(run_id=origin, seq=seq, turn=turn, type=kind, body=loads(body), received_at=0.0)
        for origin, seq, turn, kind, body in rows
    ]
