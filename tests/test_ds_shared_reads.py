"""Live readers of one Durable Stream share the read that wakes them (issue 25, the /ds fan-out).

A hundred ``live=sse`` readers of a stream were each read from the store after every append: a
hundred reads, each a hop to the store's threads, for one message. Readers woken by the same
change at the same offset now share one read. The rule that keeps that safe: a reader never
takes a read that was started before the latest change it could have missed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lastword.ds_service import StreamService
from lastword.rules import ds
from lastword.rules.ds import AppendRequest, CreateRequest, Slice
from lastword.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

PATH = "bench/shared"


class CountedStore:
    """The real store, its stream reads counted and, while ``gate`` is clear, held before they run."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self.reads = 0
        self.active = 0  # reads under way
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()  # set when a read waits at the gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def ds_read(self, path: str, position: int | str, now: float, max_bytes: int) -> Slice:
        self.reads += 1
        self.active += 1
        try:
            found = await self._store.ds_read(path, position, now, max_bytes)
        finally:
            self.active -= 1
        if not self.gate.is_set():
            self.held.set()  # what it found is kept back: a read that is slow to come back
            await self.gate.wait()
        return found


@pytest.fixture
async def service(tmp_path: Path) -> Any:
    store = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600)
    await store.open()
    counted = CountedStore(store)
    service = StreamService(counted)
    await service.create(CreateRequest(path=PATH, content_type="text/plain", ttl=None, expires_at=None,
                                       expires_epoch=None, closed=False, body=b""))
    yield service, counted
    await store.close()


async def _append(service: StreamService, body: bytes) -> None:
    await service.append(AppendRequest(path=PATH, content_type="text/plain", body=body, close=False,
                                       producer=None, stream_seq=None))


async def _parked(service: StreamService, count: int, store: CountedStore | None = None) -> None:
    """Until ``count`` readers are registered (and, given ``store``, none is still reading)."""
    for _ in range(5000):
        if service.waiting == count and (store is None or store.active == 0):
            for _ in range(5):
                await asyncio.sleep(0)  # from their first read's answer to their wait
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{service.waiting} readers parked, not {count}")


async def test_readers_woken_by_one_append_share_one_read(service: Any) -> None:
    streams, store = service
    tail = (await streams.read(PATH, ds.NOW)).start
    readers = [asyncio.create_task(streams.wait(PATH, tail, 10)) for _ in range(50)]
    await _parked(streams, 50, store)
    before = store.reads
    await _append(streams, b"one message")
    found = await asyncio.wait_for(asyncio.gather(*readers), 10)
    assert all(slice_.entries == [b"one message"] for slice_ in found)
    assert store.reads - before == 1


async def test_a_reader_never_takes_a_read_started_before_a_change(service: Any) -> None:
    """Reader A's read found the stream empty and is slow to come back; a message is appended;
    reader B, at the same offset, starts then and must see the message, not share A's read."""
    streams, store = service
    for round_number in range(100):
        tail = (await streams.read(PATH, ds.NOW)).start
        store.gate.clear()
        store.held.clear()
        first = asyncio.create_task(streams.wait(PATH, tail, 0))  # reads once, then answers
        await asyncio.wait_for(store.held.wait(), 10)
        await _append(streams, f"m{round_number}".encode())
        # Its wait would last 60 s with nothing found: the message must come at once, not then.
        second = asyncio.create_task(streams.wait(PATH, tail, 60))
        await _parked(streams, 2)  # and B has gone on to its read (or to A's, were it shared)
        store.gate.set()
        assert (await asyncio.wait_for(second, 10)).entries == [f"m{round_number}".encode()], round_number
        await first
