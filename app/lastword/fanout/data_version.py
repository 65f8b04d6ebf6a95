"""Commit notices between the processes sharing one SQLite file (``lastword serve --workers N``).

SQLite has no ``NOTIFY``, and the workers have no server of their own to tell each other
through. What they share is the file: with notices on (:class:`lastword.store.sqlite.store.SqliteStore`
``notices=True``), every writing transaction also inserts its commit notice — the same payload
PostgreSQL sends (:mod:`lastword.store.notices`) — into the ``commit_notices`` table, in the
same transaction, so a notice exists exactly when its commit does, and the table's ids are in
commit order (SQLite has one writer at a time).

Each worker watches ``PRAGMA data_version`` on a connection of its own, in a thread: the number
changes when another connection commits to the file (this worker's writer or another worker's),
and reading it costs no I/O. When it changed, the watcher reads the notices after the last one
it has seen and hands them, in order, to :class:`lastword.fanout.local.NoticeFanout`, which
publishes them exactly as it does PostgreSQL's: it reads from the log only what this worker's
subscribers follow (the firehose after the feed ids named, each watched run's log in the seq
ranges named), wakes the Durable Streams readers of each run and stream named, and every
worker — this one too — publishes in commit order. The notices say which runs and streams
changed: without them a chunk committed to an unwatched run, or a ``/ds`` append, would leave
the watcher no way to tell whom to wake but all of them.

The watcher looks every :data:`WATCH_SECONDS` while commits come, and at once when this worker's
own writes commit (:meth:`DataVersionFanout.committed`). Once it has seen none for a while
(:class:`WatchPace`) it waits for the kernel to say a file of the database was written
(:class:`lastword.fanout.file_watch.FileWatch`), looking only every :data:`SAFETY_LOOK_SECONDS`
otherwise; where the kernel cannot say, it looks every :data:`IDLE_WATCH_SECONDS`. Another
worker's commit reaches a subscriber here within a millisecond while commits come, at its write
after a quiet spell, plus a read of the log. A notice is a few dozen bytes; the watchers keep the
newest :data:`KEEP_NOTICES` and delete older ones. A watcher that finds the notices after its
last one gone (it fell that far behind) or cannot read them resyncs the hub and wakes every
reader: they read the log after their last ids, which loses nothing and sends nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence

from lastword.fanout.file_watch import FileWatch
from lastword.fanout.hub import Hub
from lastword.fanout.local import Deliver, NoticeFanout, Wakeups
from lastword.fanout.notify import NoticeListener
from lastword.rules.records import StoredEvent
from lastword.store.sqlite.store import BUSY_SECONDS, SqliteStore

log = logging.getLogger("lastword")

#: How often the watcher looks whether another process committed, while commits come...
WATCH_SECONDS = 0.001
#: ...and for how long after the last one it saw...
HOT_SECONDS = 0.05
#: ...after which the wait doubles up to this where the kernel does not tell of writes. Looking
#: every millisecond for ever, two idle workers spent a tenth of a core (the look's thread takes
#: the GIL a thousand times a second); such a worker looks 50 times a second when idle, and the
#: first commit of another worker after a quiet spell reaches a subscriber here up to this much
#: later. Its own commits wake it at once.
IDLE_WATCH_SECONDS = 0.02
#: Where the kernel tells of writes, the idle wait doubles up to this instead and ends at a
#: write: the look that would find a commit comes at its write, and the idle worker looks once
#: a second only in case a write went untold (none is expected: a commit is a write).
SAFETY_LOOK_SECONDS = 1.0
#: Notices kept in the file; older ones are deleted (a watcher this far behind resyncs).
KEEP_NOTICES = 100_000
#: Notices read at a time.
READ_BATCH = 5_000


class WatchPace:
    """The wait before the watcher's next look: :data:`WATCH_SECONDS` while commits come, then,
    once none has come for :data:`HOT_SECONDS`, doubling up to ``idle`` — or at once ``idle``
    when ``jump`` (a write ends the wait: there is nothing to gain by looking in between)."""

    def __init__(self, idle: float = IDLE_WATCH_SECONDS, *, jump: bool = False) -> None:
        self._quiet = 0.0  # the waits since the last look that saw a commit
        self._wait = WATCH_SECONDS
        self.idle = idle
        self._jump = jump

    def next(self, *, changed: bool) -> float:
        """The wait after a look; ``changed``: that look saw a commit."""
        if changed:
            self._quiet, self._wait = 0.0, WATCH_SECONDS
            return self._wait
        if self._quiet >= HOT_SECONDS:
            self._wait = self.idle if self._jump else min(self._wait * 2, self.idle)
        self._quiet += self._wait
        return self._wait


class DataVersionListener(NoticeListener):
    """Hears the commits to the SQLite file at ``path`` from its notices table (see the module)."""

    def __init__(self, path: str, deliver: Deliver, resync: Callable[[], None], *,
                 keep: int = KEEP_NOTICES) -> None:
        super().__init__(path, "commit_notices", deliver, resync)
        self.path = path
        self.keep = keep
        self._watch_files = FileWatch(os.path.dirname(os.path.abspath(path)))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set while the watcher waits its longest (idle: no commit for a while).
        self.resting = threading.Event()

    def look(self) -> None:
        """Look now rather than at the next interval (this process just committed)."""
        self._watch_files.poke()

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._watch, args=(loop,), name="lastword-data-version", daemon=True)
        self._thread.start()
        await asyncio.Event().wait()  # the thread does the work; close() stops it

    async def close(self) -> None:
        self._stop.set()
        self._watch_files.poke()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        self._watch_files.close()
        await super().close()

    # -- the watcher's thread ----------------------------------------------------------

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        delay = 0.05
        last_id: int | None = None  # the last notice handed over; None: not yet known
        while not self._stop.is_set():
            try:
                connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                try:
                    connection.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000:.0f}")
                    last_id = self._follow(connection, loop, last_id)
                finally:
                    connection.close()
            except sqlite3.Error as error:
                self.connected = False
                log.warning("could not read the commit notices (%s); subscribers resync from the log", error)
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)
                # What was committed meanwhile may have gone unheard.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._lost)

    def _follow(self, connection: sqlite3.Connection, loop: asyncio.AbstractEventLoop, last_id: int | None) -> int:
        """Hand over every notice after ``last_id`` as it commits, until stopped; the last id handed."""
        version = connection.execute("PRAGMA data_version").fetchone()[0]
        if last_id is None:
            # Starting: what committed before is in the log, for whoever reads it.
            last_id = connection.execute("SELECT COALESCE(MAX(id), 0) FROM commit_notices").fetchone()[0]
        else:
            last_id = self._read(connection, loop, last_id)  # after a failure: catch up
        self.connected = True
        loop.call_soon_threadsafe(self._listening.set)
        deleted_below = 0
        files = self._watch_files
        if files.sees_writes:
            pace = WatchPace(SAFETY_LOOK_SECONDS, jump=True)
        else:
            pace = WatchPace(IDLE_WATCH_SECONDS)
        wait = WATCH_SECONDS
        while not self._stop.is_set():
            # While commits come the pace says when to look (waking at every write would look
            # more often than that, each commit being several); once they stop, a write does.
            if wait == pace.idle:
                self.resting.set()
            woken = files.wait(wait, writes=wait > WATCH_SECONDS)
            self.resting.clear()
            # A write is counted as a commit seen, but is not looked at by itself: a commit
            # writes its pages to the -wal file before it publishes them in the -shm index
            # (written through a memory map, which the kernel does not report), so a look at
            # the write would come too early, and, when the commit is this worker's own, would
            # take the GIL from the writer in the middle of it (same-worker delivery was
            # 0.4 ms slower for it). The looks every millisecond that follow see it; this
            # worker's own commit pokes at once.
            if woken.written and not woken.poked and wait > WATCH_SECONDS:
                wait = pace.next(changed=True)
                continue
            now = connection.execute("PRAGMA data_version").fetchone()[0]
            wait = pace.next(changed=now != version or woken.written)
            if now == version:
                continue
            version = now  # read before the notices: a commit after this read changes it again
            last_id = self._read(connection, loop, last_id)
            if last_id - deleted_below >= self.keep + self.keep // 10:
                deleted_below = last_id - self.keep
                connection.execute("DELETE FROM commit_notices WHERE id <= ?", (deleted_below,))
        return last_id

    def _read(self, connection: sqlite3.Connection, loop: asyncio.AbstractEventLoop, last_id: int) -> int:
        while True:
            rows = connection.execute(
                "SELECT id, payload FROM commit_notices WHERE id > ? ORDER BY id LIMIT ?", (last_id, READ_BATCH)
            ).fetchall()
            if not rows:
                return last_id
            gap = rows[0][0] != last_id + 1  # deleted before this watcher read them
            loop.call_soon_threadsafe(self._arrived, [payload for _, payload in rows], gap)
            last_id = rows[-1][0]
            if len(rows) < READ_BATCH:
                return last_id

    # -- on the event loop ---------------------------------------------------------------

    def _arrived(self, payloads: list[str], gap: bool) -> None:
        if gap:
            self._lost()
        for payload in payloads:
            self._receive(payload)

    def _lost(self) -> None:
        # Delivery resyncs before it hands over what arrives after this.
        self._pending.clear()
        self._overflowed = True
        self._wake.set()


class DataVersionFanout(NoticeFanout):
    """Publish from the notices in the SQLite file, in commit order (see the module)."""

    def __init__(self, hub: Hub, store: SqliteStore, wakeups: Wakeups | None = None) -> None:
        path = store.path
        super().__init__(hub, store, lambda deliver, resync: DataVersionListener(path, deliver, resync), wakeups)

    def committed(self, stored: Sequence[StoredEvent]) -> None:
        # Its notice brings it, in order with the other workers' commits: look for it now.
        listener = self.listener
        if isinstance(listener, DataVersionListener):
            listener.look()
