"""The PostgreSQL backend: several replicas on one database.

The logic is :mod:`lastword.store.sql.store`'s and :mod:`lastword.rules.runstate`'s, unchanged; this module
brings what only PostgreSQL does:

* **Order per run.** Every change to a run starts with ``SELECT … FOR UPDATE`` on its row, so
  transactions on one run, from any replica, run one after the other: ``seq`` is assigned
  gap-free and commits in order, and a turn ends exactly once.
* **Order of the firehose.** The ``feed`` id comes from a sequence, and sequence values are
  handed out at insert time, not commit time: two writers could commit ids 11 then 10, and a
  reader that had tailed "after 10" would never see 10. So a writer takes a transaction-level
  advisory lock just before it inserts into ``feed`` and keeps it until it commits: feed ids
  become visible in id order. The lock covers only the tail of a transaction that ends, starts
  or closes a turn; plain event appends never take it.
* **Notices.** Inside the writing transaction a ``pg_notify`` names the run, the ``seq`` range
  and the feed id it committed (a few hundred bytes, far below the 8000-byte limit). PostgreSQL
  delivers it to every listening replica when, and only if, the transaction commits, in commit
  order (:mod:`lastword.store.notices` says what a notice holds); :mod:`lastword.fanout.notify`
  listens and the service reads what it needs from the log.
* **Schema at start-up** under an advisory lock, so replicas that start together create or
  upgrade it one after the other.

Connections are synchronous psycopg connections from a :class:`psycopg_pool.ConnectionPool`,
used from a thread pool (see :mod:`lastword.store.sql.tx` for why); small appends are committed
together by one writer thread instead (:mod:`lastword.store.postgres.group`). Every driver or
pool failure becomes :class:`lastword.errors.Unavailable` here, once; a connection found dead
before its transaction could commit is discarded and the transaction retried on a fresh one,
so a replica recovers by itself when the database comes back. A failure during ``COMMIT``
(sent together with the last statements of the transaction, :class:`PipelinedTx`) is never
retried: its outcome is unknown, and the client gets 503, never a 2xx for an event that may
not be stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from lastword.errors import LastwordError, Unavailable, Unreachable, UnstorableValue
from lastword.rules.ds import Producer
from lastword.rules.records import AppendOutcome
from lastword.rules.runstate import Appended
from lastword.store.sql import schema as ddl
from lastword.store.sql.migrations import upgrade_schema
from lastword.store.notices import Notice, StreamNotice
from lastword.store.sql.dialect import event_rows, insert_event_rows
from lastword.store.sql.rows import EVENT_COLUMNS
from lastword.store.sql.store import SqlStore
from lastword.store.postgres.group import PostgresGroupWriter
from lastword.store.postgres.tx import PipelinedTx
from lastword.store.sql.tx import Tx, run_in

T = TypeVar("T")
P = ParamSpec("P")

log = logging.getLogger("lastword")

#: Worker threads per replica, each with a connection (and one for the merged commits).
POOL_SIZE = 10
#: Seconds a request waits for a pooled connection (or a new one) before it answers 503.
POOL_TIMEOUT = 5.0
#: Seconds ``/readyz`` waits for one: a probe should answer quickly when the database is gone.
PING_TIMEOUT = 1.0
#: Seconds the pool keeps retrying one lost connection (backoff 1, 2, 4 s…) before it gives up;
#: the next request then starts a fresh attempt at once. Short, so that a database that comes
#: back is found within seconds, not after a backoff grown long during the outage.
RECONNECT_SECONDS = 4.0
#: Seconds a new connection may take.
CONNECT_TIMEOUT = 5
#: Batches of at least this many events are stored with COPY rather than INSERTs.
COPY_FROM = 16
#: Rows per piece of a COPY: about psycopg's 32 KB send buffer of small events.
COPY_CHUNK_ROWS = 256
#: Attempts of one transaction when its connection turns out to be dead before it commits.
ATTEMPTS = 3
#: libpq's TCP settings for every connection: a link that drops packets (a partition, a primary
#: gone without a word) fails a connection in about ten seconds instead of the kernel's fifteen
#: minutes, so a statement or a LISTEN on it ends with an error the store can answer.
LINK_CHECKS: dict[str, int] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
                               "keepalives_count": 3, "tcp_user_timeout": 10_000}

#: Schema versions (lastword.store.sql.schema, written once for both backends).
MIGRATIONS = ddl.migrations(ddl.POSTGRES)

#: Reads see one snapshot for all their statements (a run and its turn agree).
READ_ONLY = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_field(text: str) -> str:
    """``text`` as a field of COPY's text format: backslash, tab and line ends escaped."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_COPY_ESCAPES)
    return text


def copy_chunks(rows: list[tuple[Any, ...]], size: int = COPY_CHUNK_ROWS) -> Iterator[str]:
    """Event rows (``EVENT_COLUMNS`` order) as COPY text-format data, ``size`` rows a piece.

    Formatted here rather than row by row through ``Copy.write_row``, whose per-row Python cost
    was a quarter of a batch's time in the writer thread; in pieces, so that the server parses
    and inserts the first while the next is formatted. A batch's rows share their run, turn and
    time, which are formatted once (a float's ``repr`` costs as much as the rest of a row). A
    NUL character still fails as a ``DataError``: the server refuses it in COPY data.
    """
    last_run: str | None = None
    last_turn = last_time = None
    for start in range(0, len(rows), size):
        lines = []
        for run_id, seq, turn, kind, event_id, body, received_at in rows[start:start + size]:
            if run_id != last_run or turn != last_turn or received_at != last_time:
                last_run, last_turn, last_time = run_id, turn, received_at
                run_text, turn_text, time_text = copy_field(run_id), f"{turn:d}", repr(float(received_at))
            eid = "\\N" if event_id is None else copy_field(event_id)
            lines.append(
                f"{run_text}\t{seq:d}\t{turn_text}\t{copy_field(kind)}\t{eid}\t{copy_field(body)}\t{time_text}\n"
            )
        yield "".join(lines)


def lock_key(schema: str, purpose: str) -> int:
    """A 64-bit advisory lock key for one purpose within one schema (deployments may share a database)."""
    return int.from_bytes(hashlib.sha256(f"lastword:{schema}:{purpose}".encode()).digest()[:8], "big", signed=True)


def notice_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of the deployment that lives in ``schema``."""
    channel = "lastword" if schema == "public" else f"lastword.{schema}"
    # Channel names are identifiers: at most 63 bytes.
    return channel if len(channel.encode()) <= 63 else f"lastword.{zlib.crc32(schema.encode()):08x}"


def connect_failure(url: str) -> str | None:
    """Why one connection to ``url`` cannot be opened (the server's own words), or None."""
    try:
        psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT).close()
    except psycopg.Error as error:
        return " ".join(str(error).split())
    return None


def missing_database(url: str, reason: str) -> bool:
    return f'database "{conninfo_to_dict(url).get("dbname")}" does not exist' in reason


def startup_failure(url: str, reason: str) -> str:
    """The start-up error for an operator: what failed and, when it can tell, what to do."""
    where = conninfo_to_dict(url)
    host, port, name = where.get("host", "localhost"), where.get("port", "5432"), where.get("dbname")
    if missing_database(url, reason):
        user = f" -U {where['user']}" if where.get("user") else ""
        return (f'the PostgreSQL database "{name}" does not exist on {host}:{port}; create it first '
                f"(createdb -h {host} -p {port}{user} {name}, or CREATE DATABASE \"{name}\")")
    return f"cannot connect to PostgreSQL at {host}:{port} at start-up: {reason}"


def driver_error(error: psycopg.Error | PoolTimeout) -> LastwordError:
    """The one mapping of what psycopg or its pool raised to what the client is told.

    A value PostgreSQL cannot hold (a NUL character in a text, a number past its column) is the
    client's: 422 ``unstorable_value``, as SQLite answers it (:mod:`lastword.store.sqlite.driver`).
    Anything else is the store failing: 503.
    """
    if isinstance(error, PoolTimeout):
        return Unreachable("the PostgreSQL store cannot be reached: no connection")
    if isinstance(error, psycopg.DataError):
        return UnstorableValue(f"the store refused a value: {error}")
    return Unavailable(f"the PostgreSQL store failed: {error}")


class _Retry(Exception):
    """The connection died before the transaction could commit: try again on another one."""


class PostgresDialect:
    """PostgreSQL's: row locks, a feed lock and commit notices, for replicas sharing a database.

    The lock key and notice channel depend on the schema the deployment lives in, known once
    the store has connected (:meth:`PostgresStore.open` makes the dialect anew then).
    """

    events_by_id = "events"
    lock_clause = " FOR UPDATE"
    claim_clause = " FOR UPDATE SKIP LOCKED"
    # The service never publishes a PostgreSQL write's own events: NoticeFanout reads them from
    # the log when their notice arrives, and only for runs someone here follows.
    returns_chunks = False

    def __init__(self, schema: str = "public", announce: Announce | None = None) -> None:
        self.schema = schema
        self.channel = notice_channel(schema)
        self._feed_lock = lock_key(schema, "feed")
        #: Where each notice goes once its transaction committed, instead of a NOTIFY (a fan-out
        #: of its own carries them: :mod:`lastword.fanout.nats`); None: NOTIFY.
        self.announce = announce

    def match_ids(self, count: int) -> str:
        return "event_id = ANY(?)"

    def id_params(self, ids: list[str]) -> list[Any]:
        return [ids]

    def insert_events(
        self, tx: Tx, run_id: str, turn: int, appended: Sequence[Appended], now: float, *, with_ids: bool = True
    ) -> None:
        rows = event_rows(run_id, turn, appended, now)
        if len(rows) < COPY_FROM:
            insert_event_rows(tx, rows)
            return
        # COPY takes a batch in one stream: about three times the rate of executemany's
        # pipelined INSERTs. Duplicates were weeded out under the run's lock, so no ON CONFLICT.
        assert isinstance(tx, PipelinedTx)  # every transaction here is one (PostgresStore._attempt)
        tx.copy_in(f"COPY events ({EVENT_COLUMNS}) FROM STDIN", copy_chunks(rows))

    def feed_ids_issued(self, tx: Tx) -> int:
        # The identity's sequence is not transactional: it also counts ids of writers that have
        # not committed yet (or rolled back), which is harmless for "was this id ever sent?".
        row = tx.one("SELECT pg_sequence_last_value(pg_get_serial_sequence('feed', 'id')::regclass)")
        return int(row[0]) if row is not None and row[0] is not None else 0

    def before_feed_insert(self, tx: Tx) -> None:
        # Held until commit: feed ids become visible in the order they were handed out.
        tx.run("SELECT pg_advisory_xact_lock(?)", (self._feed_lock,))

    def after_commit_notice(
        self, tx: Tx, run_id: str, first_seq: int, last_seq: int, feed_id: int | None
    ) -> None:
        notice = Notice(run_id, first_seq, last_seq, feed_id)
        if self.announce is not None:
            tx.hold(_AfterCommit(self.announce, notice))
            return
        tx.run("SELECT pg_notify(?, ?)", (self.channel, notice.payload()))

    def after_stream_notice(self, tx: Tx, path: str) -> None:
        if self.announce is not None:
            tx.hold(_AfterCommit(self.announce, StreamNotice(path)))
            return
        tx.run("SELECT pg_notify(?, ?)", (self.channel, StreamNotice(path).payload()))


#: Told of each notice once its transaction has committed (from the store's threads).
Announce = Callable[[Notice | StreamNotice], None]


class _AfterCommit:
    """A notice held by its transaction, announced if and when the transaction commits: NOTIFY's
    promise without NOTIFY. A write of a merged commit that was rolled back to its savepoint
    (:mod:`lastword.store.postgres_group`) discards its notices; the others go out."""

    __slots__ = ("_announce", "_notice", "_discarded")

    def __init__(self, announce: Announce, notice: Notice | StreamNotice) -> None:
        self._announce = announce
        self._notice = notice
        self._discarded = False

    def acquire(self) -> None:
        pass

    def discard(self) -> None:
        self._discarded = True

    def release(self, committed: bool) -> None:
        if committed and not self._discarded:
            self._announce(self._notice)


class PostgresStore(SqlStore):
    dialect: PostgresDialect

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, **kwargs: Any) -> None:
        super().__init__(PostgresDialect(), **kwargs)
        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=min(2, pool_size),
            # One more for the merged commits' writer, so it never waits behind the threads.
            max_size=pool_size + 1,
            open=False,
            timeout=POOL_TIMEOUT,
            reconnect_timeout=RECONNECT_SECONDS,
            # Transactions are begun and ended explicitly; a dead host fails a connect quickly.
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT, **LINK_CHECKS},
            name="lastword",
        )
        self._threads = ThreadPoolExecutor(pool_size, thread_name_prefix="postgres")
        self._merged = PostgresGroupWriter(
            self._pool, lambda work: self._transact("BEGIN", POOL_TIMEOUT, work), POOL_TIMEOUT, driver_error
        )

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel this deployment's commit notices go to."""
        return self.dialect.channel

    def announce_after_commit(self, announce: Announce) -> None:
        """Hand each commit notice to ``announce`` once its transaction committed, and send no
        NOTIFY (whose commit-time lock every replica's writes then queue on): the fan-out that
        calls this carries the notices itself. Called from the store's threads."""
        self.dialect.announce = announce

    @property
    def database(self) -> str:
        """The database name the URL connects to (with the schema, it names a deployment)."""
        return str(conninfo_to_dict(self.url).get("dbname") or "")

    # -- transactions ------------------------------------------------------------------

    def _transact(self, begin: str, timeout: float, work: Callable[[Tx], T]) -> T:
        lost: BaseException | None = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with self._pool.connection(timeout=timeout) as connection:
                    return self._attempt(connection, begin, work)
            except _Retry as retry:
                lost = retry.__cause__
                log.warning("a database connection was lost (%s); attempt %d of %d", lost, attempt, ATTEMPTS)
                # The other idle connections probably died with it (a restart): drop them now.
                self._pool.check()
            except LastwordError:
                raise
            except (PoolTimeout, psycopg.Error) as error:
                raise driver_error(error) from error
        raise Unreachable(f"the PostgreSQL store cannot be reached: {lost}") from lost

    def _attempt(self, connection: psycopg.Connection[Any], begin: str, fn: Callable[[Tx], T]) -> T:
        tx = PipelinedTx(connection, begin)
        committed = False
        try:
            try:
                result = fn(tx)
                tx.settle()
            except psycopg.OperationalError as error:
                if connection.broken:
                    raise _Retry() from error
                raise
            # Not retried from here on: a commit that failed may still have happened (and the
            # statements held back go with it, so a connection lost here is an unknown outcome).
            tx.commit()
            committed = True
            return result
        finally:
            if not committed:
                tx.roll_back()
            tx.finish(committed)

    async def _write(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_in(self._threads, self._transact, "BEGIN", POOL_TIMEOUT, lambda tx: fn(tx, *args, **kwargs))

    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        if len(events) >= COPY_FROM:
            return await super().append(run_id, events, now, encoded)  # a batch: its own COPY
        # A small append commits with the others pending (lastword.store.postgres.group).
        return await self._merged.submit(lambda tx: self._append(tx, run_id, events, now, encoded), run_id)

    async def append_as_producer(
        self, run_id: str, events: Sequence[dict[str, Any]], now: float, encoded: Sequence[str] | None,
        producer: Producer | None,
    ) -> tuple[AppendOutcome, tuple[int, int] | None]:
        if len(events) >= COPY_FROM:
            return await super().append_as_producer(run_id, events, now, encoded, producer)
        return await self._merged.submit(
            lambda tx: self._append_as_producer(tx, run_id, events, now, encoded, producer), run_id
        )

    async def _read(self, fn: Callable[Concatenate[Tx, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_in(
            self._threads, self._transact, READ_ONLY, POOL_TIMEOUT, lambda tx: fn(tx, *args, **kwargs)
        )

    # -- life --------------------------------------------------------------------------

    async def open(self) -> None:
        await run_in(self._threads, self._open)

    def _open(self) -> None:
        # One plain connection first: the pool only says "initialization incomplete" after its
        # time-out, and a database that does not exist will not start to exist meanwhile.
        reason = connect_failure(self.url)
        if reason is not None and missing_database(self.url, reason):
            raise Unavailable(startup_failure(self.url, reason))
        try:
            self._pool.open(wait=True, timeout=POOL_TIMEOUT * 2)
        except PoolTimeout as error:
            self._pool.close()
            raise Unavailable(startup_failure(self.url, connect_failure(self.url) or str(error))) from None
        schema = self._transact("BEGIN", POOL_TIMEOUT, lambda tx: tx.one("SELECT current_schema()")[0])
        if schema is None:
            self._pool.close()
            raise RuntimeError("the database URL's search_path names no existing schema")
        self.dialect = PostgresDialect(schema, self.dialect.announce)
        self._transact("BEGIN", POOL_TIMEOUT, self._upgrade)

    def _upgrade(self, tx: Tx) -> None:
        # Replicas starting together: the first creates or upgrades, the others wait here and
        # then find the version current. CREATE … IF NOT EXISTS alone is not safe concurrently.
        tx.run("SELECT pg_advisory_xact_lock(?)", (lock_key(self.dialect.schema, "schema"),))
        found = upgrade_schema(tx, MIGRATIONS)
        if found < len(MIGRATIONS):
            log.info("schema %s upgraded from version %d to %d", self.dialect.schema, found, len(MIGRATIONS))

    async def close(self) -> None:
        self._merged.stop()
        await asyncio.to_thread(self._merged.join)
        await run_in(self._threads, self._pool.close)
        # Waiting for the threads' last work blocks: in a thread, not on the loop.
        await asyncio.to_thread(self._threads.shutdown, wait=True)

    async def ping(self) -> None:
        await run_in(self._threads, self._transact, READ_ONLY, PING_TIMEOUT, lambda tx: tx.one("SELECT 1"))
