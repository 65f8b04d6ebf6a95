"""Durable storage of runs, turns and event logs: one contract, SQLite and PostgreSQL backends.

The backend is chosen by :func:`lastword.factory.open_store` (the composition root), not here."""

from lastword.store.base import (
    AppendOutcome,
    EndOutcome,
    RunRecord,
    RunSpec,
    Store,
    StoredEvent,
    TurnRecord,
)

__all__ = [
    "AppendOutcome",
    "EndOutcome",
    "RunRecord",
    "RunSpec",
    "Store",
    "StoredEvent",
    "TurnRecord",
]
