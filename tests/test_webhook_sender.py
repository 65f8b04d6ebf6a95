"""The webhook sender's pace: what it asks of the store while nothing is due (SPEC §14).

A real SQLite store and a real receiver on loopback; the store is wrapped only to count the
sender's calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lastword.metrics import Metrics
from lastword.rules.records import WebhookTarget
from lastword.store.sqlite.store import SqliteStore
from lastword.webhooks.sender import WebhookSender

from tests.receiver import Answer, Receiver
from tests.store_contract import T0, spec


class Counted:
    """The store, counting the calls the sender makes to it."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()
        self.answered = asyncio.Event()  # set after each call is answered

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            try:
                return await method(*args, **kwargs)
            finally:
                self.answered.set()

        return counted


@contextlib.asynccontextmanager
async def sender_on_a_store(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, Counted, WebhookSender]]:
    """A real SQLite store, and a sender on it whose calls to the store are counted."""
    store = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600)
    await store.open()
    counted = Counted(store)
    sender = WebhookSender(counted, Metrics(), backoff_seconds=1.0, max_attempts=3,
                           timeout_seconds=30.0, allow_private=True)
    try:
        yield store, counted, sender
    finally:
        await sender.close()
        await store.close()


@pytest.mark.anyio
async def test_an_attempt_in_flight_is_not_claimed_again_and_again(tmp_path: Path) -> None:
    """While an attempt waits for its receiver, its delivery is leased: the sender sleeps until
    the lease could run out (or its poll), instead of asking the store for it over and over."""
    release = threading.Event()
    receiver = Receiver(lambda _: Answer(hold=release))
    try:
        async with sender_on_a_store(tmp_path) as (store, counted, sender):
            await store.create_run(replace(spec("hooked"), webhook=WebhookTarget(url=receiver.url, secret=None)), T0)
            await store.end_turn("hooked", "completed", None, T0)  # its delivery is due (at T0, long past)
            sender.start()
            await asyncio.to_thread(receiver.arrivals.get, True, 30)  # the attempt is in flight
            before = counted.calls.copy()
            await asyncio.sleep(0.3)
            during = counted.calls - before
            assert during["claim_deliveries"] <= 1, during
            release.set()
    finally:
        release.set()
        receiver.close()


@pytest.mark.anyio
async def test_ends_without_a_delivery_due_cost_the_store_no_write(tmp_path: Path) -> None:
    """Every end wakes the sender; with no delivery due (runs without webhooks: most) it only
    reads when the next is due, and leases nothing: no write transaction per end, none per poll."""
    async with sender_on_a_store(tmp_path) as (store, counted, sender):
        sender.start()
        for number in range(5):
            await store.create_run(spec(f"plain-{number}"), T0)
            await store.end_turn(f"plain-{number}", "completed", None, T0)
            counted.answered.clear()
            sender.ended(None)  # type: ignore[arg-type]
            await asyncio.wait_for(counted.answered.wait(), 30)  # the sender looked
        assert counted.calls["claim_deliveries"] == 0, counted.calls
