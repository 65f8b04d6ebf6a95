"""Publishing from the log at cursors, on wake-ups that say only where to look.

A wake-up carried outside the database (NATS, :mod:`lastword.fanout.nats`) is published by the
replica that committed, after its commit: two replicas' wake-ups for one run may arrive in
either order, one may arrive twice, and one may never arrive (its replica died between its
commit and the publish, or this replica was cut off). So a wake-up is never trusted for what
it names, only for *whom*: "run R changed", "the firehose grew". This module keeps, per run
someone here follows, the last ``seq`` it published (a cursor), and one for the firehose; a
wake-up reads the log after the cursor, publishes what it finds in log order and moves the
cursor. The log is the order: a run's ``seq``\\ s commit in order (its row lock), and feed ids
become visible in id order (:mod:`lastword.store.postgres.store`), so a read after a cursor never
skips what commits later.

A run gets its cursor on the first wake-up after someone here began to follow it: its
``last_seq`` then, with its subscribers and waiters sent back to the log once (they registered
before they read it, so the log holds everything up to the cursor for them, and every later
commit wakes the cursor). The firehose likewise, from its last id. A cursor is dropped once no
one follows its run. :meth:`CursorPublisher.wake_all` reads after every cursor (a replica that
was cut off from its wake-ups catches up from the log), and so does a sweep every few seconds
when asked for: a wake-up its replica never sent (it died between its commit and the publish)
then costs that long, not a stream that waits for ever.

The hub gets a run's events as its streams and turn-end waiters' (``runs``), the firehose's as
its streams' and joins' (``feed``): a lifecycle event is in both logs, and each side's order is
its own log's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from lastword.errors import NotFound
from lastword.fanout.hub import Hub
from lastword.store.protocols import Feed, RunLog
from lastword.store.sql.writes import LIVE_TYPES

log = logging.getLogger("lastword")

#: Events read from the log at a time.
PAGE = 1000


class CursorLog(Feed, RunLog, Protocol):
    """What the cursors read: runs' logs and records, and the firehose."""


class CursorPublisher:
    """Reads the log after its cursors when woken, and hands the hub what it finds (see the module)."""

    def __init__(self, hub: Hub, store: CursorLog, *, sweep_seconds: float | None = None) -> None:
        """``sweep_seconds``: read after every cursor this often too, whether woken or not (a
        wake-up that was never sent is then late by at most that long); None: only when woken."""
        self.hub = hub
        self.store = store
        self.sweep_seconds = sweep_seconds
        self._runs: dict[str, int] = {}  # run → last seq published
        self._feed: int | None = None  # last feed id published
        self._woken_runs: set[str] = set()
        self._feed_woken = False
        self._all_woken = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sweep: asyncio.Task[None] | None = None
        #: Set after each pass that found nothing more to read (for tests and benches).
        self.idle = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lastword-wakeups")
        if self.sweep_seconds is not None:
            self._sweep = asyncio.create_task(self._sweeping(self.sweep_seconds), name="lastword-wakeup-sweep")

    async def close(self) -> None:
        for task in (self._task, self._sweep):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._sweep = None

    async def _sweeping(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            if self._runs or self.hub.watched_runs() or self.hub.has_feed_subscribers or self.hub.has_child_waiters:
                self.wake_all()

    def wake_run(self, run_id: str) -> None:
        """Run ``run_id``'s log grew (or may have)."""
        if self.hub.watches(run_id):
            self._woken_runs.add(run_id)
            self._wake.set()
        elif run_id in self._runs:
            del self._runs[run_id]  # nobody here follows it any more

    def wake_feed(self) -> None:
        """The firehose grew (or may have)."""
        self._feed_woken = True
        self._wake.set()

    def wake_all(self) -> None:
        """Wake-ups may have been lost: read after every cursor."""
        self._all_woken = True
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self.idle.clear()
            runs, self._woken_runs = self._woken_runs, set()
            feed, self._feed_woken = self._feed_woken, False
            if self._all_woken:
                self._all_woken = False
                runs |= {*self._runs, *self.hub.watched_runs()}
                feed = True
                for run_id in [run for run in self._runs if not self.hub.watches(run)]:
                    del self._runs[run_id]
            try:
                for run_id in runs:
                    await self._read_run(run_id)
                if feed:
                    await self._read_feed()
            except Exception:  # the database went away: when it is back, everyone reads the log
                log.warning("could not read what a wake-up announced; subscribers resync", exc_info=True)
                self._runs.clear()
                self._feed = None
                self.hub.resync()
            if not self._wake.is_set():
                self.idle.set()

    async def _read_run(self, run_id: str) -> None:
        hub = self.hub
        if not hub.watches(run_id):
            self._runs.pop(run_id, None)
            return
        cursor = self._runs.get(run_id)
        if cursor is None:
            try:
                record = await self.store.get_run(run_id)
            except NotFound:
                return  # deleted (retention), or a wake-up of another deployment's
            self._runs[run_id] = record.last_seq
            hub.resync_run(run_id, waiters=True)
            return
        while True:
            events = await self.store.events_after(run_id, cursor, PAGE, LIVE_TYPES)
            if events:
                hub.publish(events, feed=False)
                cursor = events[-1].seq
            if len(events) < PAGE:
                break
        if hub.watches(run_id):
            self._runs[run_id] = cursor
        else:
            self._runs.pop(run_id, None)

    async def _read_feed(self) -> None:
        hub = self.hub
        if not (hub.has_feed_subscribers or hub.has_child_waiters):
            self._feed = None
            return
        if self._feed is None:
            self._feed = await self.store.last_feed_id()
            hub.resync_feed()
            return
        cursor = self._feed
        while True:
            events = await self.store.feed_after(cursor, None, PAGE)
            if events:
                hub.publish(events, runs=False)
                last = events[-1].feed_id
                assert last is not None  # the feed's events have their ids
                cursor = last
            if len(events) < PAGE:
                break
        self._feed = cursor
