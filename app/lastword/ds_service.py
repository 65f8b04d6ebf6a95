"""The Durable Streams use cases (SPEC §17): what ``/ds/`` asks of the store, and live waits.

Every write is one store transaction (:mod:`lastword.store.ds`); once it commits, the readers
parked on that stream here are woken and read the log again. A reader never takes data from the
wake-up itself, only from the log, so a wake-up lost or repeated costs a read, never an entry.

Across replicas (PostgreSQL) a commit on another replica wakes nobody here; parked readers
then look at the log every ``poll_seconds`` as well. This diverges on purpose from the runs'
commit notices (:mod:`lastword.fanout.notify`): a stream's wake-up would need its own notice
kind, and a bounded delay is what the protocol's long-poll and SSE allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict
from collections.abc import Callable

from lastword.rules import ds
from lastword.rules.ds import AppendRequest, CreateRequest, Outcome, Slice
from lastword.store.base import Store

#: About how much one read answers; a longer stream is read in several.
READ_BYTES = 1024 * 1024


class StreamService:
    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time,
                 poll_seconds: float | None = None) -> None:
        self._store = store
        self.clock = clock
        self.poll_seconds = poll_seconds
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        #: Set when the service shuts down: live reads answer now.
        self.draining = False

    def _changed(self, path: str) -> None:
        for waiter in self._waiters.get(path, ()):
            waiter.set()

    def drain(self) -> None:
        self.draining = True
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    async def create(self, request: CreateRequest) -> Outcome:
        outcome = await self._store.ds_create(request, self.clock())
        self._changed(request.path)
        return outcome

    async def append(self, request: AppendRequest) -> Outcome:
        outcome = await self._store.ds_append(request, self.clock())
        self._changed(request.path)
        return outcome

    async def delete(self, path: str) -> None:
        await self._store.ds_delete(path, self.clock())
        self._changed(path)

    async def head(self, path: str) -> Slice:
        """The stream's state (no entries; a HEAD does not reset a sliding TTL)."""
        return await self._store.ds_read(path, ds.NOW, self.clock(), 0)

    async def read(self, path: str, position: int | str, *, touch: bool = True) -> Slice:
        """The entries after ``position``; a read resets a sliding TTL."""
        found = await self._store.ds_read(path, position, self.clock(), READ_BYTES)
        if touch and found.state.ttl is not None:
            await self._store.ds_touch(path, self.clock())
        return found

    async def wait(self, path: str, position: int, timeout: float, waiter: asyncio.Event | None = None) -> Slice:
        """The entries after ``position`` once there are some, the stream is closed, or
        ``timeout`` seconds have passed (then an empty slice). Setting ``waiter`` (the caller's
        own, when it gives one) ends the wait early too, with whatever the log then holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waiter = waiter or asyncio.Event()
        self._waiters[path].add(waiter)
        try:
            while True:
                woken = waiter.is_set()
                waiter.clear()
                found = await self._store.ds_read(path, position, self.clock(), READ_BYTES)
                left = deadline - loop.time()
                if found.entries or found.state.closed or self.draining or woken or left <= 0:
                    return found
                if self.poll_seconds is not None:
                    left = min(left, self.poll_seconds)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), left)
                    # woken: read again (the next turn's read), and answer whatever it finds
        finally:
            waiters = self._waiters.get(path)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[path]

    def cursor(self, client_cursor: str | None) -> str:
        return ds.cursor(self.clock(), client_cursor, random.randint(1, 3600))
