"""Durable storage of runs, turns and event logs: one contract, SQLite and PostgreSQL backends.

The backend is chosen by :mod:`lastword.registry` (by the database URL's scheme), not here."""

from lastword.store.base import (
    AppendOutcome,
    EndOutcome,
    RunRecord,
    RunSpec,
    Store,
    StoredEvent,
    TurnRecord,
)
from lastword.store.protocols import Feed, Lifetime, Outbox, Ping, Retention, RunLog, Stats, Streams

__all__ = [
    "AppendOutcome",
    "EndOutcome",
    "Feed",
    "Lifetime",
    "Outbox",
    "Ping",
    "Retention",
    "RunLog",
    "Stats",
    "Streams",
    "RunRecord",
    "RunSpec",
    "Store",
    "StoredEvent",
    "TurnRecord",
]
