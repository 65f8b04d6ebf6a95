"""In-process fan-out of freshly committed events to SSE subscribers and result waiters.

The hub only carries what is already durable: the service publishes after the store commits
(and, with several replicas, after a notice that another replica committed). Subscribers
register before they read the log and drop what they already sent by id, so the hand-over
from "replay from the log" to "live" neither loses nor repeats an event.

A subscriber's buffer is bounded. When it fills (the client stops reading), that event and every
later one are dropped for it and it is marked ``behind``: once it has sent what it holds, it
re-reads the log after the last id it sent, so memory stays bounded and nothing is lost.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Iterable

from lastword.rules.lifecycle import RUN_CLOSED, SUBAGENT_END
from lastword.rules.records import StoredEvent


class Subscription:
    """One subscriber's bounded buffer of live events, and its pace: keep-alives and lifetime.

    A deque, one future and one timer, not an ``asyncio.Queue`` and a time-out per wait: an idle
    subscriber is mostly this object, thousands of them sit open at once, and each event wakes
    every one of them. The timer fires once per keep-alive interval, not once per event: it
    looks whether the subscriber has been quiet that long, and re-arms itself from the last
    time it was not.
    """

    __slots__ = ("_items", "_buffer", "_waiter", "types", "parent_run_id", "behind", "ended_by",
                 "_loop", "_timer", "_keepalive", "_deadline", "_active_at", "_ping_due", "expired")

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

    def offer(self, event: StoredEvent) -> None:
        if self.types is not None and event.type not in self.types:
            return
        if self.behind:
            # Once one event is dropped, every later one comes from the log too: queued
            # behind the gap, it would be sent before the dropped one, whose id would then
            # look already sent.
            return
        if len(self._items) >= self._buffer:
            self.behind = True
            self._wake()
            return
        self._items.append(event)
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

    def end(self, reason: str) -> None:
        """Ask the subscriber to tell its client to reconnect, and to stop."""
        self.ended_by = reason
        self._wake()

    def close(self) -> None:
        """The subscriber is gone: stop its timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Hub:
    def __init__(self, buffer: int = 1000) -> None:
        self.buffer = buffer
        self._runs: dict[str, set[Subscription]] = defaultdict(set)
        self._feeds: set[Subscription] = set()
        self._turn_ends: dict[str, set[asyncio.Event]] = defaultdict(set)
        #: Set when the service shuts down: streams say "reconnect" and long polls answer now.
        self.draining = False
        #: Long polls parked now, waiting for a turn end (they have read their turn: not ended).
        self.parked_waiters = 0

    @property
    def subscriber_count(self) -> int:
        return sum(len(subs) for subs in self._runs.values()) + len(self._feeds)

    def watches(self, run_id: str) -> bool:
        """Whether anyone here waits on this run (so a remote notice is worth a read)."""
        return bool(self._runs.get(run_id) or self._turn_ends.get(run_id))

    @property
    def has_feed_subscribers(self) -> bool:
        return bool(self._feeds)

    def subscribe_run(self, run_id: str, types: frozenset[str]) -> Subscription:
        subscription = self._ended_if_draining(Subscription(self.buffer, types))
        self._runs[run_id].add(subscription)
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
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._runs[run_id]

    def publish(self, events: Iterable[StoredEvent]) -> None:
        for event in events:
            for subscription in self._runs.get(event.run_id, ()):
                subscription.offer(event)
            if event.feed_id is not None:
                for subscription in self._feeds:
                    if subscription.parent_run_id in (None, event.parent_run_id):
                        subscription.offer(event)
            if event.type in (SUBAGENT_END, RUN_CLOSED):
                for waiter in self._turn_ends.get(event.run_id, ()):
                    waiter.set()

    def resync(self) -> None:
        """Live events may have been lost (missed notices): every subscriber re-reads the log,
        and every waiter re-reads its result."""
        for subscription in (*self._feeds, *(s for subs in self._runs.values() for s in subs)):
            subscription.resync()
        for waiters in self._turn_ends.values():
            for waiter in waiters:
                waiter.set()

    def drain(self) -> None:
        """Shutting down: every subscriber tells its client to reconnect, every waiter answers."""
        self.draining = True
        for subscription in (*self._feeds, *(s for subs in self._runs.values() for s in subs)):
            subscription.end("shutdown")
        for waiters in self._turn_ends.values():
            for waiter in waiters:
                waiter.set()

    @property
    def result_waiters(self) -> int:
        """How many readers are parked until a turn ends."""
        return sum(len(waiters) for waiters in self._turn_ends.values())

    def turn_end_signal(self, run_id: str, signal: asyncio.Event | None = None) -> asyncio.Event:
        """An event set when any turn of the run ends; call :meth:`release` when done.

        Passing ``signal`` adds the same event to another run, so one waiter hears many runs.
        """
        signal = signal or asyncio.Event()
        self._turn_ends[run_id].add(signal)
        return signal

    def release(self, run_id: str, signal: asyncio.Event) -> None:
        waiters = self._turn_ends.get(run_id)
        if waiters is not None:
            waiters.discard(signal)
            if not waiters:
                del self._turn_ends[run_id]
