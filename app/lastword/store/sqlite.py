"""The embedded SQLite backend: one file, WAL journal, one writer thread, several readers.

Durability modes (``LASTWORD_DURABILITY``):

* ``normal`` — WAL with ``synchronous=NORMAL``: a commit is in the OS before it is answered, so
  it survives ``kill -9`` of the service, but not a power cut.
* ``full`` — WAL with ``synchronous=FULL``: every commit is fsynced; it survives a power cut.

All writes go through one thread that commits whatever is pending in one transaction (group
commit, :mod:`lastword.store.group`), so transactions never wait on each other's locks and a
burst of small requests shares one commit; reads use a small pool of threads, each with its own
connection (WAL readers do not block the writer).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from lastword.errors import LastwordError, Unavailable
from lastword.store import ds, forks
from lastword.store.group import GroupWriter
from lastword.store.migrations import upgrade_schema
from lastword.store.sql import SqlStore
from lastword.store.tx import Tx, run_in

T = TypeVar("T")
P = ParamSpec("P")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    pk INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    parent_run_id TEXT,
    agent TEXT,
    mode TEXT NOT NULL,
    metadata TEXT NOT NULL,
    lease_seconds REAL NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    turn INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    lease_expires_at REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (parent_run_id, pk);
CREATE INDEX IF NOT EXISTS runs_by_lease ON runs (status, lease_expires_at);
CREATE TABLE IF NOT EXISTS turns (
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    stop_reason TEXT,
    error TEXT,
    output TEXT,
    usage TEXT,
    PRIMARY KEY (run_id, turn)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    type TEXT NOT NULL,
    event_id TEXT,
    body TEXT NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS events_by_event_id ON events (run_id, event_id)
    WHERE event_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS feed (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    parent_run_id TEXT,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS feed_by_parent ON feed (parent_run_id, id);
"""

#: Schema upgrades in order: ``MIGRATIONS[i]`` takes version ``i`` to ``i + 1`` (store.migrations).
SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS deleted_runs (run_id TEXT PRIMARY KEY, deleted_at REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_by_age ON runs (status, updated_at);
"""

SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS webhooks (run_id TEXT PRIMARY KEY, url TEXT NOT NULL, secret TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    url TEXT NOT NULL,
    secret TEXT,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts TEXT NOT NULL,
    last_status INTEGER,
    next_attempt_at REAL,
    leased_until REAL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (state, next_attempt_at);
CREATE INDEX IF NOT EXISTS deliveries_by_run ON deliveries (run_id, id);
"""

#: The webhook secret is stored once (issue 21): deliveries stop copying it.
SCHEMA_V5 = "UPDATE deliveries SET secret = NULL WHERE secret IS NOT NULL"
MIGRATIONS = (SCHEMA, SCHEMA_V2, SCHEMA_V3, forks.SCHEMA, SCHEMA_V5, ds.schema("BLOB"))

SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}
#: How long a statement waits for another connection's (or process's) lock.
BUSY_SECONDS = 10


def enable_wal(connection: sqlite3.Connection) -> None:
    """Switch the file to WAL, waiting for other processes doing the same.

    Switching a new file's journal needs a lock that SQLite does not wait for with the busy
    handler: processes starting together on a new file got "database is locked" here at once
    (tests/store_contract.py). So this waits by itself, up to ``BUSY_SECONDS``.
    """
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///relative`` or ``sqlite:////absolute`` URL."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"not a sqlite URL: {url!r}")
    path = url[len("sqlite:///") :]
    return path or ":memory:"


class SqliteStore(SqlStore):
    # Without statistics SQLite guesses that a run holds ~10 events and, for a long list of
    # ids, scans the run's whole range of the primary key instead: each batch's dedupe then
    # costs the run's length, and ingest with eventIds slows down as the run grows.
    events_by_id = "events INDEXED BY events_by_event_id"

    def __init__(self, url: str, *, durability: str = "normal", hold_commit_dir: Path | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = sqlite_path(url)
        self.synchronous = SYNCHRONOUS[durability]
        self._writer = GroupWriter(self._connection, hold_commit_dir=hold_commit_dir)
        self._reader_pool = ThreadPoolExecutor(4, thread_name_prefix="sqlite-reader")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            connection.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000:.0f}")
            enable_wal(connection)
            connection.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _transact(self, begin: str, work: Callable[[Tx], T]) -> T:
        try:
            connection = self._connection()
            tx = Tx(connection.cursor(), str)
            connection.execute(begin)
            committed = False
            try:
                result = work(tx)
                connection.execute("COMMIT")
                committed = True
                return result
            finally:
                if not committed and connection.in_transaction:
                    connection.execute("ROLLBACK")
                tx.finish(committed)
        except LastwordError:
            raise
        except sqlite3.Error as error:
            raise Unavailable(f"the SQLite store failed: {error}") from error

    async def _write(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._writer.submit(lambda tx: fn(tx, *args, **kwargs))

    async def _read(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_in(self._reader_pool, self._transact, "BEGIN", lambda tx: fn(tx, *args, **kwargs))

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # The writer's BEGIN IMMEDIATE takes the write lock first, so processes starting together
        # on one file create or upgrade the schema one after the other (the busy timeout waits).
        await self._writer.submit(lambda tx: upgrade_schema(tx, MIGRATIONS))

    async def close(self) -> None:
        self._writer.close()
        self._reader_pool.shutdown(wait=True)
        with self._connections_lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()

    async def ping(self) -> None:
        await self._read(lambda tx: tx.one("SELECT 1"))
