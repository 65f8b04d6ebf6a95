"""The storage contract on every backend: start-up schema, and two stores on one database.

These talk to the store directly (``lastword.store.open_store``), below the HTTP layer, where the
point is the database: several processes creating the schema at the same instant, a schema from
a newer release, and two stores (two replicas) feeding and reading one turn.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lastword.settings import Settings
from lastword.store import RunSpec, Store, open_store
from tests.builders import chunk

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def new_store(database_url: str) -> Store:
    return open_store(Settings(database_url=database_url, lease_seconds=0))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = new_store(database_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def spec(run_id: str) -> RunSpec:
    return RunSpec(run_id, None, None, "oneshot", {}, None, f'{{"runId":"{run_id}"}}')


STARTER = textwrap.dedent(
    """
    import asyncio, sys, time
    from lastword.settings import Settings
    from lastword.store import open_store

    async def main() -> None:
        store = open_store(Settings(database_url=sys.argv[1], lease_seconds=0))
        while time.time() < float(sys.argv[2]):
            time.sleep(0.0005)
        await store.open()
        await store.ping()
        await store.close()

    asyncio.run(main())
    print("opened")
    """
)


def test_replicas_starting_together_create_the_schema_once(database_url: str) -> None:
    """Processes that open one fresh database at the same instant all start, with one schema."""
    starting = 6
    at = time.time() + 2.0
    processes = [
        subprocess.Popen([sys.executable, "-c", STARTER, database_url, str(at)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(starting)
    ]
    outcomes = [process.communicate(timeout=60) for process in processes]
    for process, (out, err) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, err.decode()[-2000:]
        assert out.decode().strip() == "opened"


async def test_a_schema_from_a_newer_release_is_refused(store: Store, database_url: str) -> None:
    """A database whose schema is newer than the code is not opened (nor downgraded)."""
    await store._write(lambda tx: tx.run("UPDATE meta SET value = '99' WHERE key = 'schema_version'"))  # type: ignore[attr-defined]
    newer = new_store(database_url)
    with pytest.raises(RuntimeError, match="schema version 99"):
        await newer.open()
    await newer.close()


async def test_two_stores_feed_one_turn_and_agree(store: Store, database_url: str) -> None:
    """Two stores on one database (two replicas) each catch their fold up with what the other
    wrote before adding their own; the turn ends once with the whole output."""
    other = new_store(database_url)
    await other.open()
    try:
        now = time.time()
        await store.create_run(spec("shared"), now)
        await store.append("shared", [chunk("one ")], now)
        _, turn = await other.turn_result("shared", None)  # other builds its fold here
        assert turn.output == [{"type": "text", "text": "one "}]
        await store.append("shared", [chunk("two ")], now)  # other's fold is now behind
        await other.append("shared", [chunk("three")], now)
        for reader in (store, other):
            _, turn = await reader.turn_result("shared", None)
            assert turn.output == [{"type": "text", "text": "one two three"}]
        ended = await other.end_turn("shared", "completed", None, now)
        assert ended is not None and ended.changed
        again = await store.end_turn("shared", "completed", None, now)
        assert again is not None and not again.changed
        assert again.turn.output == [{"type": "text", "text": "one two three"}]
        events = await store.events_after("shared", 0, 100)
        assert [event.seq for event in events] == [1, 2, 3, 4, 5]
    finally:
        await other.close()


async def test_concurrent_appends_through_two_stores_are_gap_free(store: Store, database_url: str) -> None:
    """Appends racing through two stores on one run get seq 1..N: no gap, no repeat."""
    other = new_store(database_url)
    await other.open()
    try:
        now = time.time()
        await store.create_run(spec("raced"), now)
        writes = [
            (store if number % 2 else other).append("raced", [chunk(f"{number} ")], now)
            for number in range(60)
        ]
        outcomes = await asyncio.gather(*writes)
        assert sorted(outcome.last_seq for outcome in outcomes) == list(range(2, 62))
        events = await other.events_after("raced", 0, 1000)
        assert [event.seq for event in events] == list(range(1, 62))
        _, turn = await store.turn_result("raced", None)
        text = turn.output[0]["text"]
        assert sorted(text.split()) == sorted(str(number) for number in range(60))
    finally:
        await other.close()
