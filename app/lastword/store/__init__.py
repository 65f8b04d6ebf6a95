"""Durable storage of runs, turns and event logs: one contract, SQLite and PostgreSQL backends."""

from lastword.store.base import (
    AppendOutcome,
    EndOutcome,
    RunRecord,
    RunSpec,
    Store,
    StoredEvent,
    TurnRecord,
)
from lastword.store.factory import open_store

__all__ = [
    "AppendOutcome",
    "EndOutcome",
    "RunRecord",
    "RunSpec",
    "Store",
    "StoredEvent",
    "TurnRecord",
    "open_store",
]
