"""Group commit on SQLite (issue 15): writes pending together share one transaction, yet each
request is answered only after the commit that holds its own events.

The crash test runs the service as a process whose SQLite store has a gate
(:mod:`tests.held_server`): while ``hold`` exists in that directory the writer stops after
writing a batch and before its ``COMMIT``, and creates ``paused``. The test kills the
server there with SIGKILL and checks that no request of that batch was answered and that the
restarted server has exactly the answered events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword.errors import Conflict
from lastword.rules.ds import Producer
from lastword.store.sql.batch import MAX_BATCH
from lastword.store.sqlite.group import GroupWriter
from lastword.store.sqlite.store import SqliteStore
from lastword.store.sql.tx import Tx

from tests.api_helpers import assert_problem, chunk, create, logged, result, serving
from tests.servers import ServerProcess
from tests.store_contract import T0, spec
from tests.builders import chunk as chunk_event
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 3
WRITERS = 12


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {
        "LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
        "LASTWORD_LEASE_SECONDS": "3600",
        "LASTWORD_LOG_LEVEL": "warning",
    }
    process = ServerProcess(env, cwd=REPO, command=[sys.executable, "-m", "tests.held_server", str(gate)]).start()
    try:
        yield process, gate
    finally:
        process.kill()


def wait_for(path: Path, seconds: float = 20) -> None:
    wait_until(path.exists, f"{path.name} appears", within=seconds)


def chunk_ids(client: httpx.Client, run_id: str) -> list[str]:
    return [item["event"]["eventId"] for item in logged(client, run_id) if item["event"]["type"] == "assistant/chunk"]


@pytest.mark.slow
def test_no_request_is_answered_before_its_commit(gated: tuple[ServerProcess, Path]) -> None:
    server, gate = gated
    runs = [f"gc-{n}" for n in range(3)]
    acknowledged: dict[str, list[str]] = {run_id: [] for run_id in runs}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for run_id in runs:
            create(client, runId=run_id)
    for round_number in range(ROUNDS):
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for run_id in runs:  # answered before the gate closes: must survive
                event_id = f"r{round_number}-before-{run_id}"
                assert client.post(f"/v1/runs/{run_id}/events", json=chunk("a", event_id)).status_code == 200
                acknowledged[run_id].append(event_id)
        (gate / "hold").touch()
        answered: list[tuple[str, int]] = []
        lock = threading.Lock()

        def send(n: int, round_number: int = round_number) -> None:
            run_id = runs[n % len(runs)]
            try:
                with httpx.Client(base_url=server.url, timeout=30) as own:
                    response = own.post(f"/v1/runs/{run_id}/events", json=chunk("b", f"r{round_number}-held-{n}"))
            except httpx.TransportError:
                return  # killed while waiting: never answered
            with lock:
                answered.append((run_id, response.status_code))

        threads = [threading.Thread(target=send, args=(n,)) for n in range(WRITERS)]
        for thread in threads:
            thread.start()
        wait_for(gate / "paused")
        # The batch is written and its COMMIT has not run: nobody may have heard back.
        for thread in threads:
            thread.join(timeout=0.05)
        with lock:
            assert answered == [], f"answered before the commit: {answered}"
        server.kill()
        for thread in threads:
            thread.join(timeout=30)
        with lock:
            assert answered == []
        (gate / "hold").unlink()
        (gate / "paused").unlink()
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for run_id in runs:
                assert chunk_ids(client, run_id) == acknowledged[run_id]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_concurrent_writes_share_commits_and_fail_alone(tmp_path_factory: pytest.TempPathFactory, backend: str) -> None:
    """Many one-event requests at once on a few runs, some of them conflicting retries: every
    accepted event is stored once with a gap-free seq, each conflict changes nothing, and the
    fold each turn ends with holds exactly the log's text in seq order."""
    with serving(backend, tmp_path_factory) as url, httpx.Client(base_url=url, timeout=30) as api:
        clients = [httpx.Client(base_url=url, timeout=30) for _ in range(WRITERS)]
        for _ in range(20):
            runs = [create(api)["runId"] for _ in range(3)]
            for run_id in runs:  # an eventId whose retry with other content is a 409
                assert api.post(f"/v1/runs/{run_id}/events", json=chunk("x", "taken")).status_code == 200

            def send(writer: int, runs: list[str] = runs) -> list[tuple[int, httpx.Response]]:
                answers = []
                for n in range(writer, 48, WRITERS):
                    body: dict[str, Any] = chunk("y", "taken") if n % 5 == 0 else chunk(f"<{n}>", f"e{n}")
                    answers.append((n, clients[writer].post(f"/v1/runs/{runs[n % 3]}/events", json=body)))
                return answers

            with ThreadPoolExecutor(WRITERS) as pool:
                answers = [answer for share in pool.map(send, range(WRITERS)) for answer in share]
            for n, response in answers:
                if n % 5 == 0:
                    assert_problem(response, 409, "event_id_conflict")
                else:
                    assert response.status_code == 200, response.text
            for index, run_id in enumerate(runs):
                log = logged(api, run_id)
                assert [item["seq"] for item in log] == list(range(1, len(log) + 1))
                texts = [item["event"]["delta"]["text"] for item in log if item["event"]["type"] == "assistant/chunk"]
                assert sorted(texts[1:]) == sorted(f"<{n}>" for n in range(48) if n % 3 == index and n % 5)
                assert api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "cancelled"}).status_code == 200
                output = result(api, run_id).get("output", [])
                assert "".join(block["text"] for block in output if block["type"] == "text") == "".join(texts)
        for client in clients:
            client.close()


def test_a_burst_larger_than_one_transaction_is_written_whole_and_in_order(tmp_path: Path) -> None:
    """Writes submitted together, more of them than one transaction takes, each run once, in the
    order they were submitted, and each is answered with its own result."""
    connection = sqlite3.connect(tmp_path / "burst.db", isolation_level=None, check_same_thread=False)
    connection.execute("CREATE TABLE burst (n INTEGER)")
    writer = GroupWriter(lambda: connection)
    count = 2 * MAX_BATCH + 3

    def write(n: int) -> Any:
        def work(tx: Tx) -> int:
            tx.run("INSERT INTO burst (n) VALUES (?)", (n,))
            return n * n
        return work

    async def burst() -> list[int]:
        return list(await asyncio.gather(*(writer.submit(write(n)) for n in range(count))))

    try:
        assert asyncio.run(burst()) == [n * n for n in range(count)]
    finally:
        writer.close()
    assert [n for (n,) in connection.execute("SELECT n FROM burst ORDER BY rowid")] == list(range(count))
    connection.close()


@pytest.mark.anyio
async def test_a_held_change_sqlite_refuses_gives_the_batch_up_and_it_runs_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A write of a batch sends its changes when it returns, without a savepoint; when SQLite
    refuses its second change (here a trigger refuses run ``b``'s update, after its event's
    row went in), the batch is given up and runs again with a savepoint per write: ``b`` is
    answered 503 and leaves nothing, the others commit."""
    store = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600)
    await store.open()
    try:
        for run_id in ("a", "b", "c"):
            await store.create_run(spec(run_id), T0)
        refuse = sqlite3.connect(tmp_path / "lastword.db")
        refuse.execute("CREATE TRIGGER refuse_b BEFORE UPDATE ON runs WHEN NEW.run_id = 'b' "
                       "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END")
        refuse.commit()
        refuse.close()
        with caplog.at_level(logging.INFO, logger="lastword.store.sqlite.group"):
            answers = await asyncio.gather(
                store.append("a", [chunk_event("a1")], T0), store.append("b", [chunk_event("b1")], T0),
                store.append("c", [chunk_event("c1")], T0), return_exceptions=True,
            )
        assert [type(answer).__name__ for answer in answers] == ["AppendOutcome", "Unavailable", "AppendOutcome"]
        assert [record.getMessage() for record in caplog.records if "given up" in record.getMessage()] == [
            "a group commit of 3 writes was given up (refused by a trigger); they run again, each in a savepoint"
        ]
        for run_id, texts in (("a", ["a1"]), ("b", []), ("c", ["c1"])):
            events = await store.events_after(run_id, 0, 10)
            assert [event.body["delta"]["text"] for event in events if event.type == "assistant/chunk"] == texts
            assert (await store.get_run(run_id)).last_seq == len(events)
    finally:
        await store.close()


def test_each_write_of_a_batch_sees_its_own_changes_and_a_refused_one_leaves_none(tmp_path: Path) -> None:
    """Writes of one batch, each changing a table in the ways the store's writes do: held
    changes, a change sent at once (``INSERT … RETURNING``), reads after a change. Each read
    sees what its write changed before it; a write refused after it sent a change leaves
    nothing of it; every other write's changes all commit."""
    connection = sqlite3.connect(tmp_path / "batch.db", isolation_level=None, check_same_thread=False)
    connection.execute("CREATE TABLE rows (name TEXT)")
    writer = GroupWriter(lambda: connection)

    def count(tx: Tx, prefix: str) -> int:
        return int(tx.one("SELECT count(*) FROM rows WHERE name LIKE ?", (f"{prefix}%",))[0])

    def reads_its_change(tx: Tx) -> int:
        tx.run("INSERT INTO rows (name) VALUES ('r1')")
        seen = count(tx, "r")
        tx.run("INSERT INTO rows (name) VALUES ('r2')")
        return seen

    def sends_at_once(tx: Tx) -> int:
        tx.run("INSERT INTO rows (name) VALUES ('s1')")
        rowid = int(tx.one("INSERT INTO rows (name) VALUES ('s2') RETURNING rowid")[0])
        tx.run("INSERT INTO rows (name) VALUES ('s3')")
        return rowid

    def refused_after_sending(tx: Tx) -> None:
        tx.one("INSERT INTO rows (name) VALUES ('x1') RETURNING rowid")  # its first change
        tx.run("INSERT INTO rows (name) VALUES ('x2')")
        raise Conflict("refused after its changes were sent")

    def refused_before_sending(tx: Tx) -> None:
        tx.many("INSERT INTO rows (name) VALUES (?)", [("y1",), ("y2",)])
        raise Conflict("refused with its changes held")

    def plain(tx: Tx) -> int:
        tx.many("INSERT INTO rows (name) VALUES (?)", [("p1",), ("p2",)])
        return count(tx, "")  # every change of the batch before it, and its own

    async def batch() -> list[Any]:
        works = [reads_its_change, refused_after_sending, sends_at_once, refused_before_sending, plain]
        return list(await asyncio.gather(*(writer.submit(work) for work in works), return_exceptions=True))

    try:
        answers = asyncio.run(batch())
    finally:
        writer.close()
    assert [type(answer).__name__ for answer in answers] == ["int", "Conflict", "int", "Conflict", "int"]
    assert answers[0] == 1 and answers[4] == 7, answers
    names = [name for (name,) in connection.execute("SELECT name FROM rows ORDER BY rowid")]
    assert names == ["r1", "r2", "s1", "s2", "s3", "p1", "p2"]
    assert answers[2] == 4  # s2's rowid: r1, r2 and s1 before it
    connection.close()


@contextlib.asynccontextmanager
async def four_runs(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """A SQLite store holding the runs ``a`` to ``d``."""
    store = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600)
    await store.open()
    try:
        for run_id in ("a", "b", "c", "d"):
            await store.create_run(spec(run_id), T0)
        yield store
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def traced(store: SqliteStore) -> AsyncIterator[list[str]]:
    """The statements the store's writer runs meanwhile (traced on its own connection, from its
    thread: they are its batches')."""
    statements: list[str] = []
    await store._writer.submit(lambda tx: tx.cursor.connection.set_trace_callback(statements.append))
    try:
        yield statements
    finally:
        await store._writer.submit(lambda tx: tx.cursor.connection.set_trace_callback(None))


@pytest.mark.anyio
async def test_appends_of_one_batch_see_their_run_as_the_writes_before_them_left_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch's appends have their runs' rows read together when it begins; each append
    still sees its run as the writes before it in the batch left it: ``b``'s append comes
    after a write that ended ``b``'s turn and is refused, ``a``'s second append numbers on from
    its first, as ``d``'s second batch of events in one write does. The batch commits as one (nothing is given up and run again), and its runs'
    rows are not read once per append."""
    async with four_runs(tmp_path) as store:
        async with traced(store) as statements:
            with caplog.at_level(logging.INFO, logger="lastword.store.sqlite.group"):
                answers = await asyncio.gather(
                    store.append("a", [chunk_event("a1")], T0), store.append("c", [chunk_event("c1")], T0),
                    store.append_batches("d", [([chunk_event("d1")], [json.dumps(chunk_event("d1"))]),
                                               ([chunk_event("d2")], [json.dumps(chunk_event("d2"))])], T0),
                    store.end_turn("b", "completed", None, T0),
                    store.append("b", [chunk_event("b1")], T0), store.append("a", [chunk_event("a2")], T0),
                    return_exceptions=True,
                )
        assert [type(answer).__name__ for answer in answers] == [
            "AppendOutcome", "AppendOutcome", "AppendOutcome", "EndOutcome", "RunEnded", "AppendOutcome"]
        assert not [record for record in caplog.records if "given up" in record.getMessage()]
        for run_id, texts in (("a", ["a1", "a2"]), ("b", []), ("c", ["c1"]), ("d", ["d1", "d2"])):
            events = await store.events_after(run_id, 0, 10)
            assert [event.body["delta"]["text"] for event in events if event.type == "assistant/chunk"] == texts
            assert [event.seq for event in events] == list(range(1, len(events) + 1))
            assert (await store.get_run(run_id)).last_seq == len(events)
        run_reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT") and " FROM runs " in sql]
        # Six writes: the batch's rows read once, then by the end (not an append), and again by
        # each append after a change to its run (b1, a2, d2): not one read per write.
        assert len(run_reads) <= 5, "\n".join(sql[-60:] for sql in run_reads)


@pytest.mark.anyio
async def test_appends_of_one_batch_see_their_event_ids_as_the_writes_before_them_left_them(tmp_path: Path) -> None:
    """A batch's appends have the events under their eventIds read together when it begins;
    each still finds the ids the writes before it in the batch stored: ``a``'s second append
    repeats an id its first stored (a duplicate) beside a new one, ``b`` repeats an event stored
    before the batch, ``c`` carries ``a``'s id in its own log (new there), and ``d``'s append
    comes after a write that names no run. The look-ups are not one statement per append."""
    async with four_runs(tmp_path) as store:
        await store.append("b", [chunk_event("b0", "id-b")], T0)
        await store.append("d", [chunk_event("d0", "id-d")], T0)
        async with traced(store) as statements:
            answers = await asyncio.gather(
                store.append("a", [chunk_event("a1", "id-a")], T0),
                store.append("b", [chunk_event("b0", "id-b")], T0),
                store.append("c", [chunk_event("c1", "id-a")], T0),
                store.append("a", [chunk_event("a1", "id-a"), chunk_event("a2", "id-a2")], T0),
                store._writer.submit(lambda tx: tx.run("DELETE FROM events WHERE run_id = 'd'")),
                store.append("d", [chunk_event("d0", "id-d")], T0),
            )
        assert [(answer.accepted, answer.duplicates) for answer in answers[:4]] == [(1, 0), (0, 1), (1, 0), (1, 1)]
        assert (answers[5].accepted, answers[5].duplicates) == (1, 0)  # its stored id was deleted in the batch
        for run_id, texts in (("a", ["a1", "a2"]), ("b", ["b0"]), ("c", ["c1"]), ("d", ["d0"])):
            events = await store.events_after(run_id, 0, 10)
            assert [event.body["delta"]["text"] for event in events if event.type == "assistant/chunk"] == texts
        id_reads = [sql for sql in statements if "events_by_event_id" in sql]
        # Five appends: the batch's ids read once, then by a's second append (after a's first)
        # and d's (after the write naming no run): not one read per append.
        assert len(id_reads) <= 3, "\n".join(sql[-80:] for sql in id_reads)


@pytest.mark.anyio
async def test_appends_of_a_later_batch_see_their_runs_as_the_committed_batches_left_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The runs a batch's appends left are handed to the next batch's appends without their rows
    being read, until a write that names no run or an append that failed may have changed them:
    ``b``'s append after its end is refused, ``e``'s after its end and a new turn goes in that
    turn, ``c``'s after its refused append numbers on from what was committed; every seq follows
    the last, and no batch is given up (as one handed a stale run would be, its rows refused)."""
    caplog.set_level(logging.INFO, logger="lastword.store.sqlite.group")
    async with four_runs(tmp_path) as store:
        await store.create_run(spec("e", mode="continuable"), T0)
        async with traced(store) as statements:
            await asyncio.gather(*(store.append(run_id, [chunk_event(f"{run_id}1", f"id-{run_id}1")], T0)
                                   for run_id in "abce"))
            statements.clear()
            await asyncio.gather(*(store.append(run_id, [chunk_event(f"{run_id}2")], T0) for run_id in "abce"))
            run_reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT") and " FROM runs " in sql]
            assert run_reads == [], "\n".join(sql[-60:] for sql in run_reads)
            refused = await asyncio.gather(
                store.append("a", [chunk_event("a3")], T0),
                store.append("c", [chunk_event("other", "id-c1")], T0),  # its eventId, other content: refused
                return_exceptions=True,
            )
            assert [type(answer).__name__ for answer in refused] == ["AppendOutcome", "EventIdConflict"]
            await store.end_turn("b", "completed", None, T0)
            await store.end_turn("e", "completed", None, T0)
            await store.start_turn("e", T0)
            answers = await asyncio.gather(
                *(store.append(run_id, [chunk_event(f"{run_id}4")], T0) for run_id in "abce"), return_exceptions=True)
        assert [type(answer).__name__ for answer in answers] == ["AppendOutcome", "RunEnded", "AppendOutcome", "AppendOutcome"]
        assert not [record for record in caplog.records if "given up" in record.getMessage()]
        for run_id, texts in (("a", ["a1", "a2", "a3", "a4"]), ("b", ["b1", "b2"]), ("c", ["c1", "c2", "c4"]),
                              ("e", ["e1", "e2", "e4"])):
            events = await store.events_after(run_id, 0, 10)
            assert [event.body["delta"]["text"] for event in events if event.type == "assistant/chunk"] == texts
            assert [event.seq for event in events] == list(range(1, len(events) + 1))
            assert (await store.get_run(run_id)).last_seq == len(events)
        assert [event.turn for event in await store.events_after("e", 0, 10) if event.type == "assistant/chunk"] == [1, 1, 2]


@pytest.mark.anyio
async def test_an_append_as_a_producer_finds_the_event_ids_its_run_holds(tmp_path: Path) -> None:
    """An append of a Durable Streams producer (and one without) looks its eventIds up in its run's
    log, listed once when it is submitted: the one stored before is a duplicate, the other new."""
    async with four_runs(tmp_path) as store:
        await store.append("a", [chunk_event("a1", "id-a1")], T0)
        await store.append("b", [chunk_event("b1", "id-b1")], T0)
        answers = await asyncio.gather(
            store.append_as_producer("a", [chunk_event("a1", "id-a1"), chunk_event("a2", "id-a2")], T0, None,
                                     Producer("p", 0, 0)),
            store.append_as_producer("b", [chunk_event("b1", "id-b1"), chunk_event("b2", "id-b2")], T0, None, None),
        )
        assert [(outcome.accepted, outcome.duplicates) for outcome, _ in answers] == [(1, 1), (1, 1)]
        for run_id in "ab":
            events = await store.events_after(run_id, 0, 10)
            texts = [event.body["delta"]["text"] for event in events if event.type == "assistant/chunk"]
            assert texts == [f"{run_id}1", f"{run_id}2"]
