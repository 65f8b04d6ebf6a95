"""Backends and fan-outs by name: what ``LASTWORD_DATABASE_URL`` picks, and how it hears commits.

A backend is a store factory and the name of the fan-out it needs: an embedded database owned
by one process publishes each commit where it is made (``local``); a database shared by
replicas feeds the hub from its commit notices (``notify``; ``data_version`` for the
processes of ``lastword serve --workers N`` sharing one SQLite file), so every replica
publishes in commit order. A new backend is a module under :mod:`lastword.store` and one line in
:data:`BACKENDS`; a new fan-out, a module under :mod:`lastword.fanout` and one line in
:data:`FANOUTS`. Each factory imports its module when called: a SQLite service never loads
the PostgreSQL driver. ``LASTWORD_FANOUT_URL`` (``nats://…``) replaces PostgreSQL's notices by
NATS's (:mod:`lastword.fanout.nats`), for replicas on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lastword.settings import Settings

if TYPE_CHECKING:
    from lastword.fanout.hub import Hub
    from lastword.fanout.local import Fanout, Wakeups
    from lastword.store.base import Store


@dataclass(frozen=True)
class Backend:
    #: The store for the settings (not yet opened); ``hub`` is this process's, for a backend
    #: that asks it whether a run has live subscribers before making chunk events for them;
    #: further keywords go to the store's constructor as they are.
    store: Callable[..., Store]
    #: The name in :data:`FANOUTS` of the fan-out this backend needs.
    fanout: str
    #: The one it needs when ``LASTWORD_WORKERS`` processes serve it (each a replica).
    workers_fanout: str


def _sqlite(settings: Settings, hub: Hub | None, **options: Any) -> Store:
    from lastword.store.sqlite.store import SqliteStore

    # One process hears every commit: chunks nobody here follows need not be made for the hub.
    # Workers sharing the file are replicas: another one's subscriber may want any chunk.
    alone = settings.workers == 1
    return SqliteStore(settings.database_url, durability=settings.durability,
                       default_lease_seconds=settings.lease_seconds, fold_cache_bytes=settings.fold_cache_bytes,
                       chunk_listeners=hub.has_run_subscribers if hub is not None and alone else None,
                       notices=not alone, **options)


def _postgres(settings: Settings, hub: Hub | None, **options: Any) -> Store:
    from lastword.store.postgres.store import PostgresStore

    # Another replica's subscriber may want any chunk: chunks are always made for the notices.
    return PostgresStore(settings.database_url, default_lease_seconds=settings.lease_seconds,
                         fold_cache_bytes=settings.fold_cache_bytes, **options)


def _local(store: Store, hub: Hub, wakeups: Wakeups) -> Fanout:
    from lastword.fanout.local import LocalFanout

    return LocalFanout(hub, wakeups)


def _notify(store: Store, hub: Hub, wakeups: Wakeups) -> Fanout:
    from lastword.fanout.local import NoticeFanout
    from lastword.fanout.notify import NoticeListener
    from lastword.store.postgres.store import PostgresStore

    if not isinstance(store, PostgresStore):
        raise ValueError("the notify fan-out hears PostgreSQL's LISTEN/NOTIFY: it needs a postgresql:// database")
    url, channel = store.url, store.channel
    return NoticeFanout(hub, store, lambda deliver, resync: NoticeListener(url, channel, deliver, resync), wakeups)


def _nats(settings: Settings, store: Store, hub: Hub, wakeups: Wakeups) -> Fanout:
    from lastword.errors import Unavailable
    from lastword.fanout.nats import NatsFanout, check_url, subject_prefix
    from lastword.store.postgres.store import PostgresStore

    url = settings.fanout_url or ""
    check_url(url)
    if not isinstance(store, PostgresStore):
        raise Unavailable("the NATS fan-out (LASTWORD_FANOUT_URL) carries the notices of replicas sharing "
                          "PostgreSQL: it needs a postgresql:// LASTWORD_DATABASE_URL")
    fanout = NatsFanout(hub, store, url, subject_prefix(store.database, store.dialect.schema), wakeups)
    store.announce_after_commit(fanout.announce)  # and no NOTIFY
    return fanout


def _data_version(store: Store, hub: Hub, wakeups: Wakeups) -> Fanout:
    from lastword.fanout.data_version import DataVersionFanout
    from lastword.store.sqlite.store import SqliteStore

    if not isinstance(store, SqliteStore) or not store.notices:
        raise ValueError("the data_version fan-out reads the notices of a SQLite store opened for several workers")
    return DataVersionFanout(hub, store, wakeups)


#: URL scheme → backend.
BACKENDS: dict[str, Backend] = {
    "sqlite": Backend(_sqlite, "local", "data_version"),
    "postgresql": Backend(_postgres, "notify", "notify"),
    "postgres": Backend(_postgres, "notify", "notify"),
}

#: Fan-out name → factory, given the opened store, the hub and who is told of other replicas' changes.
FANOUTS: dict[str, Callable[[Store, Hub, Wakeups], Fanout]] = {
    "local": _local,
    "notify": _notify,
    "data_version": _data_version,
}


def backend_for(url: str) -> Backend:
    """The backend that ``url``'s scheme names; :class:`ValueError` naming the choices otherwise."""
    scheme = url.partition(":")[0].lower()
    if scheme not in BACKENDS:
        raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")
    return BACKENDS[scheme]


def open_store(settings: Settings, hub: Hub | None = None, **options: Any) -> Store:
    """The store for ``settings.database_url`` (not yet opened); ``options`` go to its constructor."""
    return backend_for(settings.database_url).store(settings, hub, **options)


def open_fanout(settings: Settings, store: Store, hub: Hub, wakeups: Wakeups) -> Fanout:
    """The fan-out the backend of ``settings`` needs (not yet started): NATS's when
    ``LASTWORD_FANOUT_URL`` names one (:class:`lastword.errors.Unavailable` for a URL it cannot use)."""
    if settings.fanout_url:
        return _nats(settings, store, hub, wakeups)
    backend = backend_for(settings.database_url)
    return FANOUTS[backend.fanout if settings.workers == 1 else backend.workers_fanout](store, hub, wakeups)
