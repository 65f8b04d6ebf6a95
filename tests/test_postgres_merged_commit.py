"""PostgreSQL's merged commit of small appends (``lastword.store.postgres.group``), below HTTP.

What every backend's group commit must do is in the store contract
(``test_appends_sent_together_each_commit_or_fail_alone``). Here, what only the merged commit
does: a refused write is undone inside the batch (not by running the batch again one write at
a time, the fallback that would hide a mistake there), a connection lost in a batch runs its
writes again, and two replicas' batches over the same runs do not deadlock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from lastword.errors import Unreachable
from lastword.registry import open_store
from lastword.settings import Settings
from lastword.store import Store
from lastword.store.postgres.store import PostgresStore, driver_error
from lastword.store.postgres.group import PostgresGroupWriter
from lastword.store.sql.tx import Tx
from psycopg_pool import ConnectionPool

from tests.builders import chunk, text, turn_end
from tests.conftest import postgres_schema
from tests.store_contract import T0, bodies, spec

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

#: What the writer logs when a batch commits nothing and its writes run one by one.
FELL_BACK = "they run one by one"
#: Batches raced by the two replicas; each trial has both in flight at once, no sleep.
TRIALS = 30
RUNS = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def database_url() -> Iterator[str]:
    with postgres_schema() as url:
        yield url


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


def fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if FELL_BACK in record.getMessage()]


async def test_refused_writes_are_undone_inside_the_batch(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """A write refused before it sent anything, and one refused after it sent a statement (the
    second write on a run reads its row again), leave nothing, and the batch commits once."""
    caplog.set_level(logging.INFO, logger="lastword")
    for run_id in ("a", "b"):
        await store.create_run(spec(run_id), T0)
        # The turn's fold is read once, then kept: b's refused write below sends nothing.
        await store.append(run_id, [chunk(f"{run_id}0")], T0)
    answers = await asyncio.gather(
        store.append("a", [chunk("a1")], T0),
        store.append("b", [turn_end(), chunk("after")], T0),
        store.append("a", [chunk("a2"), turn_end(), chunk("after")], T0),
        store.append("a", [chunk("a3")], T0),
        store.append("b", [chunk("b1")], T0),
        return_exceptions=True,
    )
    assert [type(answer).__name__ for answer in answers] == [
        "AppendOutcome", "RunEnded", "RunEnded", "AppendOutcome", "AppendOutcome"], answers
    assert fallbacks(caplog) == []
    assert bodies(await store.events_after("a", 1, 10)) == [chunk("a0"), chunk("a1"), chunk("a3")]
    assert bodies(await store.events_after("b", 1, 10)) == [chunk("b0"), chunk("b1")]
    for run_id, output in (("a", "a0a1a3"), ("b", "b0b1")):
        run, turn = await store.turn_result(run_id, None)
        assert (run.status, turn.ended, turn.output) == ("running", False, [text(output)])



async def test_small_appends_sent_together_keep_every_character(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """Appends of one event sent together, whose statements go with the COMMIT as one query,
    their values quoted on this side: quotes, backslashes, placeholders, SQL and any text are
    kept exactly, with the time they were received, and the batch commits as sent (a mistake
    in the quoting would make PostgreSQL refuse it and the writes run again). No eventIds: a
    write looking its ids up sends what the batch held before it in a pipeline instead."""
    caplog.set_level(logging.INFO, logger="lastword")
    awkward = [
        "it's", 'say "hi"', "back\\slash \\' E'\\x41'", "%s %(name)s %% ?", "'; DROP TABLE events; --",
        "$$ dollar $tag$ quoted $tag$", "tab\there\nnew line\r", "emoji \U0001f600 e\u0301 \u202e rtl",
        "\\N", "", " ",
    ]
    runs = [f"q{number}" for number in range(len(awkward))]
    for run_id in runs:
        await store.create_run(spec(run_id), T0)
        await store.append(run_id, [chunk("first")], T0)  # (its fold is read now, not in the batch)
    await asyncio.gather(*(
        store.append(run_id, [chunk(value)], T0 + 0.125) for run_id, value in zip(runs, awkward)
    ))
    assert fallbacks(caplog) == []
    for run_id, value in zip(runs, awkward):
        [event] = await store.events_after(run_id, 2, 10)
        assert (event.body, event.received_at) == (chunk(value), T0 + 0.125)


async def test_a_connection_lost_in_a_batch_runs_its_writes_again(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch's connection is terminated by the server while a write of the batch runs:
    nothing of the batch committed, so every write runs again alone, and each append is
    stored exactly once."""
    assert isinstance(store, PostgresStore)
    caplog.set_level(logging.INFO, logger="lastword")
    for run_id in ("a", "b"):
        await store.create_run(spec(run_id), T0)
    killed: list[int] = []

    def killer(tx: Tx) -> str:
        if not killed:
            pid = tx.one("SELECT pg_backend_pid()")[0]
            with psycopg.connect(database_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.append(pid)
            tx.one("SELECT 1")  # finds the connection gone
        return "ran"

    answers = await asyncio.gather(
        store.append("a", [chunk("a1")], T0),
        store._merged.submit(killer, "b"),
        store.append("b", [chunk("b1")], T0),
        store.append("a", [chunk("a2")], T0),
    )
    assert len(killed) == 1 and answers[1] == "ran"
    assert [answer.last_seq for answer in (answers[0], answers[2], answers[3])] == [2, 2, 3]
    assert len(fallbacks(caplog)) == 1
    assert bodies(await store.events_after("a", 1, 10)) == [chunk("a1"), chunk("a2")]
    assert bodies(await store.events_after("b", 1, 10)) == [chunk("b1")]


async def test_two_replicas_batches_over_the_same_runs_never_deadlock(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two stores on one database each commit a batch of appends to the same 20 runs, one in
    the runs' order and one in reverse, both in flight at once, 30 times: no batch waits for
    the other in a cycle (PostgreSQL would break it after a second and the batch would run
    again one by one), and every run's log is gap-free."""
    caplog.set_level(logging.INFO, logger="lastword")
    other = new_store(database_url)
    await other.open()
    try:
        runs = [f"r{number:02d}" for number in range(RUNS)]
        for run_id in runs:
            await store.create_run(spec(run_id), T0)
        for trial in range(TRIALS):
            writes: list[Any] = [store.append(run_id, [chunk(f"{trial}.")], T0) for run_id in runs]
            writes += [other.append(run_id, [chunk(f"{trial}:")], T0) for run_id in reversed(runs)]
            await asyncio.gather(*writes)
            assert fallbacks(caplog) == [], trial
        for run_id in runs:
            logged = await store.events_after(run_id, 0, 1000)
            assert [event.seq for event in logged] == list(range(1, 2 + 2 * TRIALS))
    finally:
        await other.close()


class Counted:
    """The writer's ``alone``: counts the writes run again one by one, and finds the store
    unreachable, as a database that went away would be."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, work: Any) -> Any:
        self.calls += 1
        raise Unreachable("the PostgreSQL store cannot be reached: (in the test)")


def nothing(tx: Tx) -> None:
    """A write that writes nothing."""


@contextlib.asynccontextmanager
async def writer_on(pool: ConnectionPool, timeout: float) -> AsyncIterator[tuple[PostgresGroupWriter, Counted]]:
    """A merged writer on ``pool`` whose writes run again are counted; both closed after."""
    alone = Counted()
    writer = PostgresGroupWriter(pool, alone, timeout, driver_error)
    try:
        yield writer, alone
    finally:
        writer.stop()
        await asyncio.to_thread(writer.join)
        await asyncio.to_thread(pool.close)


async def test_a_batch_with_no_connection_is_answered_at_once() -> None:
    """No connection comes within the time-out (nothing listens on the port): the batch's
    writes are all told 503 unreachable, none is run again alone to wait as long once more."""
    pool = ConnectionPool("host=127.0.0.1 port=1 dbname=none connect_timeout=1", min_size=1, open=True,
                          reconnect_timeout=1, name="unreachable")
    async with writer_on(pool, 0.2) as (writer, alone):
        answers = await asyncio.gather(*(writer.submit(nothing, f"r{number}") for number in range(5)),
                                       return_exceptions=True)
        assert [type(answer).__name__ for answer in answers] == ["Unreachable"] * 5, answers
        assert alone.calls == 0


async def test_a_batch_run_again_stops_at_the_first_write_that_finds_no_store(database_url: str) -> None:
    """A batch PostgreSQL refused (a statement of its first write fails) runs again one write
    at a time; when the first of those finds the store unreachable, the others are told so
    without trying."""

    def divide(tx: Tx) -> Any:
        return tx.one("SELECT 1 / 0")

    pool = ConnectionPool(database_url, min_size=1, open=True, kwargs={"autocommit": True}, name="refused")
    async with writer_on(pool, 5.0) as (writer, alone):
        answers = await asyncio.gather(writer.submit(divide), writer.submit(nothing), writer.submit(nothing),
                                       return_exceptions=True)
        assert [type(answer).__name__ for answer in answers] == ["Unreachable"] * 3, answers
        assert alone.calls == 1
