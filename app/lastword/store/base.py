"""The storage contract every backend meets (the records it hands out are :mod:`lastword.rules.records`).

A store owns the durable log and the folds of open turns: every operation that changes a run
runs in one database transaction, holding the run's row lock, so that ``seq`` is assigned
gap-free in commit order and a turn ends exactly once, whichever replica asks.

The contract is written as small protocols (:mod:`lastword.store.protocols`), one per part of
the service that uses it; :class:`Store` is all of them at once, what a backend implements.
"""

from __future__ import annotations

from typing import Protocol

from lastword.rules.records import AppendOutcome, EndOutcome, RunRecord, RunSpec, StoredEvent, TurnRecord
from lastword.store.protocols import Feed, Lifetime, Outbox, Ping, Retention, RunLog, Stats, Streams

__all__ = [
    "AppendOutcome", "EndOutcome", "Feed", "Lifetime", "Outbox", "Ping", "Retention", "RunLog", "RunSpec", "RunRecord",
    "Stats", "Store", "StoredEvent", "Streams", "TurnRecord",
]


class Store(Lifetime, RunLog, Feed, Outbox, Retention, Stats, Streams, Protocol):
    """Every operation: what a backend implements (:class:`lastword.store.sql.store.SqlStore`)."""
