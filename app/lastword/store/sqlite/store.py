"""The embedded SQLite backend: one file, WAL journal, one writer thread, several readers.

Durability modes (``LASTWORD_DURABILITY``):

* ``normal`` — WAL with ``synchronous=NORMAL``: a commit is in the OS before it is answered, so
  it survives ``kill -9`` of the service, but not a power cut.
* ``full`` — WAL with ``synchronous=FULL``: every commit is fsynced; it survives a power cut.

All writes go through one thread that commits whatever is pending in one transaction (group
commit, :mod:`lastword.store.sql.batch`), so transactions never wait on each other's locks and a
burst of small requests shares one commit; reads use a small pool of threads, each with its own
connection (WAL readers do not block the writer).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from lastword.errors import LastwordError
from lastword.store.sql import schema as ddl
from lastword.store.sqlite.checkpoints import Checkpointer, never_checkpoint
from lastword.store.sql.dialect import NOTICES_TABLE, SqliteDialect
from lastword.store.sqlite.group import GroupWriter
from lastword.store.sql.migrations import upgrade_schema
from lastword.store.sql.store import SqlStore
from lastword.store.sqlite.driver import SqliteTx, driver_error, is_driver_error
from lastword.store.sql.tx import Tx, run_in

T = TypeVar("T")
P = ParamSpec("P")

#: Schema versions (lastword.store.sql.schema, written once for both backends).
MIGRATIONS = ddl.migrations(ddl.SQLITE)

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
    def __init__(self, url: str, *, durability: str = "normal", hold_commit_dir: Path | None = None,
                 notices: bool = False, **kwargs: Any) -> None:
        """``notices``: other processes serve the same file and hear its commits from the notices
        each transaction writes (:mod:`lastword.fanout.data_version`)."""
        dialect = SqliteDialect()
        dialect.notices = notices
        super().__init__(dialect, **kwargs)
        self.notices = notices
        self.path = sqlite_path(url)
        self.synchronous = SYNCHRONOUS[durability]
        self._checkpointer = None if self.path == ":memory:" else Checkpointer(self.path, self._connection)
        # Processes sharing the file take turns at writing through a file lock beside it.
        shared = notices and self.path != ":memory:"
        self._writer = GroupWriter(self._connection, hold_commit_dir=hold_commit_dir,
                                   committed=self._checkpointer.committed if self._checkpointer else None,
                                   write_lock=Path(f"{self.path}-writer") if shared else None)
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
            never_checkpoint(connection)
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _transact(self, begin: str, work: Callable[[Tx], T]) -> T:
        try:
            connection = self._connection()
            tx = SqliteTx(connection.cursor(), str)
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
        except Exception as error:
            if is_driver_error(error):
                raise driver_error(error) from error
            raise

    async def _write(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._writer.submit(lambda tx: fn(tx, *args, **kwargs))

    async def _write_on(
        self, run_id: str, ids: Sequence[str], fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        # Keyed by its run: a batch of appends to many runs has their rows (and the events
        # under their ids) read together.
        return await self._writer.submit(lambda tx: fn(tx, *args, **kwargs), run_id, ids)

    async def _read(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_in(self._reader_pool, self._transact, "BEGIN", lambda tx: fn(tx, *args, **kwargs))

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # The writer's BEGIN IMMEDIATE takes the write lock first, so processes starting together
        # on one file create or upgrade the schema one after the other (the busy timeout waits).
        await self._writer.submit(lambda tx: upgrade_schema(tx, MIGRATIONS))
        if self.notices:
            await self._writer.submit(lambda tx: tx.run(NOTICES_TABLE))

    async def close(self) -> None:
        # Waiting for the writer's last batch and the readers' last reads blocks: in a thread, so
        # the loop goes on serving (other tasks, the end of the drain) meanwhile.
        self._writer.stop()
        await asyncio.to_thread(self._writer.join)
        await asyncio.to_thread(self._reader_pool.shutdown, wait=True)
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.stop)
        with self._connections_lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()

    async def ping(self) -> None:
        await self._read(lambda tx: tx.one("SELECT 1"))
