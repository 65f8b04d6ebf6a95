"""Choose the backend from the database URL, and the fan-out that goes with it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from lastword.settings import Settings
from lastword.store.base import Store

if TYPE_CHECKING:
    from lastword.fanout.hub import Hub
    from lastword.fanout.local import Fanout

#: Test-only: a directory; while ``hold`` exists in it, the SQLite writer stops after writing a
#: batch and before its ``COMMIT``, and says so by creating ``paused`` (tests/test_group_commit.py).
HOLD_COMMIT_ENV = "LASTWORD_TEST_HOLD_COMMIT_DIR"


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql:", "postgres:"))


def open_store(settings: Settings) -> Store:
    """The store for ``settings.database_url`` (not yet opened)."""
    url = settings.database_url
    if url.startswith("sqlite:"):
        from lastword.store.sqlite import SqliteStore

        # Test-only (tests/test_group_commit.py): a directory through which a test holds the
        # writer before a COMMIT. Read here, in the composition root; the store is handed it.
        hold = os.environ.get(HOLD_COMMIT_ENV)
        return SqliteStore(
            url,
            durability=settings.durability,
            default_lease_seconds=settings.lease_seconds,
            fold_cache_bytes=settings.fold_cache_bytes,
            hold_commit_dir=Path(hold) if hold else None,
        )
    if is_postgres_url(url):
        from lastword.store.postgres import PostgresStore

        return PostgresStore(url, default_lease_seconds=settings.lease_seconds, fold_cache_bytes=settings.fold_cache_bytes)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")


def open_fanout(store: Store, hub: Hub) -> Fanout:
    """The fan-out for ``store`` (opened; the fan-out is not yet started).

    PostgreSQL may have other replicas: the hub is fed by commit notices, in commit order.
    SQLite is one process's file: everything it commits is published where it is committed.
    """
    from lastword.fanout.local import LocalFanout, NoticeFanout
    from lastword.store.postgres import PostgresStore
    from lastword.store.sql import SqlStore

    if isinstance(store, PostgresStore):
        return NoticeFanout(hub, store, store.url, store.channel)
    if isinstance(store, SqlStore):
        store.chunk_listeners = hub.has_run_subscribers
    return LocalFanout(hub)
