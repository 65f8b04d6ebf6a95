"""SQLite's group commit: the one writer thread of a SQLite store (:mod:`lastword.store.sql.batch`).

A write that fails (a 409, a bad request) leaves nothing of itself and is answered with its
error; the others in the batch commit. Its changes were held until it returned, or, if it had
to send one first, sent after a savepoint it is rolled back to
(:mod:`lastword.store.sqlite.held`); a batch whose held change SQLite refuses when it is sent
runs again, each write in a savepoint. A failed ``COMMIT`` answers every write of the batch
with :class:`~lastword.errors.Unavailable`: nothing of it was acknowledged.

Folds (:mod:`lastword.store.sql.folds`) are locked by the first write of a batch that uses them and
released after the batch commits (or dropped if it did not); a later write of the same batch
on the same turn finds the lock already held by its batch (:class:`~lastword.store.sql.tx.Holds`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lastword.errors import LastwordError
from lastword.store.sql.batch import BatchWriter, Job
from lastword.store.sql.tx import Holds
from lastword.store.sqlite.driver import SqliteTx, driver_error, is_driver_error
from lastword.store.sqlite.held import BatchRuns, HeldChangeFailed, HeldTx, KnownRuns

log = logging.getLogger(__name__)

#: How a group commit runs one write of its batch: (job, its number, cursor, connection, holds,
#: the rows of the batch's runs).
_RunWrite = Callable[[Job, int, Any, sqlite3.Connection, Holds, BatchRuns], None]


class GroupWriter(BatchWriter):
    """The one writer thread of a SQLite store."""

    def __init__(self, connection: Callable[[], sqlite3.Connection], name: str = "sqlite-writer",
                 *, hold_commit_dir: Path | None = None,
                 committed: Callable[[sqlite3.Connection], None] | None = None,
                 write_lock: Path | None = None) -> None:
        """``committed`` is called on the writer's thread, with its connection, after each batch
        is committed and answered (:mod:`lastword.store.sqlite.checkpoints`).

        ``write_lock`` is a file that other processes writing the same database lock too
        (``lastword serve --workers``): each batch holds it (``flock``) around its transaction.
        SQLite's own wait for another process's write lock is a sleep that backs off (1, 2, 5,
        10 … 100 ms) and polls again; a writer waiting on the file lock is woken by the kernel
        the moment the other one's commit is done. The busy timeout still bounds the wait for
        a writer that does not take the file lock.

        ``hold_commit_dir`` is for tests: while ``hold`` exists in it, the writer stops after
        writing a batch and before its ``COMMIT``, and says so by creating ``paused`` there."""
        super().__init__(name)
        self._connection = connection
        self._committed = committed
        self._hold_dir = hold_commit_dir
        self._write_lock_path = write_lock
        self._write_lock: int | None = None  # its descriptor, opened by the first batch
        #: The runs committed appends left; not when other processes write the file too.
        self._known = KnownRuns() if write_lock is None else None
        self.start()

    def join(self) -> None:
        super().join()
        if self._write_lock is not None:
            os.close(self._write_lock)
            self._write_lock = None

    def _answered(self) -> None:
        if self._committed is not None:
            self._committed(self._connection())

    def _commit(self, batch: list[Job]) -> None:
        try:
            self._transaction(batch, self._run_alone if len(batch) == 1 else self._run_held)
        except HeldChangeFailed as failed:
            log.info("a group commit of %d writes was given up (%s); they run again, each in a savepoint",
                     len(batch), failed.cause)
            self._transaction(batch, self._run_in_savepoint)

    def _transaction(self, batch: list[Job], run: _RunWrite) -> None:
        """One transaction running each write of ``batch`` with ``run``, committed if any succeeded."""
        holds = Holds()
        committed = False
        locked = self._lock_writes()
        try:
            connection = self._connection()
            cursor = connection.cursor()
            connection.execute("BEGIN IMMEDIATE")
            try:
                runs = BatchRuns(cursor, ((job.key, job.ids) for job in batch), self._known)  # reads for two or more
                for number, job in enumerate(batch):
                    run(job, number, cursor, connection, holds, runs)
                if any(job.error is None for job in batch):
                    self._maybe_hold()
                    connection.execute("COMMIT")
                    committed = True
                    if self._known is not None:
                        self._known.committed(runs.written)
            finally:
                if not committed and connection.in_transaction:
                    connection.execute("ROLLBACK")
        except HeldChangeFailed:
            raise  # rolled back: the caller runs the batch again
        except Exception as error:  # a bug is answered as itself rather than leave requests hanging
            self._fail(batch, driver_error(error) if is_driver_error(error) else error)
        finally:
            if locked is not None:
                fcntl.flock(locked, fcntl.LOCK_UN)
            holds.release(committed)
            if not committed and self._known is not None:
                self._known.forget()

    def _lock_writes(self) -> int | None:
        """Take the file lock shared with other processes, if there is one; its descriptor."""
        if self._write_lock_path is None:
            return None
        if self._write_lock is None:
            self._write_lock = os.open(self._write_lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._write_lock, fcntl.LOCK_EX)
        return self._write_lock

    @staticmethod
    def _fail(batch: list[Job], error: BaseException) -> None:
        """Nothing of ``batch`` committed: the writes that had no error of their own get ``error``."""
        for job in batch:
            if job.error is None:
                job.error, job.outcome = error, None

    @staticmethod
    def _run_alone(job: Job, number: int, cursor: Any, connection: sqlite3.Connection, holds: Holds,
                   runs: BatchRuns) -> None:
        """A batch of one: a refusal rolls back the whole transaction, so no savepoint."""
        try:
            job.outcome = job.work(SqliteTx(cursor, str, holds))
        except LastwordError as error:
            job.error = error
        finally:
            runs.ran(job.key)  # what it left is not kept: the next batch reads its run

    @staticmethod
    def _run_held(job: Job, number: int, cursor: Any, connection: sqlite3.Connection, holds: Holds,
                  runs: BatchRuns, *, savepoint: bool = False) -> None:
        """A write of a batch with its changes held back (:mod:`lastword.store.sqlite.held`);
        ``savepoint``: opened before the write runs (a batch run again after a held change failed)."""
        tx = HeldTx(connection, cursor, holds, number, job.key, runs)
        try:
            if savepoint:
                tx.flush()  # nothing held yet: only the savepoint
            job.outcome = job.work(tx)
            tx.complete()
        except HeldChangeFailed:
            raise
        except Exception as error:
            tx.undo()
            job.error, job.outcome = (driver_error(error) if is_driver_error(error) else error), None
        finally:
            runs.ran(job.key, tx.run_after if job.error is None else None)

    @staticmethod
    def _run_in_savepoint(job: Job, number: int, cursor: Any, connection: sqlite3.Connection, holds: Holds,
                          runs: BatchRuns) -> None:
        GroupWriter._run_held(job, number, cursor, connection, holds, runs, savepoint=True)

    def _maybe_hold(self) -> None:
        if self._hold_dir is None or not (self._hold_dir / "hold").exists():
            return
        (self._hold_dir / "paused").touch()
        while (self._hold_dir / "hold").exists():
            time.sleep(0.005)

