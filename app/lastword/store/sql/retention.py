"""Retention: deleting ended runs with all they hold, leaving a tombstone for each."""

from __future__ import annotations

from lastword.store.sql import ds
from lastword.store.sql.tx import Tx

#: The tables that hold a run's rows, children first. Its webhook deliveries go too, except
#: pending ones, which stay (small) so that they are still made: an end is never dropped
#: undelivered because its run aged out.
RUN_TABLES = ("events", "inherited_events", "turns", "feed", "webhooks", "runs")


def delete_ended_runs(tx: Tx, ended_before: float, now: float, limit: int) -> list[str]:
    """Delete up to ``limit`` runs that ended before ``ended_before``; their ids.

    Only ended runs go: no writer or live stream can still be using them. Each leaves a row in
    ``deleted_runs``, so readers asking for it later learn it is gone (410) rather than unknown.
    """
    rows = tx.all(
        "SELECT run_id FROM runs WHERE status = 'ended' AND updated_at < ? ORDER BY updated_at LIMIT ?",
        (ended_before, limit),
    )
    run_ids = [(row[0],) for row in rows]
    if run_ids:
        for table in RUN_TABLES:
            tx.many(f"DELETE FROM {table} WHERE run_id = ?", run_ids)
        tx.many("DELETE FROM deliveries WHERE run_id = ? AND state <> 'pending'", run_ids)
        # A run written as a Durable Stream keeps its idempotent producers under its own key.
        tx.many("DELETE FROM ds_producers WHERE uid = ?", [(ds.run_producers(run_id),) for (run_id,) in run_ids])
        tx.many(
            "INSERT INTO deleted_runs (run_id, deleted_at) VALUES (?, ?) ON CONFLICT (run_id) DO NOTHING",
            [(run_id, now) for (run_id,) in run_ids],
        )
    return [run_id for (run_id,) in run_ids]


def deleted_at(tx: Tx, run_id: str) -> float | None:
    """When retention deleted ``run_id``, or None if it never did."""
    row = tx.one("SELECT deleted_at FROM deleted_runs WHERE run_id = ?", (run_id,))
    return None if row is None else float(row[0])
