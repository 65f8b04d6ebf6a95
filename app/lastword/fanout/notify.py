"""Commit notices between replicas: PostgreSQL ``LISTEN``/``NOTIFY``.

Every transaction that changes a run sends, from inside the transaction, a notice naming the
run, the ``seq`` range and the feed id it committed (:mod:`lastword.store.postgres.store`). PostgreSQL
delivers it to every listening session when the transaction commits, and in commit order. Each
replica listens on one connection of its own and hands the notices, in that order and in
batches, to :meth:`lastword.fanout.local.NoticeFanout.publish`, which reads from the log what its
own subscribers need. A notice carries where to look, never the data: payloads stay tiny, and
a notice that is lost costs latency, not events.

Lost notices are expected and handled: while the listening connection is down (the database
restarted, the backend was terminated) commits go unheard, and a backlog larger than
``max_pending`` is dropped rather than kept in memory. Either way the hub is told to resync:
every subscriber goes back to the log after the last id it sent, every ``?wait=`` waiter
re-reads its result. The connection is re-established by itself, with backoff.

The listener runs on an asynchronous psycopg connection in the event loop (the only place in
the service that does): it waits on a socket and never blocks the loop, so it needs no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from lastword.store.notices import Notice, StreamNotice, parse_notice
from lastword.store.postgres.store import LINK_CHECKS

log = logging.getLogger("lastword")

#: Seconds to connect, or to answer the health check, before the connection counts as lost.
CONNECT_TIMEOUT = 5


class NoticeListener:
    """Listens on ``channel`` and delivers notices in arrival (commit) order, in batches."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        deliver: Callable[[list[Notice | StreamNotice]], Awaitable[None]],
        resync: Callable[[], None],
        *,
        health_interval: float = 10.0,
        max_pending: int = 10_000,
        batch: int = 500,
    ) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self._deliver_batch = deliver
        self._resync = resync
        self.health_interval = health_interval
        self.max_pending = max_pending
        self.batch = batch
        #: Whether the LISTEN is in force (``/readyz`` answers 503 while it is not).
        self.connected = False
        self._pending: deque[Notice | StreamNotice] = deque()
        self._overflowed = False
        self._wake = asyncio.Event()
        self._listening = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, timeout: float = 15.0) -> None:
        """Start listening; returns once the LISTEN is in force, so no commit after it is missed."""
        self._tasks = [
            asyncio.create_task(self._listen(), name="lastword-notice-listener"),
            asyncio.create_task(self._deliver(), name="lastword-notice-delivery"),
        ]
        try:
            await asyncio.wait_for(self._listening.wait(), timeout)
        except TimeoutError:
            await self.close()
            raise RuntimeError(f"could not LISTEN on {self.channel!r} within {timeout} s") from None

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self.connected = False

    # -- listening ---------------------------------------------------------------------

    async def _listen(self) -> None:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import make_conninfo

        delay = 0.05
        heard_before = False
        while True:
            try:
                connecting = psycopg.AsyncConnection.connect(
                    make_conninfo(self.conninfo, **LINK_CHECKS), autocommit=True, connect_timeout=CONNECT_TIMEOUT
                )
                async with await connecting as connection:
                    await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.connected = True
                    delay = 0.05
                    if heard_before:
                        # Commits made while no one listened went unheard: back to the log.
                        log.info("notice connection re-established; subscribers resync from the log")
                        self._resync()
                    heard_before = True
                    self._listening.set()
                    while True:
                        async for notify in connection.notifies(timeout=self.health_interval):
                            self._receive(notify.payload)
                        # Quiet for a while: make sure the connection is still alive (a network
                        # that dropped it without a word would otherwise keep us waiting).
                        await asyncio.wait_for(connection.execute("SELECT 1"), CONNECT_TIMEOUT)
            except Exception as error:  # psycopg.Error, OSError: the connection is gone
                if self.connected:
                    log.warning("lost the notice connection (%s); reconnecting", error)
                self.connected = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _receive(self, payload: str) -> None:
        try:
            notice = parse_notice(payload)
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed notice: %.200r", payload)
            return
        if len(self._pending) >= self.max_pending:
            # Delivery cannot keep up: drop the backlog and let subscribers read the log.
            self._pending.clear()
            self._overflowed = True
        else:
            self._pending.append(notice)
        self._wake.set()

    # -- delivery ----------------------------------------------------------------------

    async def _deliver(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending or self._overflowed:
                if self._overflowed:
                    self._overflowed = False
                    log.warning("notice backlog overflowed; subscribers resync from the log")
                    self._resync()
                    continue
                batch = [self._pending.popleft() for _ in range(min(self.batch, len(self._pending)))]
                try:
                    await self._deliver_batch(batch)
                except Exception:  # a read that failed (the database went away): back to the log
                    log.warning("could not read what %d notices announced; subscribers resync", len(batch),
                                exc_info=True)
                    self._resync()
