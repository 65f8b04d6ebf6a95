"""PostgreSQL's merged commit: the small appends of many requests in one transaction.

On PostgreSQL every exchange with the server is a round trip (about 0.45 ms for ``SELECT 1``
on the two-core bench machine), and an append on its own transaction waits for three of
them (``BEGIN`` with the run's row lock, the ``INSERT``, the ``UPDATE`` with the ``COMMIT``),
each on a thread of its own that hands the GIL back and forth. Here one writer thread per
replica takes the small appends that are pending (:class:`~lastword.store.sql.batch.BatchWriter`)
and commits them together in two exchanges:

1. ``BEGIN`` with one ``SELECT … FOR UPDATE`` of every run the batch writes, in run id order;
2. every write's statements, held back while the writes run in turn, with the ``COMMIT``.

**Lock order.** Rows are locked in run id order by one statement, before any write runs;
PostgreSQL's feed lock, which a write that ends a turn takes, comes after them, as in any
single transaction. So two replicas' batches never wait for each other in a cycle. A batch
that meets something else (a deadlock, a lock time-out) does not commit, and its writes run
again one by one (below).

**A refused write** (a 409, a 404: raised in Python before the write has sent anything) is
dropped from what is held back and answered with its error; the others commit. A write that
had to send a statement before it was refused (a second write on a run in the same batch
reads the row again) runs after a ``SAVEPOINT`` sent with that statement, and is rolled back
to it. Savepoints that nothing sent are never sent, so a batch of single appends costs
PostgreSQL no subtransaction; :data:`MAX_MERGED` keeps the others within the 64 that a
backend tracks without overflowing to disk.

**Anything PostgreSQL refuses** in the batch, before the ``COMMIT`` is known to be sent
(a statement, a lost connection, a deadlock), commits nothing of it: each write then runs
again in a transaction of its own, as it would have without the merge, and is answered from
that. Only a ``COMMIT`` whose connection dies under it has an unknown outcome: its writes are
answered 503 (:class:`~lastword.errors.Unavailable`), never 2xx, as a lone transaction's are.

**A store that cannot be reached** costs one wait, not one per write: a batch that gets no
connection within the pool's time-out is answered 503 at once, and writes run again one by
one stop at the first that finds no store (:class:`~lastword.errors.Unreachable`), the rest told
the same. One thread waiting on each write in turn would otherwise hold the queue for minutes.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from lastword.errors import LastwordError, Unavailable, Unreachable
from lastword.store.sql.batch import BatchWriter, Job
from lastword.store.postgres.tx import PipelinedTx, to_pyformat
from lastword.store.sql.rows import RUN_COLUMNS, RUN_ID_COLUMN
from lastword.store.sql.tx import Holds, Tx

log = logging.getLogger("lastword")

#: Writes merged into one transaction at most: a batch's savepoints stay within the 64
#: subtransactions a PostgreSQL backend caches (PGPROC_MAX_CACHED_SUBXIDS).
MAX_MERGED = 64

_LOCK_RUNS = to_pyformat(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ANY(?) ORDER BY run_id FOR UPDATE")


class MergedTx(PipelinedTx):
    """One transaction for a batch of writes, each run in turn: its rows locked up front, each
    write's statements held back for the ``COMMIT``, a write's savepoint sent only if needed."""

    def __init__(self, connection: psycopg.Connection[Any], holds: Holds) -> None:
        super().__init__(connection, "BEGIN", holds)
        self._locked: dict[str, Any] = {}
        self._exchanges = 0  # round trips so far: whether a write sent anything of its own
        self._mark = 0
        self._mark_exchanges = 0

    def lock_runs(self, run_ids: Sequence[str]) -> None:
        """Lock the rows of ``run_ids`` (sorted) in one statement, sent with the ``BEGIN``."""
        if run_ids:
            self._execute(_LOCK_RUNS, (list(run_ids),))
            self._locked = {row[RUN_ID_COLUMN]: row for row in self.cursor.fetchall()}

    def locked_run(self, run_id: str) -> Any:
        return self._locked.pop(run_id, None)

    def many(self, sql: str, rows: Any) -> None:
        # Held like any statement nobody reads (small appends only come here: no COPY).
        statement = self._convert(sql)
        self._held.extend((statement, row) for row in rows)

    def begin_write(self, number: int) -> None:
        self._used = []
        self._mark, self._mark_exchanges = len(self._held), self._exchanges
        self._held.append((f"SAVEPOINT w{number}", None))

    def end_write(self, number: int, *, refused: bool) -> None:
        if self._exchanges == self._mark_exchanges:
            # Nothing of the write reached the server: its savepoint need not either.
            if refused:
                del self._held[self._mark:]
            else:
                del self._held[self._mark]
            return
        if refused:
            self._held.append((f"ROLLBACK TO SAVEPOINT w{number}", None))
        self._held.append((f"RELEASE SAVEPOINT w{number}", None))

    def commit(self) -> None:
        """Send what is held and the ``COMMIT`` as one query of several statements, each with
        its values bound by psycopg on this side (its quoting, ``ClientCursor.mogrify``).

        In a pipeline psycopg spends about 60 us of this process's CPU per statement on this
        machine, three statements per append; as one query the whole batch costs less than
        half (bench: 63-77 against 140-157 us per append of 16), and this CPU is the GIL's.
        A statement PostgreSQL refuses stops the query there, so the ``COMMIT`` after it
        never runs; a value psycopg cannot quote (a NUL) is refused before anything is sent.
        """
        self._end_copy()
        held, self._held = self._held, []
        quote = psycopg.ClientCursor(self.connection).mogrify
        statements = [sql if params is None else quote(sql, params) for sql, params in held]
        statements.append("COMMIT")
        self._exchanges += 1
        self.sent = True
        self.connection.execute(";\n".join(statements))

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        self._exchanges += 1
        super()._execute(sql, params)

    def _send(self, last: tuple[str, Sequence[Any]] | None) -> None:
        self._exchanges += 1
        super()._send(last)


class _Ended(enum.Enum):
    COMMITTED = "committed"
    REFUSED = "every write was refused: nothing to commit"
    AGAIN = "nothing committed: each write runs again alone"
    UNKNOWN = "the connection died under the COMMIT"
    FAILED = "a bug: every write is answered with it"


class PostgresGroupWriter(BatchWriter):
    """The writer thread of one replica's merged commits (see the module's docstring)."""

    def __init__(self, pool: ConnectionPool, alone: Callable[[Callable[[Tx], Any]], Any], timeout: float,
                 mapped: Callable[[PoolTimeout], LastwordError]) -> None:
        """``alone(work)`` runs one write in a transaction of its own (blocking), retried on a
        fresh connection as every PostgreSQL transaction is, errors mapped for the client;
        ``mapped`` says what a client is told when no connection came within ``timeout``."""
        super().__init__("postgres-writer", max_batch=MAX_MERGED)
        self._pool = pool
        self._alone = alone
        self._timeout = timeout
        self._mapped = mapped
        self.start()

    def _commit(self, batch: list[Job]) -> None:
        holds = Holds()
        ended = _Ended.AGAIN
        try:
            with self._pool.connection(timeout=self._timeout) as connection:
                ended = self._merged(connection, batch, holds)
        except PoolTimeout as error:
            # No connection in time: each write run alone would wait as long again, one by one.
            ended = _Ended.FAILED
            for job in batch:
                job.outcome, job.error = None, self._mapped(error)
        except psycopg.Error as error:
            log.info("a merged commit of %d writes did not happen (%s); they run one by one", len(batch), error)
        except Exception as error:  # a bug is answered as itself rather than leave requests hanging
            ended = _Ended.FAILED
            for job in batch:
                if job.error is None:
                    job.outcome, job.error = None, error
        finally:
            holds.release(ended is _Ended.COMMITTED)
        if ended is _Ended.AGAIN:
            self._one_by_one(batch)
        elif ended is _Ended.UNKNOWN:
            for job in batch:
                if job.error is None:
                    job.outcome, job.error = None, Unavailable("the PostgreSQL store failed during a commit")

    def _one_by_one(self, batch: list[Job]) -> None:
        """Run each write of a batch that committed nothing in a transaction of its own; once
        the store cannot be reached at all, the rest are told so without waiting as long."""
        unreachable: Unreachable | None = None
        for job in batch:
            job.outcome, job.error = None, unreachable
            if unreachable is not None:
                continue
            try:
                job.outcome = self._alone(job.work)
            except Unreachable as error:
                job.error = unreachable = error
            except Exception as error:
                job.error = error

    def _merged(self, connection: psycopg.Connection[Any], batch: list[Job], holds: Holds) -> _Ended:
        tx = MergedTx(connection, holds)
        committed = False
        try:
            try:
                tx.lock_runs(sorted({job.key for job in batch if job.key is not None}))
                for number, job in enumerate(batch):
                    tx.begin_write(number)
                    try:
                        job.outcome = job.work(tx)
                    except psycopg.Error:
                        raise  # the transaction is spoilt, whichever write's statement it was
                    except Exception as error:  # a refusal (or a bug, answered as itself)
                        tx.end_write(number, refused=True)
                        tx.spoil()
                        job.outcome, job.error = None, error
                    else:
                        tx.end_write(number, refused=False)
                if all(job.error is not None for job in batch):
                    return _Ended.REFUSED
                tx.settle()
            except psycopg.Error as error:
                log.info("a merged commit of %d writes failed before its COMMIT (%s); they run one by one",
                         len(batch), error)
                return _Ended.AGAIN
            try:
                tx.commit()
            except psycopg.Error as error:
                if connection.broken:
                    return _Ended.UNKNOWN
                # PostgreSQL answered: a statement sent with the COMMIT failed, so it rolled back.
                log.info("a merged commit of %d writes was refused (%s); they run one by one", len(batch), error)
                return _Ended.AGAIN
            committed = True
            return _Ended.COMMITTED
        finally:
            if not committed:
                tx.roll_back()
