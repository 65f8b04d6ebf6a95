"""Choose the backend from the database URL."""

from __future__ import annotations

from app.settings import Settings
from app.store.base import Store


def open_store(settings: Settings) -> Store:
    """The store for ``settings.database_url`` (not yet opened)."""
    url = settings.database_url
    if url.startswith("sqlite:"):
        from app.store.sqlite import SqliteStore

        return SqliteStore(
            url,
            durability=settings.durability,
            default_lease_seconds=settings.lease_seconds,
        )
    if url.startswith(("postgresql:", "postgres:")):
        from app.store.postgres import PostgresStore

        return PostgresStore(url, default_lease_seconds=settings.lease_seconds)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")
