"""Choose the backend from the database URL, and the fan-out that goes with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lastword.settings import Settings
from lastword.store.base import Store

if TYPE_CHECKING:
    from lastword.fanout.hub import Hub
    from lastword.fanout.local import Fanout


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql:", "postgres:"))


def open_store(settings: Settings) -> Store:
    """The store for ``settings.database_url`` (not yet opened)."""
    url = settings.database_url
    if url.startswith("sqlite:"):
        from lastword.store.sqlite import SqliteStore

        return SqliteStore(
            url,
            durability=settings.durability,
            default_lease_seconds=settings.lease_seconds,
        )
    if is_postgres_url(url):
        from lastword.store.postgres import PostgresStore

        return PostgresStore(url, default_lease_seconds=settings.lease_seconds)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")


def open_fanout(store: Store, hub: Hub) -> Fanout:
    """The fan-out for ``store`` (opened; the fan-out is not yet started).

    PostgreSQL may have other replicas: the hub is fed by commit notices, in commit order.
    SQLite is one process's file: everything it commits is published where it is committed.
    """
    from lastword.fanout.local import LocalFanout, NoticeFanout
    from lastword.store.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        return NoticeFanout(hub, store, store.url, store.channel)
    store.chunk_listeners = hub.has_run_subscribers
    return LocalFanout(hub)
