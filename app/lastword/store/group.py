"""Group commit: one writer thread commits every write that is pending, in one transaction.

Requests that arrive while a commit is under way queue up; the writer then takes all of them
(up to ``MAX_BATCH``), runs each in turn in one transaction, commits once, and only then
answers each, in the order they ran. So sixteen connections each sending one event cost one
``BEGIN``/``COMMIT`` and one wake-up of the event loop per batch, not sixteen, while every
request is still answered only after its own events are durable.

Writes are handed to the writer thread once per turn of the event loop, not one by one: the
requests whose bytes arrived together run together and submit their writes in the same turn,
and a callback queued behind them hands all of those over at once. Handed over one by one,
the first woke the idle writer, which committed it alone while the others were still being
parsed: at 16 connections batches averaged two writes, most of them one, so nearly every
request paid a commit and a wake-up of the event loop of its own. No write waits for anything
but the callbacks already due in the same turn.

A write that fails (a 409, a bad request) leaves nothing of itself and is answered with its
error; the others in the batch commit. Its changes were held until it returned, or, if it had
to send one first, sent after a savepoint it is rolled back to
(:mod:`lastword.store.sqlite_held`); a batch whose held change SQLite refuses when it is sent
runs again, each write in a savepoint. A failed ``COMMIT`` answers every write of the batch
with :class:`~lastword.errors.Unavailable`: nothing of it was acknowledged.

Folds (:mod:`lastword.store.folds`) are locked by the first write of a batch that uses them and
released after the batch commits (or dropped if it did not); a later write of the same batch
on the same turn finds the lock already held by its batch (:class:`~lastword.store.tx.Holds`).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from lastword.errors import LastwordError, Unavailable
from lastword.store.sqlite_driver import SqliteTx, driver_error, is_driver_error
from lastword.store.sqlite_held import BatchRuns, HeldChangeFailed, HeldTx
from lastword.store.tx import Holds, Tx

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Most writes one transaction takes; past it the rest wait for the next commit.
MAX_BATCH = 512

@dataclass
class Job:
    work: Callable[[Tx], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    key: str | None = None
    #: The eventIds the write looks up in its run's log (``key``), read with the batch's.
    ids: Sequence[str] = ()
    outcome: Any = None
    error: BaseException | None = None


#: How a group commit runs one write of its batch: (job, its number, cursor, connection, holds,
#: the rows of the batch's runs).
_RunWrite = Callable[[Job, int, Any, sqlite3.Connection, Holds, BatchRuns], None]


def _settle(jobs: list[Job]) -> None:
    """Answer each write, in the order they ran (on the event loop)."""
    for job in jobs:
        if job.future.cancelled():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.outcome)


class BatchWriter:
    """One writer thread that takes the writes handed to it a batch at a time.

    What a batch is committed as is the subclass's (:meth:`_commit`): it sets each job's
    ``outcome`` or ``error``; this class answers them, in the order they ran, once it returns.
    """

    def __init__(self, name: str, *, max_batch: int = MAX_BATCH) -> None:
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[list[Job] | None] = queue.SimpleQueue()
        # Writes submitted in the current turn of each event loop, not yet handed over; only
        # that loop's thread touches its entry.
        self._pending: dict[asyncio.AbstractEventLoop, list[Job]] = {}
        #: Set by :meth:`stop`: the thread takes nothing after that, so a write then is refused.
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def submit(self, work: Callable[[Tx], T], key: str | None = None, ids: Sequence[str] = ()) -> T:
        """Run ``work(tx)`` in the next batch; its result once that batch has committed.

        ``key`` names the run whose row ``work`` locks first, for a writer that locks a
        batch's rows up front (:mod:`lastword.store.postgres_group`); ``ids`` the eventIds it
        looks up in that run's log, for a writer that reads a batch's together (SQLite's)."""
        if self._stopped:
            # Closing waits for the writer off the loop, so a request still running may write
            # after the stop: its job would wait behind the thread's end for ever.
            raise Unavailable("the store is closing")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._hand_over, loop)
        pending.append(Job(work, loop, future, key, ids))
        return cast(T, await future)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        jobs = self._pending.pop(loop, None)
        if jobs:
            self._queue.put(jobs)

    def close(self) -> None:
        """Commit what was submitted (called on the event loop, after the last request), then stop."""
        self.stop()
        self.join()

    def stop(self) -> None:
        """Hand over what was submitted and tell the thread to stop after it (on the event loop)."""
        self._stopped = True
        for loop in list(self._pending):
            self._hand_over(loop)
        self._queue.put(None)

    def join(self) -> None:
        """Wait for the thread to commit what it was handed and stop (blocking: not on the loop)."""
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        most = self._max_batch
        waiting: list[Job] = []  # handed over, not yet in a batch (a batch holds ``most`` at most)
        while True:
            if not waiting:
                handed = self._queue.get()
                if handed is None:
                    return
                waiting = handed
            batch, waiting = waiting[:most], waiting[most:]
            stop = False
            while not waiting and len(batch) < most:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                room = most - len(batch)
                batch, waiting = batch + more[:room], more[room:]
            self._commit(batch)
            by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
            for job in batch:
                by_loop.setdefault(job.loop, []).append(job)
            for loop, jobs in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_settle, jobs)
                except RuntimeError:  # the loop closed while its write ran; nobody waits
                    pass
            try:
                self._answered()
            except Exception:  # the batch is answered; the writer must go on
                log.exception("after a commit")
            if stop:
                return

    def _commit(self, batch: list[Job]) -> None:
        """Run and commit ``batch``, setting each job's ``outcome`` or ``error``."""
        raise NotImplementedError

    def _answered(self) -> None:
        """After each batch is committed and answered, on the writer's thread."""


class GroupWriter(BatchWriter):
    """The one writer thread of a SQLite store."""

    def __init__(self, connection: Callable[[], sqlite3.Connection], name: str = "sqlite-writer",
                 *, hold_commit_dir: Path | None = None,
                 committed: Callable[[sqlite3.Connection], None] | None = None,
                 write_lock: Path | None = None) -> None:
        """``committed`` is called on the writer's thread, with its connection, after each batch
        is committed and answered (:mod:`lastword.store.checkpoints`).

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
                runs = BatchRuns(cursor, ((job.key, job.ids) for job in batch))  # reads for two or more
                for number, job in enumerate(batch):
                    run(job, number, cursor, connection, holds, runs)
                if any(job.error is None for job in batch):
                    self._maybe_hold()
                    connection.execute("COMMIT")
                    committed = True
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

    @staticmethod
    def _run_held(job: Job, number: int, cursor: Any, connection: sqlite3.Connection, holds: Holds,
                  runs: BatchRuns, *, savepoint: bool = False) -> None:
        """A write of a batch with its changes held back (:mod:`lastword.store.sqlite_held`);
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
            runs.ran(job.key)

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

