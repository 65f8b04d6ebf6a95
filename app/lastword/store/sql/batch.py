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

What a batch is committed as is the backend's: SQLite's :class:`~lastword.store.sqlite.group.GroupWriter`,
PostgreSQL's :class:`~lastword.store.postgres.group.PostgresGroupWriter`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from lastword.errors import Unavailable
from lastword.store.sql.tx import Tx

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
        batch's rows up front (:mod:`lastword.store.postgres.group`); ``ids`` the eventIds it
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
