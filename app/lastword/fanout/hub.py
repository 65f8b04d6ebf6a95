"""In-process fan-out of freshly committed events to SSE subscribers and result waiters.

The hub only carries what is already durable: the service publishes after the store commits
(and, with several replicas, after a notice that another replica committed). Subscribers
register before they read the log and drop what they already sent by id, so the hand-over
from "replay from the log" to "live" neither loses nor repeats an event.

A subscriber's buffer is bounded. When it fills (the client stops reading), that event and every
later one are dropped for it and it is marked ``behind``: once it has sent what it holds, it
re-reads the log after the last id it sent, so memory stays bounded and nothing is lost.

A subscriber whose stream can write without waiting sets :attr:`Subscription.direct`: while its
stream waits for events, what one :meth:`Hub.publish` brings it is handed to that callable at
the end of the publish, which writes it to the connection at once (one write per subscriber per
publish), instead of waking the stream's task for it. A thousand subscribers then cost a
thousand writes in one pass, not a thousand task wake-ups each doing one. The pass runs within
the publish, before the request that committed answers: measured side by side with a pass
deferred to the loop's next callback, the subscribers' latency at 1,000 was about half, and the
committing request's answer waited for the writes (the end's own answer is not what a
subscriber waits for).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Iterable

from lastword.rules.lifecycle import RUN_CLOSED, SUBAGENT_END
from lastword.rules.records import StoredEvent

log = logging.getLogger(__name__)


class Subscription:
    """One subscriber's bounded buffer of live events, and its pace: keep-alives and lifetime.

    A deque, one future and one timer, not an ``asyncio.Queue`` and a time-out per wait: an idle
    subscriber is mostly this object, thousands of them sit open at once, and each event wakes
    every one of them. The timer fires once per keep-alive interval, not once per event: it
    looks whether the subscriber has been quiet that long, and re-arms itself from the last
    time it was not.
    """

    __slots__ = ("_items", "_buffer", "_waiter", "types", "parent_run_id", "behind", "ended_by",
                 "_loop", "_timer", "_keepalive", "_deadline", "_active_at", "_ping_due", "expired",
                 "direct", "_flushing")

    def __init__(self, buffer: int, types: frozenset[str] | None, parent_run_id: str | None = None) -> None:
        self._items: deque[StoredEvent] = deque()
        self._buffer = buffer
        self._waiter: asyncio.Future[None] | None = None
        self.types = types
        self.parent_run_id = parent_run_id
        self.behind = False
        #: Why the service asks this subscriber to go away (``"shutdown"``), or None.
        self.ended_by: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._keepalive = 0.0
        self._deadline = 0.0
        self._active_at = 0.0
        self._ping_due = False
        #: Set once the subscriber's lifetime is over.
        self.expired = False
        #: Writes the events it is handed now, while the stream waits in :meth:`take`; it removes
        #: from the deque what it wrote (or skipped), and leaves what the stream must see itself.
        self.direct: Callable[[deque[StoredEvent]], None] | None = None
        #: Already in this publish's list of subscribers to flush.
        self._flushing = False

    def pace(self, keepalive: float, lifetime: float) -> None:
        """Wake for a keep-alive after every ``keepalive`` seconds without an event, and for good
        ``lifetime`` seconds from now (:attr:`expired`)."""
        self._loop = loop = asyncio.get_running_loop()
        self._keepalive = keepalive
        self._active_at = now = loop.time()
        self._deadline = now + lifetime
        self._timer = loop.call_at(min(now + keepalive, self._deadline), self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        if now >= self._deadline:
            self._timer = None
            self.expired = True
            self._wake()
            return
        quiet_until = self._active_at + self._keepalive
        if now >= quiet_until:
            self._ping_due = True
            self._wake()
            quiet_until = now + self._keepalive
        self._timer = self._loop.call_at(min(quiet_until, self._deadline), self._tick)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def offer(self, event: StoredEvent) -> bool:
        """Queue ``event``; ``True`` when :meth:`flush` is to be called once the publish is done
        (the first time in a publish that a subscriber with a :attr:`direct` writer queues one)."""
        if self.types is not None and event.type not in self.types:
            return False
        if self.behind:
            # Once one event is dropped, every later one comes from the log too: queued
            # behind the gap, it would be sent before the dropped one, whose id would then
            # look already sent.
            return False
        if len(self._items) >= self._buffer:
            self.behind = True
            self._wake()
            return False
        self._items.append(event)
        if self.direct is None:
            self._wake()
            return False
        if self._flushing:
            return False
        self._flushing = True
        return True

    def flush(self) -> None:
        """Hand what the publish queued to :attr:`direct` if the stream waits for events (so
        nothing it took is still unwritten), and wake the stream for whatever is left."""
        self._flushing = False
        if self.direct is not None and self._waiter is not None and self._items:
            try:
                self.direct(self._items)
            except Exception:
                # Not the publisher's failure (it has committed): the stream's task takes over.
                log.exception("writing a subscriber's events directly failed")
            if not self._items and self._loop is not None:
                self._active_at = self._loop.time()  # not quiet: no keep-alive due yet
                return
        if self._items:
            self._wake()

    async def take(self) -> list[StoredEvent] | None:
        """Every live event that came since the last take, waiting for one if none did; an
        empty list when it is time for a keep-alive; ``None`` when the subscriber fell behind
        (back to the log), was ended, or its lifetime is over."""
        if not (self._items or self._ping_due or self.behind or self.expired or self.ended_by):
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.ended_by is not None or self.expired:
            return None
        if self._items:
            taken = list(self._items)
            self._items.clear()
        elif self.behind:
            return None  # behind, with nothing left to send: back to the log
        else:
            taken = []  # the keep-alive is due
        self._ping_due = False
        if self._loop is not None:
            self._active_at = self._loop.time()
        return taken

    def resync(self) -> None:
        """Send the subscriber back to the log: live events may have been lost."""
        self.behind = True
        self._items.clear()  # the log holds them all, in order
        self._wake()

    def caught_up(self) -> None:
        self.behind = False

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (the follower cannot read the log now), or less if an event or the
        keep-alive timer wakes it first; whether it may go on (the service has not ended it)."""
        if self.ended_by is None and not self.expired:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(seconds, self._wake)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        return self.ended_by is None and not self.expired

    def end(self, reason: str) -> None:
        """Ask the subscriber to tell its client to reconnect, and to stop."""
        self.ended_by = reason
        self._wake()

    def close(self) -> None:
        """The subscriber is gone: stop its timer, and write it nothing more."""
        self.direct = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Waiter:
    """A long poll's ear in the hub: the ends it heard since it last looked, kept in order.

    A waiter is registered before its poll first reads (:meth:`RunService.long_poll`): what
    commits while the read runs is heard here and looked at next, so no end slips between the
    read and the wait. It keeps the events, not just "something happened", so a join can read
    only the child that ended instead of every child again.
    """

    __slots__ = ("run_id", "parent_run_id", "_heard", "_stale", "_woken")

    def __init__(self, run_id: str | None, parent_run_id: str | None) -> None:
        #: Hears every turn end (and close) of this run.
        self.run_id = run_id
        #: Hears every lifecycle event (start, end, close) of the runs naming this one as parent.
        self.parent_run_id = parent_run_id
        self._heard: list[StoredEvent] = []
        self._stale = False
        self._woken = asyncio.Event()

    def hear(self, event: StoredEvent) -> None:
        if not self._stale:
            self._heard.append(event)
        self._woken.set()

    def lost(self) -> None:
        """Events may have gone unheard (missed notices): the poll must look at everything again."""
        self._stale = True
        self._heard.clear()
        self._woken.set()

    def wake(self) -> None:
        """Wake the poll with nothing heard (shutdown: it answers as things stand)."""
        self._woken.set()

    async def next(self, timeout: float) -> list[StoredEvent] | None:
        """What was heard since the last call, waiting up to ``timeout`` seconds for something
        when nothing was; ``None`` when the poll must look at everything again."""
        if not (self._heard or self._stale):
            self._woken.clear()
            try:
                await asyncio.wait_for(self._woken.wait(), timeout)
            except TimeoutError:
                pass
        if self._stale:
            self._stale = False
            return None
        heard, self._heard = self._heard, []
        return heard


class Hub:
    def __init__(self, buffer: int = 1000) -> None:
        self.buffer = buffer
        self._runs: dict[str, set[Subscription]] = defaultdict(set)
        #: Per run, how many of its subscribers take each event type: an event none of them
        #: takes (a chunk, to lifecycle-only streams) is not offered to each of them in turn.
        self._wanted: dict[str, dict[str, int]] = defaultdict(dict)
        self._feeds: set[Subscription] = set()
        self._turn_ends: dict[str, set[Waiter]] = defaultdict(set)
        self._children_of: dict[str, set[Waiter]] = defaultdict(set)
        #: Set when the service shuts down: streams say "reconnect" and long polls answer now.
        self.draining = False
        #: Long polls parked now, waiting for a turn end (they have read their turn: not ended).
        self.parked_waiters = 0

    def has_run_subscribers(self, run_id: str) -> bool:
        """Whether a stream of this run is open here (asked from the store's writer thread too:
        one dictionary read, atomic under the GIL)."""
        return bool(self._runs.get(run_id))

    def watches(self, run_id: str) -> bool:
        """Whether anyone here waits on this run (so a remote notice is worth a read)."""
        return bool(self._runs.get(run_id) or self._turn_ends.get(run_id))

    @property
    def has_feed_subscribers(self) -> bool:
        return bool(self._feeds)

    @property
    def has_child_waiters(self) -> bool:
        """Whether a join waits here on some parent's children (it hears their lifecycle events)."""
        return bool(self._children_of)

    def subscribe_run(self, run_id: str, types: frozenset[str]) -> Subscription:
        subscription = self._ended_if_draining(Subscription(self.buffer, types))
        self._runs[run_id].add(subscription)
        wanted = self._wanted[run_id]
        for type_ in types:
            wanted[type_] = wanted.get(type_, 0) + 1
        return subscription

    def subscribe_feed(self, parent_run_id: str | None) -> Subscription:
        subscription = self._ended_if_draining(Subscription(self.buffer, None, parent_run_id))
        self._feeds.add(subscription)
        return subscription

    def _ended_if_draining(self, subscription: Subscription) -> Subscription:
        # A stream that got past the route's check as the drain began: told to reconnect too.
        if self.draining:
            subscription.end("shutdown")
        return subscription

    def unsubscribe(self, run_id: str | None, subscription: Subscription) -> None:
        subscription.close()
        if run_id is None:
            self._feeds.discard(subscription)
            return
        subscribers = self._runs.get(run_id)
        if subscribers is not None and subscription in subscribers:
            subscribers.remove(subscription)
            wanted = self._wanted[run_id]
            for type_ in subscription.types or ():
                wanted[type_] -= 1
            if not subscribers:
                del self._runs[run_id]
                del self._wanted[run_id]

    def publish(self, events: Iterable[StoredEvent], *, runs: bool = True, feed: bool = True) -> None:
        """Hand ``events`` to whoever here waits on them: with ``runs``, the run streams and turn-end
        waiters of their runs; with ``feed``, the firehose streams and joins. A fan-out that reads
        a run's log and the firehose apart (:mod:`lastword.fanout.cursors`) publishes each read to
        its side only: the two reads advance in different orders."""
        flush: list[Subscription] = []
        for event in events:
            if runs:
                subscribers = self._runs.get(event.run_id)
                if subscribers and self._wanted[event.run_id].get(event.type):
                    for subscription in subscribers:
                        if subscription.offer(event):
                            flush.append(subscription)
                if event.type in (SUBAGENT_END, RUN_CLOSED):
                    for waiter in self._turn_ends.get(event.run_id, ()):
                        waiter.hear(event)
            if feed and event.feed_id is not None:
                for subscription in self._feeds:
                    if subscription.parent_run_id in (None, event.parent_run_id) and subscription.offer(event):
                        flush.append(subscription)
                if event.parent_run_id is not None:
                    for waiter in self._children_of.get(event.parent_run_id, ()):
                        waiter.hear(event)
        for subscription in flush:
            subscription.flush()

    def resync_run(self, run_id: str, *, waiters: bool = False) -> None:
        """One run's live events were not all published: its subscribers re-read the log (and,
        with ``waiters``, the polls waiting on its turn end re-read their result)."""
        for subscription in self._runs.get(run_id, ()):
            subscription.resync()
        if waiters:
            for waiter in self._turn_ends.get(run_id, ()):
                waiter.lost()

    def resync_feed(self) -> None:
        """The firehose's live events were not all published: its subscribers re-read the log, and
        the joins waiting on children look at them again."""
        for subscription in self._feeds:
            subscription.resync()
        for waiters in self._children_of.values():
            for waiter in waiters:
                waiter.lost()

    def watched_runs(self) -> list[str]:
        """The runs someone here waits on: a stream or a turn-end poll."""
        return list({*self._runs, *self._turn_ends})

    def resync(self) -> None:
        """Live events may have been lost (missed notices): every subscriber re-reads the log,
        and every waiter re-reads its result."""
        for subscription in (*self._feeds, *(s for subs in self._runs.values() for s in subs)):
            subscription.resync()
        for waiter in self._waiters():
            waiter.lost()

    def drain(self) -> None:
        """Shutting down: every subscriber tells its client to reconnect, every waiter answers."""
        self.draining = True
        for subscription in (*self._feeds, *(s for subs in self._runs.values() for s in subs)):
            subscription.end("shutdown")
        for waiter in self._waiters():
            waiter.wake()

    def _waiters(self) -> list[Waiter]:
        return [w for by_run in (self._turn_ends, self._children_of) for ws in by_run.values() for w in ws]

    @property
    def result_waiters(self) -> int:
        """How many long polls are registered to hear turn ends."""
        return sum(len(waiters) for waiters in self._turn_ends.values()) + sum(
            len(waiters) for waiters in self._children_of.values())

    def listen(self, *, run_id: str | None = None, parent_run_id: str | None = None) -> Waiter:
        """A waiter hearing ``run_id``'s turn ends, or the lifecycle events of ``parent_run_id``'s
        children; call :meth:`unlisten` when done."""
        waiter = Waiter(run_id, parent_run_id)
        if run_id is not None:
            self._turn_ends[run_id].add(waiter)
        if parent_run_id is not None:
            self._children_of[parent_run_id].add(waiter)
        return waiter

    def unlisten(self, waiter: Waiter) -> None:
        if waiter.run_id is not None:
            self._forget(self._turn_ends, waiter.run_id, waiter)
        if waiter.parent_run_id is not None:
            self._forget(self._children_of, waiter.parent_run_id, waiter)

    @staticmethod
    def _forget(by_run: dict[str, set[Waiter]], run_id: str, waiter: Waiter) -> None:
        waiters = by_run.get(run_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del by_run[run_id]
