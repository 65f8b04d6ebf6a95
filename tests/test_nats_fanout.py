"""Replicas that hear each other over NATS (``LASTWORD_FANOUT_URL=nats://…``, SPEC §20).

Two real ``lastword serve`` processes on one PostgreSQL schema and a ``nats-server`` of the
test's own: a subscriber on A hears what was committed through B, while no replica LISTENs on
PostgreSQL; NATS killed and started again loses nothing (what was committed meanwhile comes
from the log); a NATS URL that cannot be used stops start-up with one line saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.builders import chunk, create_run_async, message, text
from tests.nats_server import NatsServer, nats_server_binary
from tests.own_postgres import OwnPostgres
from tests.servers import ServerProcess, free_port
from tests.sse import Stream, ids, open_stream, payload
from tests.test_replicas import PROMPT_SECONDS, clients, end, parked, post, replica_url

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def backend() -> str:
    return "postgres"


@pytest.fixture
def nats() -> Iterator[NatsServer]:
    server = NatsServer().start()
    try:
        yield server
    finally:
        server.stop()


def replica(database_url: str, nats_url: str, name: str) -> ServerProcess:
    return ServerProcess(
        {"LASTWORD_DATABASE_URL": replica_url(database_url, name), "LASTWORD_FANOUT_URL": nats_url,
         "LASTWORD_LOG_LEVEL": "info", "LASTWORD_LEASE_SECONDS": "0", "LASTWORD_KEEPALIVE_SECONDS": "1"},
        ROOT,
    )


@contextmanager
def serving(*servers: ServerProcess) -> Iterator[list[ServerProcess]]:
    try:
        for server in servers:
            server.start()
        yield list(servers)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"lw-na-{tag}", f"lw-nb-{tag}"


@pytest.fixture
def replicas(database_url: str, nats: NatsServer, names: tuple[str, str]) -> Iterator[list[ServerProcess]]:
    with serving(*(replica(database_url, nats.url, name) for name in names)) as servers:
        yield servers


def listening_sessions(database_url: str, names: tuple[str, ...]) -> list[str]:
    """The replicas' sessions that LISTEN (PostgreSQL's fan-out), by application_name."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT application_name FROM pg_stat_activity WHERE application_name = ANY(%s) AND query ILIKE 'LISTEN%%'",
            (list(names),),
        ).fetchall()
    return [row[0] for row in rows]


@asynccontextmanager
async def notices_heard(nats_url: str) -> AsyncIterator[list[tuple[str, dict[str, object]]]]:
    """Every message published under ``lastword.>`` while the block runs, as (subject, payload)."""
    import nats as nats_client

    heard: list[tuple[str, dict[str, object]]] = []

    async def hear(message: object) -> None:
        heard.append((message.subject, json.loads(message.data)))  # type: ignore[attr-defined]

    connection = await nats_client.connect(nats_url, connect_timeout=2, max_reconnect_attempts=0)
    try:
        await connection.subscribe("lastword.>", cb=hear)
        await connection.flush()
        yield heard
    finally:
        await connection.close()


async def read_until(stream: Stream, last: str) -> list[tuple[str, int, object]]:
    """(event type, id, payload) of each event up to and including the first of type ``last``."""
    found: list[tuple[str, int, object]] = []
    while not found or found[-1][0] != last:
        event = await stream.next()
        found.append((event.event, int(event.id), payload(event)))
    return found


async def test_a_subscriber_on_a_hears_commits_through_b_over_nats(
    replicas: list[ServerProcess], nats: NatsServer, database_url: str, names: tuple[str, str],
) -> None:
    """Chunks and the end written through B (and through A, interleaved on the same run) reach
    A's run stream, A's firehose and a ``?wait=`` on A, in order and once; the notices go over
    NATS on a subject per run and one for the firehose, and no replica LISTENs on PostgreSQL."""
    async with clients(*replicas) as (a, b), notices_heard(nats.url) as heard:
        async with open_stream(a, "/v1/stream") as feed:
            run_id = await create_run_async(b, agent="writer")
            async with open_stream(a, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                assert (await stream.next()).event == "run/snapshot"
                waiter = asyncio.create_task(a.get(f"/v1/runs/{run_id}/result", params={"wait": 30}))
                await parked(a, waiter)
                # Both replicas write the run at once: each one's commits reach A in seq order.
                pieces = [f"{who}{n} " for n in range(20) for who in ("a", "b")]
                await asyncio.gather(*(post(a if piece[0] == "a" else b, run_id, chunk(piece)) for piece in pieces))
                await post(b, run_id, message(text("the answer")))
                await end(b, run_id)
                async with asyncio.timeout(PROMPT_SECONDS * 2):
                    live = await read_until(stream, "subagent/end")
                    result = await waiter
            assert [kind for kind, _, _ in live] == ["assistant/chunk"] * 40 + ["subagent/end"]
            assert [seq for _, seq, _ in live] == list(range(2, 42)) + [43]
            assert sorted(event["delta"]["text"] for _, _, event in live[:-1]) == sorted(pieces)  # type: ignore[index]
            assert live[-1][2]["lastAssistantMessage"] == [text("the answer")]  # type: ignore[index]
            assert result.json()["stopReason"] == "completed"
            start, finish = await feed.take(2)
            assert (start.event, finish.event) == ("subagent/start", "subagent/end")
            assert payload(finish)["runId"] == run_id and ids([start])[0] < ids([finish])[0]
        assert listening_sessions(database_url, names) == []
    subjects = {subject for subject, _ in heard}
    run_subjects = {subject for subject in subjects if subject.split(".")[-2:-1] == ["run"]}
    assert len(run_subjects) == 1 and any(body.get("run") == run_id for _, body in heard)
    assert any(subject.endswith(".feed") for subject in subjects)


async def test_nats_killed_and_started_again_loses_nothing(
    database_url: str, nats: NatsServer, names: tuple[str, str],
) -> None:
    """With NATS gone, A's /readyz says so and B's commits go unheard; B is then killed (its
    unsent notices die with it) and NATS comes back on its port: A's subscribers get every
    event committed meanwhile from the log, in order, none twice, and hear live commits again."""
    first, second = replica(database_url, nats.url, names[0]), replica(database_url, nats.url, names[1])
    with serving(first, second):
        async with clients(first, second) as (a, b):
            run_id = await create_run_async(b)
            other = await create_run_async(b)
            async with open_stream(a, f"/v1/runs/{run_id}/stream?include=chunks") as stream, \
                    open_stream(a, "/v1/stream") as feed:
                assert (await stream.next()).event == "run/snapshot"
                await post(b, run_id, chunk("before "))
                assert (await stream.next()).event == "assistant/chunk"
                nats.kill()
                async with asyncio.timeout(PROMPT_SECONDS * 2):
                    while (ready := await a.get("/readyz")).status_code == 200:
                        await asyncio.sleep(0.05)
                assert ready.status_code == 503 and ready.json()["code"] == "notices_unavailable"
                for n in range(5):
                    await post(b, run_id, chunk(f"while {n} "))
                await post(b, run_id, message(text("done while NATS was down")))
                await end(b, run_id)
                await end(b, other)
                second.kill()  # whatever B still meant to publish is lost with it
                nats.start()
                async with asyncio.timeout(PROMPT_SECONDS * 4):
                    live = await read_until(stream, "subagent/end")
                assert [kind for kind, _, _ in live] == ["assistant/chunk"] * 5 + ["subagent/end"]
                assert [seq for _, seq, _ in live] == [3, 4, 5, 6, 7, 9]
                assert [event["delta"]["text"] for _, _, event in live[:-1]] == [  # type: ignore[index]
                    f"while {n} " for n in range(5)]
                lifecycle = [(event.event, payload(event)["runId"]) for event in await feed.take(2)]
                assert lifecycle == [("subagent/end", run_id), ("subagent/end", other)]
                async with asyncio.timeout(PROMPT_SECONDS * 2):
                    while (await a.get("/readyz")).status_code != 200:
                        await asyncio.sleep(0.05)
            # Live again: a run written through A's peer, restarted, is heard at once.
            second.start()
            third = await create_run_async(b)
            async with open_stream(a, f"/v1/runs/{third}/stream") as stream:
                assert (await stream.next()).event == "run/snapshot"
                await post(b, third, message(text("after")))
                await end(b, third)
                async with asyncio.timeout(PROMPT_SECONDS):
                    assert (await stream.next()).event == "subagent/end"


def test_a_nats_url_that_cannot_be_used_stops_start_up_in_one_line(database_url: str) -> None:
    """Nothing listening at the NATS URL, or a URL that is not NATS's: `lastword serve` says so in
    one error line naming the URL and exits 3, with no traceback."""
    nats_server_binary()  # the tests of this module run where NATS can be started
    for url, says in ((f"nats://127.0.0.1:{free_port()}", "cannot reach NATS"),
                      ("redis://127.0.0.1:6379", "unsupported fan-out URL")):
        env = {**os.environ, "LASTWORD_DATABASE_URL": database_url, "LASTWORD_FANOUT_URL": url,
               "LASTWORD_PORT": str(free_port()), "LASTWORD_HOST": "127.0.0.1", "LASTWORD_LOG_LEVEL": "info"}
        done = subprocess.run([sys.executable, "-m", "lastword.cli", "serve"], capture_output=True, text=True,
                              env=env, timeout=60, check=False, cwd=ROOT)
        assert done.returncode == 3, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        errors = [json.loads(line) for line in done.stderr.splitlines() if '"level":"error"' in line]
        assert len(errors) == 1, done.stderr
        assert errors[0]["message"].startswith("cannot start: ") and says in errors[0]["message"], errors
        assert url in errors[0]["message"]


async def test_a_commit_whose_notice_never_comes_still_reaches_a_stream(
    database_url: str, nats: NatsServer, names: tuple[str, str],
) -> None:
    """A replica whose notices never reach A (here C, on a NATS of its own: as a replica that died
    between its commit and its publish) ends a run A streams: A's subscriber and ``?wait=`` still
    get the end, from the log, within a few of A's sweeps."""
    from lastword.fanout.nats import SWEEP_SECONDS

    elsewhere = NatsServer().start()
    try:
        first, unheard = replica(database_url, nats.url, names[0]), replica(database_url, elsewhere.url, names[1])
        with serving(first, unheard):
            async with clients(first, unheard) as (a, c):
                run_id = await create_run_async(c)
                await post(c, run_id, message(text("said where nobody listens")))
                async with open_stream(a, f"/v1/runs/{run_id}/stream") as stream:
                    assert (await stream.next()).event == "run/snapshot"
                    waiter = asyncio.create_task(a.get(f"/v1/runs/{run_id}/result", params={"wait": 60}))
                    await parked(a, waiter)
                    await end(c, run_id)
                    async with asyncio.timeout(SWEEP_SECONDS + PROMPT_SECONDS):
                        heard = (await stream.next()).event  # within WAIT_SECONDS (two sweeps)
                        result = await waiter
                    assert heard == "subagent/end"
                    assert result.json()["stopReason"] == "completed"
    finally:
        elsewhere.stop()


@asynccontextmanager
async def on_own_database(
    nats: NatsServer,
) -> AsyncIterator[tuple[OwnPostgres, ServerProcess, httpx.AsyncClient, httpx.AsyncClient]]:
    """Replicas A and B on NATS over a PostgreSQL of the test's own, which the test may stop:
    (the database, A's process, a client of A, a client of B)."""
    database = OwnPostgres()
    try:
        database.start()
        tag = uuid.uuid4().hex[:8]
        first, second = (replica(database.url + "?connect_timeout=2", nats.url, f"lw-o{n}-{tag}") for n in "ab")
        with serving(first, second):
            async with clients(first, second) as (a, b):
                yield database, first, a, b
    finally:
        database.remove()


async def outage(database: OwnPostgres, server: ServerProcess, *, followers: int) -> None:
    """Stop ``database`` and wait until ``server``'s cursor sweep met the outage and sent its
    ``followers`` back to the log, where each could not read (the pool's wait for a connection
    ran out while the database was still down) and waits for the store."""
    failures = server.log_path.read_text().count("could not read")
    waits = server.log_path.read_text().count("waits for the store")
    database.stop()
    async with asyncio.timeout(60):  # a sweep (every few seconds) met the outage
        while server.log_path.read_text().count("could not read") == failures:
            await asyncio.sleep(0.1)
    async with asyncio.timeout(60):
        while server.log_path.read_text().count("waits for the store") < waits + followers:
            await asyncio.sleep(0.1)


async def test_a_database_outage_does_not_cut_the_streams_of_replicas_on_nats(nats: NatsServer) -> None:
    """PostgreSQL (a server of the test's own) stopped while A streams a run and the firehose and
    sweeps its cursors: the sweep's failed read sends both streams back to the log, their reads
    fail too, and they wait for the store instead of ending (kept open by keep-alives); once the
    database is back, commits through B reach the same two streams."""
    async with on_own_database(nats) as (database, first, a, b):
        async with open_stream(a, "/v1/stream") as feed:
            run_id = await create_run_async(b)
            assert (await feed.next()).event == "subagent/start"
            async with open_stream(a, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                assert (await stream.next()).event == "run/snapshot"
                await post(b, run_id, chunk("before"))
                assert (await stream.next()).event == "assistant/chunk"
                await outage(database, first, followers=2)
                database.start()
                async with asyncio.timeout(60):
                    while (await b.post(f"/v1/runs/{run_id}/events", json=[chunk("after")])).status_code != 200:
                        await asyncio.sleep(0.2)
                heard = await stream.next()
                assert (heard.event, payload(heard)["delta"]["text"]) == ("assistant/chunk", "after")
                await end(b, run_id)
                assert (await stream.next()).event == "subagent/end"
                assert (await feed.next()).event == "subagent/end"


async def test_a_replica_draining_while_its_streams_wait_for_the_store_ends_them_to_resume(
    nats: NatsServer,
) -> None:
    """SIGTERM while PostgreSQL is down and A's run stream and firehose wait for it: both end
    with server/reconnect naming the last id they sent, A exits by itself within its drain, and
    the run stream resumed on B once the database is back gives what followed, once."""
    async with on_own_database(nats) as (database, first, a, b):
        async with open_stream(a, "/v1/stream") as feed:
            run_id = await create_run_async(b)
            started = await feed.next()
            async with open_stream(a, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                await stream.next()  # the snapshot
                await post(b, run_id, chunk("before"))
                before = await stream.next()
                await outage(database, first, followers=2)
                assert first.process is not None
                first.process.terminate()
                rest, feed_rest = await asyncio.gather(stream.until_closed(), feed.until_closed())
        assert [event.event for event in rest] == ["server/reconnect"]
        assert payload(rest[0]) == {"reason": "shutdown", "lastEventId": int(before.id)}
        assert [event.event for event in feed_rest] == ["server/reconnect"]
        assert payload(feed_rest[0]) == {"reason": "shutdown", "lastEventId": int(started.id)}
        assert await asyncio.to_thread(first.process.wait, 30) == 0
        database.start()
        async with asyncio.timeout(60):
            while (await b.post(f"/v1/runs/{run_id}/events", json=[chunk("after")])).status_code != 200:
                await asyncio.sleep(0.2)
        await end(b, run_id)
        async with open_stream(b, f"/v1/runs/{run_id}/stream?include=chunks", last_event_id=before.id) as resumed:
            found = await resumed.until_closed()
        assert [(event.event, payload(event).get("delta", {}).get("text")) for event in found] == [
            ("assistant/chunk", "after"), ("subagent/end", None)]
