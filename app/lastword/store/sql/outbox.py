"""The webhook outbox: delivery rows written with the end they announce, leased to one sender.

* A delivery row is inserted by the same transaction that stores its ``subagent/end``
  (:func:`enqueue`, called from :mod:`lastword.store.sql.writes`), so an end is never committed
  without its delivery, nor a delivery without its end.
* A sender *leases* due rows (:func:`claim`): it sets ``leased_until`` on rows that are due and
  not leased, in one statement whose subquery PostgreSQL runs with ``FOR UPDATE SKIP LOCKED``;
  two replicas claiming at once get disjoint rows, and a replica that dies leaves its rows to the
  others once the lease runs out. An attempt's outcome is written only while the lease is still
  the sender's own (``leased_until`` unchanged), so a sender that outlived its lease cannot
  overwrite what a later one did.
* A sender that stops with attempts unfinished (a drain's deadline) *releases* their leases
  (:func:`release`): the rows are due again at once for any replica, instead of after the lease.
* The secret is stored once, in ``webhooks``: a delivery row does not copy it (the column
  ``deliveries.secret`` is left from schema 1 and kept empty); a claim reads it from there.
"""

from __future__ import annotations

from typing import Any

from lastword.rules.records import Delivery, DeliveryJob, WebhookTarget
from lastword.store.sql.rows import dumps, loads
from lastword.store.sql.tx import Tx

_DELIVERY_COLUMNS = "id, webhook_id, run_id, turn, state, attempts, last_status, next_attempt_at"


def add_target(tx: Tx, run_id: str, target: WebhookTarget) -> None:
    tx.run("INSERT INTO webhooks (run_id, url, secret) VALUES (?, ?, ?)", (run_id, target.url, target.secret))


def enqueue(tx: Tx, run_id: str, turn: int, webhook_id: str, payload: str, now: float) -> None:
    """A pending delivery of ``payload`` if the run has a webhook (nothing otherwise)."""
    tx.run(
        "INSERT INTO deliveries (webhook_id, run_id, turn, url, payload, state, attempts, "
        "next_attempt_at, created_at) "
        "SELECT ?, run_id, ?, url, ?, 'pending', '[]', ?, ? FROM webhooks WHERE run_id = ? "
        "ON CONFLICT (webhook_id) DO NOTHING",
        (webhook_id, turn, payload, now, now, run_id),
    )


def claim(tx: Tx, claim_clause: str, now: float, lease_seconds: float, limit: int) -> list[DeliveryJob]:
    """Lease up to ``limit`` due deliveries to the caller until ``now + lease_seconds``."""
    until = now + lease_seconds
    rows = tx.all(
        "UPDATE deliveries SET leased_until = ? WHERE id IN ("
        "SELECT id FROM deliveries WHERE state = 'pending' AND next_attempt_at <= ? "
        "AND (leased_until IS NULL OR leased_until < ?) ORDER BY next_attempt_at LIMIT ?" + claim_clause + ") "
        "RETURNING id, webhook_id, url, (SELECT secret FROM webhooks WHERE webhooks.run_id = deliveries.run_id), "
        "payload, attempts",
        (until, now, now, limit),
    )
    return [
        DeliveryJob(id=int(row[0]), webhook_id=row[1], url=row[2], secret=row[3], payload=row[4],
                    attempts=loads(row[5]), leased_until=until)
        for row in rows
    ]


def record_attempt(
    tx: Tx, job: DeliveryJob, attempts: list[dict[str, Any]], state: str, status: int | None,
    next_attempt_at: float | None,
) -> bool:
    """Write an attempt's outcome while the caller still holds the lease; whether it did."""
    row = tx.one(
        "UPDATE deliveries SET attempts = ?, state = ?, last_status = ?, next_attempt_at = ?, leased_until = NULL "
        "WHERE id = ? AND leased_until = ? RETURNING id",
        (dumps(attempts), state, status, next_attempt_at, job.id, job.leased_until),
    )
    return row is not None


def release(tx: Tx, jobs: list[DeliveryJob]) -> int:
    """Give up the caller's leases on ``jobs`` (each due again now, its attempts unchanged);
    how many it still held."""
    released = 0
    for job in jobs:
        row = tx.one("UPDATE deliveries SET leased_until = NULL WHERE id = ? AND leased_until = ? RETURNING id",
                     (job.id, job.leased_until))
        released += row is not None
    return released


def of_run(tx: Tx, run_id: str) -> list[Delivery]:
    rows = tx.all(f"SELECT {_DELIVERY_COLUMNS} FROM deliveries WHERE run_id = ? ORDER BY id", (run_id,))
    return [
        Delivery(id=int(row[0]), webhook_id=row[1], run_id=row[2], turn=int(row[3]), state=row[4],
                 attempts=loads(row[5]), last_status=row[6], next_attempt_at=row[7])
        for row in rows
    ]


def pending_stats(tx: Tx) -> tuple[int, float | None]:
    """How many deliveries are pending, and when the oldest of them was created."""
    row = tx.one("SELECT COUNT(*), MIN(created_at) FROM deliveries WHERE state = 'pending'")
    return int(row[0]), (None if row[1] is None else float(row[1]))


def next_due(tx: Tx) -> float | None:
    """When the earliest pending delivery can next be claimed: at its next attempt's time, or,
    while it is leased (an attempt in flight), when that lease runs out. Counting a leased one
    as due at its attempt's time had the sender claim it again and again, thousands of write
    transactions a second, for as long as its receiver took to answer."""
    row = tx.one(
        "SELECT MIN(CASE WHEN leased_until > next_attempt_at THEN leased_until ELSE next_attempt_at END) "
        "FROM deliveries WHERE state = 'pending'"
    )
    return None if row is None or row[0] is None else float(row[0])
