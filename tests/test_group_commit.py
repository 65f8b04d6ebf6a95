"""Group commit on SQLite (issue 15): writes pending together share one transaction, yet each
request is answered only after the commit that holds its own events.

The crash test runs ``lastword serve`` as a process with a test-only gate
(``LASTWORD_TEST_HOLD_COMMIT_DIR``): while ``hold`` exists in that directory the writer stops
after writing a batch and before its ``COMMIT``, and creates ``paused``. The test kills the
server there with SIGKILL and checks that no request of that batch was answered and that the
restarted server has exactly the answered events.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword.store.group import MAX_BATCH, GroupWriter
from lastword.store.tx import Tx

from tests.api_helpers import assert_problem, chunk, create, logged, result, serving
from tests.servers import ServerProcess
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
        "LASTWORD_TEST_HOLD_COMMIT_DIR": str(gate),
    }
    process = ServerProcess(env, cwd=REPO).start()
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
