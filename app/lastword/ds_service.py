"""The Durable Streams use cases (SPEC §17): what ``/ds/`` asks of the store, and live waits.

Every write is one store transaction (:mod:`lastword.store.sql.ds`); once it commits, the readers
parked on that stream here are woken and read the log again. A reader never takes data from the
wake-up itself, only from the log, so a wake-up lost or repeated costs a read, never an entry.

A run is also a stream (SPEC §17): ``/ds/runs/{runId}`` reads the run's log as a JSON-mode
stream of its §4 events, one message per logged event, offsets by ``seq``, closed once the run
has ended. It is written through ``/v1/runs`` or as a stream (:mod:`lastword.http.ds_runs`);
either way the run service wakes its parked readers here (:meth:`StreamService.run_changed`).

Across replicas (PostgreSQL) another replica's commit reaches this one as a commit notice
(:mod:`lastword.fanout.notify`): a run's notice, or a stream's (its path), which the fan-out
hands to :meth:`StreamService.changed`. Parked readers do not look at the log meanwhile; when
notices may have been lost (the listening connection dropped), every parked reader is woken
to read again (:meth:`StreamService.wake_all`).

Readers woken by the same change at the same offset share one read (:meth:`StreamService._shared_read`):
a hundred ``live=sse`` readers of a stream cost one read of the store per append, not a
hundred. A reader joins a read under way only when nothing changed since that read started
(a count of the changes told here); otherwise it could be handed what the log held before the
change it was woken for.

A reader that can be written to at once (a ``live=sse`` stream below the ASGI chain, which
gives :meth:`StreamService.wait` a ``deliver`` callable) is not woken while it waits: the
change starts one shared read for the readers parked at each offset, and its answer is handed
to each of them from that read's completion, which moves the reader's offset on. A thousand
readers then cost one read and a thousand writes in one pass, not a thousand task wake-ups. A
reader is written to only while it is parked (waiting, not reading or sending itself) and at
the offset the read began at, so a delivery and the reader's own reads never overlap; when it
cannot be written (its connection's buffer is full), it is woken as any other reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, TypeVar

import orjson

from lastword.errors import DsRefusal
from lastword.rules import ds
from lastword.rules.ds import AppendRequest, CreateRequest, Outcome, Slice, StreamState
from lastword.store.protocols import RunLog, Streams

#: About how much one read answers; a longer stream is read in several.
READ_BYTES = 1024 * 1024
#: A JSON body at least this big is split in a worker thread: the event loop keeps serving.
SPLIT_IN_THREAD_BYTES = 64 * 1024
Request = TypeVar("Request", CreateRequest, AppendRequest)
#: Where runs are read as streams (``/ds/runs/{runId}``), and how many events one read takes.
RUNS = "/runs/"
RUN_PAGE = 1000

#: The cursors' jitter: its own generator, not the ``random`` module's shared one (a property
#: test drawing its cases in this process would see that one move).
_JITTER = random.Random()


def run_id_of(path: str) -> str | None:
    """The run a stream path names (``/runs/{runId}``), or None for a stream of its own."""
    if path.startswith(RUNS) and "/" not in path[len(RUNS):] and len(path) > len(RUNS):
        return path[len(RUNS):]
    return None


class StreamStore(Streams, RunLog, Protocol):
    """What the Durable Streams service uses: the streams, and the runs' logs behind ``/runs/…``."""


class LiveReader:
    """A live read's place in a stream while :meth:`StreamService.wait` runs, and how it is told of a change."""

    __slots__ = ("position", "woken", "deliver", "parked")

    def __init__(self, position: int, woken: asyncio.Event, deliver: Callable[[Slice], bool] | None) -> None:
        #: The offset the reader has had everything before; moved on by each delivery.
        self.position = position
        self.woken = woken
        #: Writes a slice to the reader's client now; ``False`` when it cannot (nothing written).
        self.deliver = deliver
        #: Waiting for a change, neither reading nor returning: only then may it be delivered to.
        self.parked = False

    @property
    def deliverable(self) -> bool:
        """A change is to be delivered to it rather than wake it."""
        return self.parked and self.deliver is not None and not self.woken.is_set()


class StreamService:
    def __init__(self, store: StreamStore, *, clock: Callable[[], float] = time.time,
                 max_json_messages: int = 10_000) -> None:
        self._store = store
        self.clock = clock
        #: ``LASTWORD_DS_MAX_JSON_MESSAGES``: the most messages one JSON-mode write may hold.
        self.max_json_messages = max_json_messages
        self._waiters: dict[str, set[LiveReader]] = defaultdict(set)
        #: Set when the service shuts down: live reads answer now.
        self.draining = False
        #: How many live reads are registered to be woken now (a count kept as they come and
        #: go, so that another thread, a test's, can read it while the loop changes the waiters).
        self.waiting = 0
        #: Changes told so far (any stream); a shared read is joined only at the count it began at.
        self._changes = 0
        self._reads: dict[tuple[str, int], tuple[int, asyncio.Future[Slice]]] = {}

    def changed(self, path: str) -> None:
        """The stream at ``path`` changed (here, or on another replica): its readers read again."""
        self._changes += 1
        readers = self._waiters.get(path)
        if not readers:
            return
        for reader in readers:
            if not reader.deliverable:
                reader.woken.set()
        self._push_parked(path, readers)

    def run_changed(self, run_id: str) -> None:
        """A run's log changed: the readers of its stream (``/ds/runs/{runId}``) read again."""
        self.changed(RUNS + run_id)

    def wake_all(self) -> None:
        """Every parked reader reads again (commit notices may have been lost)."""
        self._changes += 1
        for readers in self._waiters.values():
            for reader in readers:
                reader.woken.set()

    def drain(self) -> None:
        self.draining = True
        self.wake_all()

    def _writable(self, path: str) -> None:
        if run_id_of(path) is not None:
            raise DsRefusal("not_deletable", "a run is not deleted as a stream; retention deletes ended runs")

    async def _split(self, request: Request) -> Request:
        """``request`` with a JSON-mode body split into its messages here, not in the store's
        write transaction, where every other writer would wait for the parse."""
        if not request.body or not ds.is_json(request.content_type or ""):
            if request.max_messages == self.max_json_messages:
                return request
            return replace(request, max_messages=self.max_json_messages)
        if len(request.body) < SPLIT_IN_THREAD_BYTES:
            split = ds.split_json(request.body, self.max_json_messages)
        else:
            split = await asyncio.to_thread(ds.split_json, request.body, self.max_json_messages)
        return replace(request, split=split, max_messages=self.max_json_messages)

    async def create(self, request: CreateRequest) -> Outcome:
        self._writable(request.path)
        request = await self._split(request)
        outcome = await self._store.ds_create(request, self.clock())
        self.changed(request.path)
        return outcome

    async def append(self, request: AppendRequest) -> Outcome:
        self._writable(request.path)
        request = await self._split(request)
        outcome = await self._store.ds_append(request, self.clock())
        self.changed(request.path)
        return outcome

    async def delete(self, path: str) -> None:
        self._writable(path)
        await self._store.ds_delete(path, self.clock())
        self.changed(path)

    async def head(self, path: str) -> Slice:
        """The stream's state (no entries; a HEAD does not reset a sliding TTL)."""
        return await self._read(path, ds.NOW, 0)

    async def read(self, path: str, position: int | str, *, touch: bool = True) -> Slice:
        """The entries after ``position``; a read resets a sliding TTL."""
        found = await self._read(path, position, READ_BYTES)
        if touch and found.state.ttl is not None:
            await self._store.ds_touch(path, self.clock())
        return found

    async def wait(self, path: str, position: int, timeout: float, waiter: asyncio.Event | None = None,
                   deliver: Callable[[Slice], bool] | None = None) -> Slice:
        """The entries after ``position`` once there are some, the stream is closed, or
        ``timeout`` seconds have passed (then an empty slice). Setting ``waiter`` (the caller's
        own, when it gives one) ends the wait early too, with whatever the log then holds.

        Given ``deliver``, what a change brings while the wait is parked is handed to it instead
        (the wait goes on): the slice returned then starts where the last delivery ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        reader = LiveReader(position, waiter or asyncio.Event(), deliver)
        self._waiters[path].add(reader)
        self.waiting += 1
        try:
            while True:
                woken = reader.woken.is_set()
                reader.woken.clear()
                found = await self._shared_read(path, reader.position)
                left = deadline - loop.time()
                if found.entries or found.state.closed or self.draining or woken or left <= 0:
                    return found
                reader.parked = True
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(reader.woken.wait(), left)
                        # woken: read again (the next turn's read), and answer whatever it finds
                finally:
                    reader.parked = False
        finally:
            self.waiting -= 1
            readers = self._waiters.get(path)
            if readers is not None:
                readers.discard(reader)
                if not readers:
                    del self._waiters[path]

    def _push_parked(self, path: str, readers: set[LiveReader]) -> None:
        """Read once at each offset that deliverable readers of ``path`` are at, and deliver it."""
        for position in {reader.position for reader in readers if reader.deliverable}:
            read = self._start_read(path, position)
            read.add_done_callback(functools.partial(self._delivered, path, position, self._changes))

    def _delivered(self, path: str, position: int, changes: int, read: asyncio.Future[Slice]) -> None:
        """Hand a pushed read's answer to the readers still parked where it began; wake those it
        cannot be handed to. ``changes``: the count of changes when the read was pushed."""
        readers = self._waiters.get(path)
        if not readers:
            return
        found = None if read.cancelled() or read.exception() is not None else read.result()
        moved = False
        for reader in list(readers):
            if not reader.parked or reader.position != position or reader.woken.is_set():
                continue  # reading for itself, moved on by another read, or already woken
            if found is None or found.state.closed or not found.up_to_date:
                reader.woken.set()  # a failed read, the end of the stream or more to read: its own task
            elif found.entries:
                if reader.deliver is not None and reader.deliver(found):
                    reader.position = found.end
                    moved = True
                else:
                    reader.woken.set()
            # else nothing new after its offset: it goes on waiting
        if moved and changes != self._changes:
            # Changed again since this read began: what that brought may be past this read's end,
            # and the readers just moved are no longer at the offset a newer read began at. (The
            # count is of every stream's changes: at worst, one read more that finds nothing.)
            self._push_parked(path, readers)

    async def _shared_read(self, path: str, position: int) -> Slice:
        """:meth:`_read` of a live reader, shared with the others at the same place since the last change."""
        # Shielded: a reader that leaves (its client gone) does not cancel the others' read.
        return await asyncio.shield(self._start_read(path, position))

    def _start_read(self, path: str, position: int) -> asyncio.Future[Slice]:
        """The read after ``position`` under way since the last change, or a new one."""
        key = (path, position)
        under_way = self._reads.get(key)
        if under_way is None or under_way[0] != self._changes:
            read = asyncio.ensure_future(self._read(path, position, READ_BYTES))
            self._reads[key] = under_way = (self._changes, read)
            read.add_done_callback(functools.partial(self._read_done, key))
        return under_way[1]

    def _read_done(self, key: tuple[str, int], read: asyncio.Future[Slice]) -> None:
        if self._reads.get(key, (0, None))[1] is read:
            del self._reads[key]
        if not read.cancelled():
            read.exception()  # each reader that awaited it has it raised; none left is no error

    async def _read(self, path: str, position: int | str, max_bytes: int) -> Slice:
        run_id = run_id_of(path)
        if run_id is None:
            return await self._store.ds_read(path, position, self.clock(), max_bytes)
        return await self._read_run(run_id, position, max_bytes)

    async def _read_run(self, run_id: str, position: int | str, max_bytes: int) -> Slice:
        """A run's log as a JSON-mode stream: one message per logged §4 event, offsets by
        ``seq``, closed once the run has ended (SPEC §17)."""
        run = await self._store.get_run(run_id)
        state = StreamState(path=RUNS + run_id, uid=run_id, content_type="application/json", ttl=None,
                            expires_at=None, expires_epoch=None, closed=run.status == "ended", deleted=False,
                            tail=run.last_seq, touched_at=0.0)
        start = run.last_seq if position == ds.NOW else position if isinstance(position, int) \
            else ds.parse_offset(position, run.last_seq)
        assert isinstance(start, int)
        if start >= run.last_seq or max_bytes == 0:
            return Slice(state, start, [])
        events = await self._store.events_after(run_id, start, RUN_PAGE)
        entries: list[bytes] = []
        size = 0
        last = start
        for event in events:
            entry = orjson.dumps(event.body)
            if entries and size + len(entry) > max_bytes:
                break
            entries.append(entry)
            size += len(entry)
            last = event.seq
        if not events:
            last = run.last_seq  # nothing after ``start`` is logged here (a fork's inherited part)
        return Slice(state, start, entries, last)

    def cursor(self, client_cursor: str | None) -> str:
        return ds.cursor(self.clock(), client_cursor, _JITTER.randint(1, 3600))
