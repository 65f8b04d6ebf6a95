"""Fan-out: how what the store committed reaches this replica's live subscribers and waiters.

One small interface, two implementations, chosen by name when the core is opened
(:mod:`lastword.registry`):

* :class:`LocalFanout` — one process owns the database (SQLite): what a request committed is
  handed to the hub straight after the commit.
* :class:`NoticeFanout` — several replicas share PostgreSQL: the hub is fed only from commit
  notices (:mod:`lastword.fanout.notify`), for this replica's commits as for the others'. Notices
  arrive in commit order; publishing a local commit at once could overtake another replica's
  earlier commit of the same run (or an earlier feed id), which a live stream would then drop
  as already passed.

Either way the hub (:mod:`lastword.fanout.hub`) is what subscribers and waiters register with.
"""

from __future__ import annotations

import abc
import bisect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from lastword.fanout.hub import Hub
from lastword.rules.records import StoredEvent
from lastword.store.notices import Notice, StreamNotice
from lastword.store.protocols import Feed, RunLog
from lastword.store.sql.writes import LIVE_TYPES

if TYPE_CHECKING:
    from lastword.fanout.notify import NoticeListener

#: Where a listener hands each batch of notices, in commit order.
Deliver = Callable[[list[Notice | StreamNotice]], Awaitable[None]]


class Wakeups(Protocol):
    """Who is told what another replica changed: the Durable Streams readers (SPEC §17), parked
    on runs and streams that the hub does not carry. A replica wakes its own readers as it
    commits; these calls bring the other replicas' changes."""

    def run_changed(self, run_id: str) -> None:
        """Run ``run_id``'s log grew."""

    def changed(self, path: str) -> None:
        """The Durable Stream at ``path`` changed."""

    def wake_all(self) -> None:
        """Notices may have been lost: every reader looks again."""


class _Nobody:
    def run_changed(self, run_id: str) -> None:
        pass

    def changed(self, path: str) -> None:
        pass

    def wake_all(self) -> None:
        pass


class Fanout(abc.ABC):
    def __init__(self, hub: Hub, wakeups: Wakeups | None = None) -> None:
        self.hub = hub
        self.wakeups: Wakeups = wakeups or _Nobody()

    @abc.abstractmethod
    def committed(self, stored: Sequence[StoredEvent]) -> None:
        """This replica just committed ``stored`` (the live events of one transaction)."""

    async def start(self) -> None:
        """Begin delivering; returns once nothing committed from now on can be missed."""

    async def close(self) -> None:
        """Stop delivering."""

    @property
    def connected(self) -> bool:
        """Whether other replicas' commits are being heard (always, with no other replica)."""
        return True


class LocalFanout(Fanout):
    """Publish each commit to the hub as it happens: one process, one database file."""

    def committed(self, stored: Sequence[StoredEvent]) -> None:
        if stored:
            self.hub.publish(stored)


class LogReader(Feed, RunLog, Protocol):
    """What the notice fan-out reads: the firehose and the runs' logs."""


class NoticeFanout(Fanout):
    """Publish from commit notices, in commit order, reading the log for the events (PostgreSQL's
    ``NOTIFY``; SQLite's notices table when several processes share the file)."""

    def __init__(self, hub: Hub, store: LogReader, listener: Callable[[Deliver, Callable[[], None]], NoticeListener],
                 wakeups: Wakeups | None = None) -> None:
        """``listener`` makes what hears the notices, given where to deliver them and what to
        call when some were lost (:class:`lastword.fanout.notify.NoticeListener` or one of its kind)."""
        super().__init__(hub, wakeups)
        self.store = store
        self.listener = listener(self.publish, self._resync)

    def _resync(self) -> None:
        self.hub.resync()
        self.wakeups.wake_all()

    def committed(self, stored: Sequence[StoredEvent]) -> None:
        pass  # its notice brings it, in order with every other replica's commits

    async def start(self) -> None:
        await self.listener.start()

    async def close(self) -> None:
        await self.listener.close()

    @property
    def connected(self) -> bool:
        return self.listener.connected

    async def publish(self, received: Sequence[Notice | StreamNotice]) -> None:
        """Publish what a batch of commit notices (from any replica, this one too) committed.

        The events are read from the log, and only for what someone here follows: a run with a
        subscriber or a ``?wait=`` waiter, or the firehose when it has subscribers or a join waits.
        Each run and stream named is also passed on to the Durable Streams readers' wake-ups.
        """
        notices: list[Notice] = []
        for notice in received:
            if isinstance(notice, StreamNotice):
                if notice.path is None:
                    self.wakeups.wake_all()  # a stream whose path did not fit in a notice
                else:
                    self.wakeups.changed(notice.path)
            else:
                notices.append(notice)
        for run_id in {notice.run_id for notice in notices}:
            self.wakeups.run_changed(run_id)
        hub = self.hub
        # A join hears its parent's children by their lifecycle events, which the feed holds.
        wants_feed = hub.has_feed_subscribers or hub.has_child_waiters
        feed_ids = [n.feed_id for n in notices if n.feed_id is not None] if wants_feed else []
        spans: dict[str, list[tuple[int, int, int]]] = {}  # run → (first seq, last seq, notice index)
        for index, notice in enumerate(notices):
            if hub.watches(notice.run_id):
                spans.setdefault(notice.run_id, []).append((notice.first_seq, notice.last_seq, index))
        if not feed_ids and not spans:
            return
        ordered: list[tuple[int, int, StoredEvent]] = []  # (notice index, seq, event)
        if feed_ids:
            # Feed ids commit in id order, so the batch's notices hold every id in this range.
            low, high = min(feed_ids), max(feed_ids)
            by_feed_id = {n.feed_id: index for index, n in enumerate(notices) if n.feed_id is not None}
            for event in await self.store.feed_after(low - 1, None, high - low + 1):
                if event.feed_id is not None and event.feed_id in by_feed_id:
                    ordered.append((by_feed_id[event.feed_id], event.seq, event))
        # Lifecycle events came with the feed when it was read; chunks come from each run's log.
        types = frozenset({"assistant/chunk"}) if feed_ids else LIVE_TYPES
        for run_id, ranges in spans.items():
            # One run's notices come in seq order: its ranges are sorted and do not overlap.
            firsts = [first for first, _, _ in ranges]
            low, high = ranges[0][0], ranges[-1][1]
            for event in await self.store.events_after(run_id, low - 1, high - low + 1, types):
                at = bisect.bisect_right(firsts, event.seq) - 1
                if at >= 0 and event.seq <= ranges[at][1]:
                    ordered.append((ranges[at][2], event.seq, event))
        ordered.sort(key=lambda item: (item[0], item[1]))
        hub.publish(event for _, _, event in ordered)
