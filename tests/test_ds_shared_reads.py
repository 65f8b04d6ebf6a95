"""Live readers of one Durable Stream share the read that wakes them (issue 25, the /ds fan-out).

A hundred ``live=sse`` readers of a stream were each read from the store after every append: a
hundred reads, each a hop to the store's threads, for one message. Readers woken by the same
change at the same offset now share one read. The rule that keeps that safe: a reader never
takes a read that was started before the latest change it could have missed.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from lastword.ds_service import StreamService
from lastword.rules import ds
from lastword.rules.ds import AppendRequest, CreateRequest, Slice
from lastword.store.sqlite.store import SqliteStore

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
        #: Holds back the next read alone, until it is set.
        self.hold_next: asyncio.Event | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def ds_read(self, path: str, position: int | str, now: float, max_bytes: int) -> Slice:
        self.reads += 1
        self.active += 1
        hold, self.hold_next = self.hold_next, None
        try:
            found = await self._store.ds_read(path, position, now, max_bytes)
        finally:
            self.active -= 1
        if hold is not None:
            self.held.set()
            await hold.wait()
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


class Client:
    """A live reader's client as :meth:`StreamService.wait` sees it: what was delivered to it."""

    def __init__(self, refuse: float = 0.0, rng: random.Random | None = None) -> None:
        self.delivered: list[Slice] = []
        self._refuse = refuse
        self._rng = rng or random.Random(0)

    def deliver(self, found: Slice) -> bool:
        if self._refuse and self._rng.random() < self._refuse:
            return False  # its connection's buffer is full: nothing written
        self.delivered.append(found)
        return True


async def test_parked_readers_are_handed_a_change_without_being_woken(service: Any) -> None:
    streams, store = service
    tail = (await streams.read(PATH, ds.NOW)).start
    clients = [Client() for _ in range(50)]
    readers = [asyncio.create_task(streams.wait(PATH, tail, 60, deliver=c.deliver)) for c in clients]
    await _parked(streams, 50, store)
    before = store.reads
    for number in range(3):
        await _append(streams, f"m{number}".encode())
        for _ in range(1000):
            if all(len(c.delivered) == number + 1 for c in clients):
                break
            await asyncio.sleep(0.001)
        assert [[s.entries for s in c.delivered] for c in clients] == [[[f"m{n}".encode()] for n in range(number + 1)]] * 50
        assert [c.delivered[-1].start for c in clients] == [tail + number] * 50
    assert store.reads - before == 3  # one read per append, for all fifty
    assert not any(reader.done() for reader in readers)  # still waiting: nothing woke them
    streams.wake_all()
    found = await asyncio.wait_for(asyncio.gather(*readers), 10)
    assert all(slice_.start == tail + 3 and not slice_.entries for slice_ in found)


async def test_a_change_during_a_delivered_read_reaches_the_readers_too(service: Any) -> None:
    """The read pushed for m1 is slow to come back; m2 is appended meanwhile. Delivering m1
    moves the readers past where m2's read began, so m2 must be read again for them, not left
    to their 60-second wait."""
    streams, store = service
    for round_number in range(20):
        tail = (await streams.read(PATH, ds.NOW)).start
        clients = [Client() for _ in range(5)]
        readers = [asyncio.create_task(streams.wait(PATH, tail, 60, deliver=c.deliver)) for c in clients]
        await _parked(streams, 5, store)
        store.gate.clear()
        store.held.clear()
        await _append(streams, b"m1")
        await asyncio.wait_for(store.held.wait(), 10)
        await _append(streams, b"m2")
        store.gate.set()
        for _ in range(10_000):
            if all(sum(len(s.entries) for s in c.delivered) == 2 for c in clients):
                break
            await asyncio.sleep(0.001)
        assert [[e for s in c.delivered for e in s.entries] for c in clients] == [[b"m1", b"m2"]] * 5, round_number
        streams.wake_all()
        await asyncio.wait_for(asyncio.gather(*readers), 10)


async def test_a_change_during_a_readers_own_read_wakes_it(service: Any) -> None:
    """A reader that can be delivered to is reading for itself (its read found nothing and is
    slow to come back) when a message is appended: it must be woken to read again, not left
    parked on the empty answer until its 60-second wait ends."""
    streams, store = service
    for round_number in range(20):
        tail = (await streams.read(PATH, ds.NOW)).start
        client = Client()
        store.hold_next = release = asyncio.Event()
        store.held.clear()
        reader = asyncio.create_task(streams.wait(PATH, tail, 60, deliver=client.deliver))
        await asyncio.wait_for(store.held.wait(), 10)
        await _append(streams, f"m{round_number}".encode())
        for _ in range(5):
            await asyncio.sleep(0)  # a read pushed for the change, if any, comes back first
        release.set()
        found = await asyncio.wait_for(reader, 10)
        assert [e for s in [*client.delivered, found] for e in s.entries] == [f"m{round_number}".encode()]


async def test_live_readers_see_every_message_once_whether_delivered_to_or_woken(service: Any) -> None:
    """Readers as a ``live=sse`` stream runs them (wait, send, wait again), with waits that end
    at random and clients that refuse a third of the deliveries (a full buffer), while messages
    are appended: each reader sees the log exactly, nothing twice, nothing missing."""
    streams, _ = service
    for round_number in range(40):
        rng = random.Random(round_number)
        tail = (await streams.read(PATH, ds.NOW)).start
        messages = [f"r{round_number}m{n}".encode() for n in range(50)]

        async def reader() -> list[bytes]:
            client = Client(refuse=0.3, rng=random.Random(rng.random()))
            seen: list[bytes] = []
            position = tail
            while len(seen) + sum(len(s.entries) for s in client.delivered) < len(messages):
                found = await streams.wait(PATH, position, rng.choice((0.0, 0.001, 0.005, 60)),
                                           deliver=client.deliver)
                for delivered in client.delivered:
                    assert delivered.start == tail + len(seen), "a delivery overlaps or skips"
                    seen.extend(delivered.entries)
                client.delivered.clear()
                assert found.start == tail + len(seen), "a wait's answer overlaps or skips a delivery"
                seen.extend(found.entries)
                position = found.end
            return seen

        readers = [asyncio.create_task(reader()) for _ in range(8)]
        for message in messages:
            await _append(streams, message)
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
        streams.wake_all()  # a delivery does not end a wait: a reader with everything waits to be told
        seen = await asyncio.wait_for(asyncio.gather(*readers), 30)
        assert seen == [messages] * 8, round_number
