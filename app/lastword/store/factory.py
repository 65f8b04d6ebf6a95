"""Choose the backend from the database URL, and the notice listener that goes with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lastword.settings import Settings
from lastword.store.base import Store

if TYPE_CHECKING:
    from lastword.notify import NoticeListener
    from lastword.service import RunService


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


def open_notifier(store: Store, service: RunService) -> NoticeListener | None:
    """The listener for other replicas' commits (PostgreSQL; not yet started), or None.

    SQLite is one process's file: everything it commits is published where it is committed.
    """
    from lastword.store.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        return None
    from lastword.notify import NoticeListener

    return NoticeListener(store.url, store.channel, service.publish_committed, service.hub.resync)
