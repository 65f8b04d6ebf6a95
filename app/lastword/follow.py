"""Following a log live: the catch-up every streaming face shares.

A follower of one run's events or of the firehose works in one order: it registers with the hub
first (the face does, before it answers, so nothing committed after the answer's headers is
missed), then reads the log after its resume point page by page, then takes live events,
dropping any the log already gave. A follower that fell behind (its bounded hub buffer filled)
goes back to the log instead of being fed from memory, and one the service ends (shutdown, the
client left, the connection's lifetime) says so last with the id to resume after.

Nothing here knows the wire: the face gives a :class:`Framing` that turns an event and its id
into bytes (SSE for ``/v1/runs/{id}/stream`` and ``/v1/stream``), so another face (WebSocket,
gRPC) frames the same catch-up its own way. The bytes are what the hub's direct writer needs: an
event reaching a waiting follower is framed and written at once, without waking its task.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass

from lastword.errors import Unavailable
from lastword.fanout.hub import Subscription
from lastword.rules.lifecycle import closes_run_stream
from lastword.rules.records import RunRecord, StoredEvent
from lastword.service import RunService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Framing:
    """How a face writes what a follower yields."""

    #: An event under its id (the run's ``seq`` or the firehose's own order).
    event: Callable[[StoredEvent, int], bytes]
    #: Said when the follower has been quiet for the keep-alive period.
    keepalive: bytes
    #: The last words of a follow the service ends: why, and the last id sent.
    ended: Callable[[str, int], bytes]


def _cannot_write(_chunk: bytes) -> bool:
    return False


class Cursor:
    """A follower's place (the last id it sent) and its rule for which events end it; also what
    the hub hands events to while the follower waits (:attr:`Subscription.direct`), so that they
    are written at once instead of waking the follower's task."""

    __slots__ = ("last", "write_now", "closed", "_id_of", "_closes", "_frame")

    def __init__(self, last: int, id_of: Callable[[StoredEvent], int], closes: Callable[[StoredEvent], bool],
                 frame: Callable[[StoredEvent, int], bytes]) -> None:
        self.last = last
        #: The face's writer that never waits (it answers whether it wrote), once it has one.
        self.write_now: Callable[[bytes], bool] = _cannot_write
        #: An event closed the follow (it was the last one sent).
        self.closed = False
        self._id_of = id_of
        self._closes = closes
        self._frame = frame

    def closes(self, event: StoredEvent) -> bool:
        """Whether ``event`` is the last this follow sends."""
        return self._closes(event)

    def messages(self, events: Iterable[StoredEvent], *, before_close: bool) -> tuple[bytes, int, int, bool]:
        """The framed events of ``events`` not sent yet, joined; how many events they cover; the
        last id among them; whether the follow closes with them. An event that closes it ends
        them, or, ``before_close``, is left out (with what follows it)."""
        last = self.last
        parts = []
        count = 0
        closes = False
        for event in events:
            message_id = self._id_of(event)
            if message_id > last:
                if self._closes(event):
                    if before_close:
                        break
                    closes = True
                parts.append(self._frame(event, message_id))
                last = message_id
            count += 1
            if closes:
                break
        return b"".join(parts), count, last, closes

    def deliver(self, events: deque[StoredEvent]) -> None:
        """Write what the hub hands over while the follower waits, and drop it from ``events``;
        leave it there for the follower's task when it cannot be written now, or closes the follow."""
        if len(events) == 1:
            # What most publishes bring (a turn's start or end, one commit's lifecycle event),
            # to every follower of the run in turn: its framed bytes as they are, no join.
            event = events[0]
            message_id = self._id_of(event)
            if message_id > self.last:
                if self._closes(event) or not self.write_now(self._frame(event, message_id)):
                    return
                self.last = message_id
            events.popleft()
            return
        chunk, count, last, _ = self.messages(events, before_close=True)
        if chunk and not self.write_now(chunk):
            return
        self.last = last
        for _ in range(count):
            events.popleft()

    async def live(self, subscription: Subscription, keepalive: bytes) -> AsyncGenerator[bytes, None]:
        """Live events, until the buffer overflows (the log takes over again), the follow is
        ended, or an event closes it (:attr:`closed` tells). What one wake-up finds goes out
        in one write; while the follower waits, the hub writes what comes directly."""
        subscription.direct = self.deliver
        try:
            while (taken := await subscription.take()) is not None:
                if not taken:
                    yield keepalive
                    continue
                chunk, _, self.last, closes = self.messages(taken, before_close=False)
                if chunk:
                    yield chunk
                if closes:
                    self.closed = True
                    return
        finally:
            subscription.direct = None


def _seq(event: StoredEvent) -> int:
    return event.seq


def _feed_id(event: StoredEvent) -> int:
    assert event.feed_id is not None
    return event.feed_id


def _never(_event: StoredEvent) -> bool:
    return False


def _ended(subscription: Subscription) -> str | None:
    """Why the service ends this follow now: shutdown, the client left, or the connection's
    lifetime is over."""
    if subscription.ended_by is not None:
        return subscription.ended_by
    return "lifetime" if subscription.expired else None


def run_cursor(run: RunRecord, after: int, framing: Framing) -> Cursor:
    """A cursor on one run's log after ``after``, closed by the event that ends the run's stream
    (the run's end, or the turn's in ``mode`` "turn")."""
    mode = run.mode
    return Cursor(after, _seq, lambda event: closes_run_stream(event.type, mode), framing.event)


def feed_cursor(after: int, framing: Framing) -> Cursor:
    """A cursor on the firehose after ``after``: it never closes by itself."""
    return Cursor(after, _feed_id, _never, framing.event)


async def _store_away(subscription: Subscription, error: Unavailable, waiting: bool, what: str) -> bool:
    """Wait a moment before the log is read again, the store being away (a database restart or
    failover): whether the follow may go on. The client's connection is kept, and what was
    committed meanwhile comes from the log when the store is back, so an outage costs a stream
    nothing but the wait. Said once per outage (``waiting``: said already)."""
    if not waiting:
        log.info("%s waits for the store to read its log: %s", what, error.detail)
    return await subscription.pause(float(error.retry_after or 1))


async def _run_log(
    service: RunService, subscription: Subscription, run_id: str, cursor: Cursor, framing: Framing,
    types: frozenset[str],
) -> AsyncGenerator[bytes, None]:
    """The run's log after the cursor, page by page, until an event closes the follow
    (:attr:`Cursor.closed`) or the log has no more."""
    while subscription.ended_by is None:
        events = await service.reads.events_after(run_id, cursor.last, service.page_size, types)
        for event in events:
            yield framing.event(event, event.seq)
            cursor.last = event.seq
            if cursor.closes(event):
                cursor.closed = True
                return
        if len(events) < service.page_size:
            return


async def follow_run(
    service: RunService, subscription: Subscription, run: RunRecord, cursor: Cursor, framing: Framing,
    types: frozenset[str],
) -> AsyncGenerator[bytes, None]:
    """One run's events of ``types`` after the cursor, from the log and then live, until an event
    closes the follow, the run has ended and all of it was sent, or the service ends it. While
    the store cannot be read, the follow waits for it (:func:`_store_away`)."""
    waiting = False
    while True:
        # Cleared before the log is read: an overflow from now on sends us back here.
        subscription.caught_up()
        try:
            async with contextlib.aclosing(_run_log(service, subscription, run.run_id, cursor, framing, types)) as pages:
                async for chunk in pages:
                    yield chunk
            if cursor.closed:
                return
            run = await service.reads.get_run(run.run_id)
        except Unavailable as error:
            if await _store_away(subscription, error, waiting, f"the stream of run {run.run_id}"):
                waiting = True
                yield framing.keepalive
                continue
        else:
            waiting = False
            if run.status == "ended" and cursor.last >= run.last_seq:
                return
            async with contextlib.aclosing(cursor.live(subscription, framing.keepalive)) as live:
                async for chunk in live:
                    yield chunk
            if cursor.closed:
                return
        if ended := _ended(subscription):
            yield framing.ended(ended, cursor.last)
            return


async def _feed_log(
    service: RunService, subscription: Subscription, parent_run_id: str | None, cursor: Cursor, framing: Framing,
) -> AsyncGenerator[bytes, None]:
    """The firehose's log after the cursor, page by page, until it has no more."""
    while subscription.ended_by is None:
        events = await service.reads.feed_after(cursor.last, parent_run_id, service.page_size)
        for event in events:
            feed_id = _feed_id(event)
            yield framing.event(event, feed_id)
            cursor.last = feed_id
        if len(events) < service.page_size:
            return


async def follow_feed(
    service: RunService, subscription: Subscription, parent_run_id: str | None, cursor: Cursor, framing: Framing,
) -> AsyncGenerator[bytes, None]:
    """The firehose after the cursor (one parent's children with ``parent_run_id``), from the log
    and then live, until the service ends the follow; it waits for the store as
    :func:`follow_run` does."""
    waiting = False
    while True:
        subscription.caught_up()
        try:
            async with contextlib.aclosing(_feed_log(service, subscription, parent_run_id, cursor, framing)) as pages:
                async for chunk in pages:
                    yield chunk
        except Unavailable as error:
            if await _store_away(subscription, error, waiting, "the firehose"):
                waiting = True
                yield framing.keepalive
                continue
        else:
            waiting = False
            async with contextlib.aclosing(cursor.live(subscription, framing.keepalive)) as live:
                async for chunk in live:
                    yield chunk
        if ended := _ended(subscription):
            yield framing.ended(ended, cursor.last)
            return
