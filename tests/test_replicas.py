"""Two real lastword processes on one PostgreSQL schema (SPEC §10): any replica serves any run.

Each test starts replicas A and B as subprocesses (``lastword serve``) on a fresh schema and
talks to them over HTTP and SSE as clients would. Every wait is bounded (``tests.sse``), and
no test asserts a tight timing: "promptly" means within a few seconds on a loaded machine.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.builders import chunk, create_run_async, message, text
from tests.servers import ServerProcess, free_port, running
from tests.sse import Stream, ids, open_stream, payload, strictly_increasing
from tests.polling import wait_until_async

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent
#: How long a subscriber on one replica may take to hear a commit made through the other.
PROMPT_SECONDS = 5.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def backend() -> str:
    """Replicas need a shared database: PostgreSQL only (skips without it, like every variant)."""
    return "postgres"


def replica_url(database_url: str, name: str) -> str:
    """The test schema's URL, with an application_name that picks this replica's sessions out."""
    return f"{database_url}&application_name={name}"


@contextmanager
def serving(*database_urls: str) -> Iterator[list[ServerProcess]]:
    servers = [
        ServerProcess(
            {"LASTWORD_DATABASE_URL": url, "LASTWORD_LOG_LEVEL": "warning", "LASTWORD_LEASE_SECONDS": "0",
             "LASTWORD_KEEPALIVE_SECONDS": "1"},
            ROOT,
        )
        for url in database_urls
    ]
    with running(servers):
        yield servers


@pytest.fixture
def names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"lw-a-{tag}", f"lw-b-{tag}"


@pytest.fixture
def replicas(database_url: str, names: tuple[str, str]) -> Iterator[list[ServerProcess]]:
    with serving(*(replica_url(database_url, name) for name in names)) as servers:
        yield servers


@asynccontextmanager
async def clients(*servers: ServerProcess) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(httpx.AsyncClient(base_url=server.url, timeout=30))
            for server in servers
        ]


# -- requests ---------------------------------------------------------------------------


async def post(client: httpx.AsyncClient, run_id: str, *events: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(f"/v1/runs/{run_id}/events", json=list(events))
    assert response.status_code == 200, response.text
    return dict(response.json())


async def end(client: httpx.AsyncClient, run_id: str, stop_reason: str = "completed") -> None:
    response = await client.post(f"/v1/runs/{run_id}/end", json={"stopReason": stop_reason})
    assert response.status_code == 200, response.text


async def logged(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The whole event log of a run, page by page."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        response = await client.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 1000})
        assert response.status_code == 200, response.text
        page = response.json()["events"]
        if not page:
            return found
        found.extend(page)
        after = page[-1]["seq"]


# -- one run, written through A, read through B -------------------------------------------


async def test_a_run_fed_through_a_is_served_by_b(replicas: list[ServerProcess]) -> None:
    """Events ingested through A reach B's run stream and firehose live, and B's result,
    tool result and event log."""
    async with clients(*replicas) as (a, b):
        async with open_stream(b, "/v1/stream") as feed:
            run_id = await create_run_async(a, agent="writer")
            async with open_stream(b, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                snapshot = await stream.next()
                assert snapshot.event == "run/snapshot"
                await post(a, run_id, chunk("par"), chunk("tial"), message(text("the answer")))
                await end(a, run_id)
                live = await stream.until_closed()
            assert [event.event for event in live] == ["assistant/chunk", "assistant/chunk", "subagent/end"]
            assert [payload(event)["delta"]["text"] for event in live[:2]] == ["par", "tial"]
            assert payload(live[-1])["lastAssistantMessage"] == [text("the answer")]
            assert strictly_increasing(ids(live))
            start, finish = await feed.take(2)
            assert (start.event, finish.event) == ("subagent/start", "subagent/end")
            assert payload(finish)["runId"] == run_id
            assert strictly_increasing(ids([start, finish]))

        result = (await b.get(f"/v1/runs/{run_id}/result")).json()
        assert result["output"] == [text("the answer")]
        assert result["stopReason"] == "completed"
        tool = await b.get(f"/v1/runs/{run_id}/tool-result")
        assert tool.status_code == 200
        assert tool.json() == {"content": [{"type": "text", "text": "the answer"}], "isError": False}
        log = await logged(b, run_id)
        assert [entry["event"]["type"] for entry in log] == [
            "subagent/start", "assistant/chunk", "assistant/chunk", "assistant/message", "subagent/end",
        ]
        assert [entry["seq"] for entry in log] == [1, 2, 3, 4, 5]


async def test_b_serves_an_open_turn_that_a_is_feeding(replicas: list[ServerProcess]) -> None:
    """B's result of a running turn holds what A stored, and B can go on feeding the same turn."""
    async with clients(*replicas) as (a, b):
        run_id = await create_run_async(a)
        await post(a, run_id, chunk("from A, "))
        assert (await b.get(f"/v1/runs/{run_id}/result")).json()["output"] == [text("from A, ")]
        await post(b, run_id, chunk("then B, "))
        await post(a, run_id, chunk("then A"))
        # Each replica's fold catches up with what the other wrote before it adds its own.
        for client in (a, b):
            assert (await client.get(f"/v1/runs/{run_id}/result")).json()["output"] == [
                text("from A, then B, then A")
            ]
        await end(b, run_id, "cancelled")
        result = (await a.get(f"/v1/runs/{run_id}/result")).json()
        assert result["stopReason"] == "cancelled"
        assert result["output"] == [text("from A, then B, then A")]


async def test_subscriber_and_waiter_on_b_hear_an_end_through_a_promptly(replicas: list[ServerProcess]) -> None:
    """A subscriber on B gets the subagent/end of a run ended through A, and a ?wait= on B
    returns, within a few seconds (cross-replica notification, not polling)."""
    async with clients(*replicas) as (a, b):
        run_id = await create_run_async(a)
        await post(a, run_id, message(text("done")))
        async with open_stream(b, f"/v1/runs/{run_id}/stream") as stream:
            assert (await stream.next()).event == "run/snapshot"
            waiter = asyncio.create_task(b.get(f"/v1/runs/{run_id}/result", params={"wait": 30}))
            await parked(b, waiter)
            started = time.monotonic()
            await end(a, run_id)
            async with asyncio.timeout(PROMPT_SECONDS):
                heard = await stream.next()
                result = await waiter
            assert heard.event == "subagent/end"
            assert payload(heard)["lastAssistantMessage"] == [text("done")]
            assert result.json()["stopReason"] == "completed"
            assert time.monotonic() - started < PROMPT_SECONDS


async def test_last_event_id_resumes_across_replicas(replicas: list[ServerProcess]) -> None:
    """A client that read a run stream and the firehose on A resumes both on B with
    Last-Event-ID: nothing lost, nothing repeated."""
    async with clients(*replicas) as (a, b):
        async with open_stream(a, "/v1/stream") as feed:
            run_id = await create_run_async(a, mode="continuable")
            async with open_stream(a, f"/v1/runs/{run_id}/stream") as stream:
                await stream.next()  # run/snapshot
                await post(a, run_id, message(text("turn one")))
                await end(a, run_id)
                first_end = await stream.next()
            assert first_end.event == "subagent/end"
            seen_on_a = await feed.take(2)
        assert [event.event for event in seen_on_a] == ["subagent/start", "subagent/end"]

        # Meanwhile, through B: a second turn starts and ends.
        assert (await b.post(f"/v1/runs/{run_id}/turns")).status_code == 201
        await post(b, run_id, message(text("turn two")))
        await end(b, run_id)

        async with open_stream(b, f"/v1/runs/{run_id}/stream", last_event_id=first_end.id) as stream:
            resumed = await stream.take(2)
        assert [event.event for event in resumed] == ["subagent/start", "subagent/end"]
        assert payload(resumed[1])["lastAssistantMessage"] == [text("turn two")]
        assert strictly_increasing([int(first_end.id), *ids(resumed)])

        async with open_stream(b, "/v1/stream", last_event_id=seen_on_a[-1].id) as feed:
            rest = await feed.take(2)
        assert [event.event for event in rest] == ["subagent/start", "subagent/end"]
        assert [payload(event)["turn"] for event in rest] == [2, 2]
        assert strictly_increasing([*ids(seen_on_a), *ids(rest)])


# -- races ----------------------------------------------------------------------------------


async def test_concurrent_ingest_through_both_replicas_is_gap_free_and_deduped(
    replicas: list[ServerProcess],
) -> None:
    """Writers racing on one run through A and B get seq 1..N with no gap and no repeat, and
    each eventId, sent through both replicas at once, is stored once."""
    writers, batches, per_batch = 6, 15, 4
    async with clients(*replicas) as (a, b):
        run_id = await create_run_async(a)

        async def writer(number: int) -> tuple[int, int]:
            accepted = duplicates = 0
            for batch in range(batches):
                events = [chunk(f"{number}.{batch}.{k} ", f"w{number}-{batch}-{k}") for k in range(per_batch)]
                # The same batch through both replicas at the same moment: one stores it.
                answers = await asyncio.gather(post(a, run_id, *events), post(b, run_id, *events))
                for answer in answers:
                    accepted += answer["accepted"]
                    duplicates += answer["duplicates"]
            return accepted, duplicates

        counts = await asyncio.gather(*(writer(number) for number in range(writers)))
        total = writers * batches * per_batch
        assert sum(accepted for accepted, _ in counts) == total
        assert sum(duplicates for _, duplicates in counts) == total

        for client in (a, b):
            log = await logged(client, run_id)
            assert [entry["seq"] for entry in log] == list(range(1, total + 2))  # + subagent/start
            event_ids = [entry["event"]["eventId"] for entry in log[1:]]
            assert len(set(event_ids)) == len(event_ids) == total
        run = (await b.get(f"/v1/runs/{run_id}")).json()
        assert run["lastSeq"] == total + 1


async def test_firehose_readers_never_skip_a_late_commit(
    replicas: list[ServerProcess], database_url: str
) -> None:
    """Runs starting and ending concurrently through both replicas, while a firehose reader
    on each replica tails live: each reader gets every feed id, in order, none skipped."""
    runs = 40
    async with clients(*replicas) as (a, b):
        async with open_stream(a, "/v1/stream") as feed_a, open_stream(b, "/v1/stream") as feed_b:

            async def lifecycle(number: int) -> None:
                first, second = (a, b) if number % 2 else (b, a)
                run_id = await create_run_async(first, agent=f"racer-{number}")
                await post(second, run_id, message(text(f"run {number}")))
                await end(second, run_id)

            await asyncio.gather(*(lifecycle(number) for number in range(runs)))
            with psycopg.connect(database_url) as connection:
                committed = [row[0] for row in connection.execute("SELECT id FROM feed ORDER BY id")]
            assert len(committed) == 2 * runs
            for feed in (feed_a, feed_b):
                received = await tail_until(feed, committed[-1])
                assert received == committed, f"skipped {sorted(set(committed) - set(received))}"


async def parked(client: httpx.AsyncClient, waiter: asyncio.Task[httpx.Response]) -> None:
    """Return once the ``?wait=`` request ``waiter`` is parked on this replica: its
    ``lastword_result_waiters`` gauge reads 1 (bounded: a few seconds)."""
    async with asyncio.timeout(PROMPT_SECONDS):
        while (await client.get("/metrics")).text.count("\nlastword_result_waiters 1.0") == 0:
            assert not waiter.done(), waiter.result().text
            await asyncio.sleep(0.01)
    assert not waiter.done()


async def tail_until(feed: Stream, last_id: int) -> list[int]:
    """The ids a live reader receives up to ``last_id`` (or until it waits in vain)."""
    received: list[int] = []
    while not received or received[-1] < last_id:
        try:
            received.append(int((await feed.next()).id))
        except TimeoutError:
            break
    return received


# -- faults ---------------------------------------------------------------------------------


class CuttableProxy:
    """A TCP proxy in front of PostgreSQL that a test cuts and restores.

    Cutting closes every proxied connection and refuses new ones: for the replica behind it
    the database is gone, while every other session (other tests, other replicas) is untouched.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        if self._listener is not None:
            _close(self._listener)
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def through(proxy: CuttableProxy, database_url: str, name: str) -> str:
    """``database_url`` reaching the same database (and schema) through ``proxy``."""
    params = conninfo_to_dict(database_url)
    user = quote(str(params.get("user", "postgres")), safe="")
    password = params.get("password")
    credentials = user if password is None else f"{user}:{quote(str(password), safe='')}"
    options = quote(str(params["options"]), safe="")
    return (
        f"postgresql://{credentials}@127.0.0.1:{proxy.port}/{quote(str(params['dbname']), safe='')}"
        f"?options={options}&application_name={name}"
    )


async def wait_for_status(client: httpx.AsyncClient, path: str, status: int, within: float) -> None:
    last: list[Any] = [None]

    async def answers() -> bool:
        try:
            last[0] = (await client.get(path)).status_code
        except httpx.TransportError as error:
            last[0] = error
        return bool(last[0] == status)

    await wait_until_async(answers, lambda: f"{path} answers {status} (last: {last[0]})", within=within, every=0.2)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["status"] == 503


async def test_a_replica_cut_off_from_the_database_answers_503_and_recovers(database_url: str) -> None:
    """While its database is unreachable a replica answers /readyz and ingest with 503
    problem+json (never a 2xx for an event it did not store), and recovers by itself."""
    params = conninfo_to_dict(database_url)
    proxy = CuttableProxy(str(params.get("host", "127.0.0.1")), int(str(params.get("port", 5432))))
    with serving(through(proxy, database_url, f"lw-cut-{uuid.uuid4().hex[:8]}")) as (server,):
        async with clients(server) as (client,):
            run_id = await create_run_async(client)
            stored = [chunk("before ", "e-before")]
            await post(client, run_id, *stored)

            proxy.cut()
            await wait_for_status(client, "/readyz", 503, within=20)
            assert_unavailable(await client.get("/readyz"))
            assert_unavailable(await client.post(f"/v1/runs/{run_id}/events", json=[chunk("lost ", "e-lost")]))
            assert_unavailable(await client.post("/v1/runs", json={}))
            assert (await client.get("/healthz")).status_code == 200  # alive, only not ready

            proxy.restore()
            await wait_for_status(client, "/readyz", 200, within=30)
            after = chunk("after", "e-after")
            await post(client, run_id, after)
            stored.append(after)
            log = await logged(client, run_id)
            assert [entry["event"] for entry in log[1:]] == stored  # nothing that got a 503
            assert [entry["seq"] for entry in log] == [1, 2, 3]
    proxy.cut()


async def test_terminated_connections_are_replaced_without_a_failed_request(
    replicas: list[ServerProcess], database_url: str, names: tuple[str, str]
) -> None:
    """After pg_terminate_backend kills every session of replica A (pool and listener), A's
    next requests succeed and its subscribers again hear B's commits."""
    async with clients(*replicas) as (a, b):
        run_id = await create_run_async(a)
        with psycopg.connect(database_url, autocommit=True) as connection:
            killed = connection.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                (names[0],),
            ).fetchone()
        assert killed is not None and killed[0] >= 2  # pooled connections and the listener
        # Dead pooled connections are found before anything could commit, and replaced.
        assert (await post(a, run_id, chunk("still here")))["accepted"] == 1
        await wait_for_status(a, "/readyz", 200, within=20)
        async with open_stream(a, f"/v1/runs/{run_id}/stream") as stream:
            assert (await stream.next()).event == "run/snapshot"
            await end(b, run_id)
            async with asyncio.timeout(PROMPT_SECONDS):
                assert (await stream.next()).event == "subagent/end"
        assert (await a.get(f"/v1/runs/{run_id}/result")).json()["output"] == [text("still here")]

