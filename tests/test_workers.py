"""``lastword serve --workers N`` (SPEC §10, §18): N processes on one port, each a full replica.

Each test starts the real command as a subprocess, on a SQLite file or a PostgreSQL schema.
Which worker answers is chosen through the second listener each worker gets in tests
(``LASTWORD_WORKER_PORTS``, :mod:`lastword.cli.workers`): one port per worker, beside the
shared one. Every wait is bounded; races are repeated with explicit signals (a barrier), never
with sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import accepted, logged
from tests.builders import chunk
from tests.polling import wait_until
from tests.servers import free_port
from tests.sse import ids, open_stream, payload, strictly_increasing

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Workers:
    """``lastword serve --workers N`` in its own process, with one own port per worker."""

    def __init__(self, database_url: str, count: int = 2, **env: str) -> None:
        self.port = free_port()
        self.own_ports = [free_port() for _ in range(count)]
        self.url = f"http://127.0.0.1:{self.port}"
        self.own = [f"http://127.0.0.1:{port}" for port in self.own_ports]
        self.env = {**os.environ, "LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning",
                    "LASTWORD_LEASE_SECONDS": "0", "LASTWORD_KEEPALIVE_SECONDS": "1",
                    "LASTWORD_HOST": "127.0.0.1", "LASTWORD_PORT": str(self.port),
                    "LASTWORD_WORKER_PORTS": ",".join(map(str, self.own_ports)), **env}
        self.command = [sys.executable, "-m", "lastword.cli", "serve", "--workers", str(count)]
        handle, name = tempfile.mkstemp(prefix="lastword-test-workers-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Workers:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command, env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                            stderr=log)
        for url in self.own:
            self._wait_ready(url)
        return self

    def _wait_ready(self, url: str) -> None:
        wait_until(lambda: self._ready(url), lambda: f"worker ready: {self.log()}", within=60)

    def _ready(self, url: str) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the workers exited: {self.log()}")
        try:
            return httpx.get(url + "/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text()[-3000:]

    def worker_pid(self, index: int) -> int:
        """The process of worker ``index`` (its command line names it)."""
        assert self.process is not None
        for pid in _children(self.process.pid):
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"--index" in arguments and arguments[arguments.index(b"--index") + 1] == str(index).encode():
                return pid
        raise AssertionError(f"no worker {index} under {self.process.pid}")

    def stop(self) -> None:
        pids = [] if self.process is None or self.process.poll() is not None else _children(self.process.pid)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(child) for child in text)
    return found


@contextmanager
def workers(database_url: str, count: int = 2, **env: str) -> Iterator[Workers]:
    served = Workers(database_url, count, **env)
    try:
        yield served.start()
    finally:
        served.stop()






# -- one worker hears another -------------------------------------------------------------


async def test_a_subscriber_on_one_worker_hears_what_another_worker_committed(database_url: str) -> None:
    """A run's stream and the firehose on worker A carry, in order, the events posted through B;
    a Durable Streams reader up to date on A hears B's append."""
    # Idle streams re-read nothing for minutes: what A sends, it heard.
    with workers(database_url, LASTWORD_KEEPALIVE_SECONDS="300", LASTWORD_DS_SSE_SECONDS="600") as served:
        async with (httpx.AsyncClient(base_url=served.own[0], timeout=TIMEOUT) as a,
                    httpx.AsyncClient(base_url=served.own[1], timeout=TIMEOUT) as b):
            run_id = accepted(await b.post("/v1/runs", json={}))["runId"]
            async with open_stream(a, "/v1/stream") as feed, \
                    open_stream(a, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                assert (await stream.next()).event == "run/snapshot"
                accepted(await b.post(f"/v1/runs/{run_id}/events", json=[chunk("one "), chunk("two")]))
                accepted(await b.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"}))
                live = await stream.until_closed()
                assert [event.event for event in live] == ["assistant/chunk", "assistant/chunk", "subagent/end"]
                assert [payload(event)["delta"]["text"] for event in live[:2]] == ["one ", "two"]
                assert strictly_increasing(ids(live))
                finish = await feed.next()
                assert (finish.event, payload(finish)["runId"]) == ("subagent/end", run_id)

            created = accepted_201(await b.put("/ds/w/one", headers={"content-type": "application/json"}))
            offset = created.headers["Stream-Next-Offset"]
            async with a.stream("GET", "/ds/w/one", params={"offset": offset, "live": "sse"}) as response:
                assert response.status_code == 200
                events = ds_events(response)
                name, control = await asyncio.wait_for(anext(events), TIMEOUT)
                assert name == "control" and control["upToDate"] is True
                # The reader on A is up to date: B's append reaches it only by A hearing B.
                assert (await b.post("/ds/w/one", json={"n": 1})).status_code == 204
                name, data = await asyncio.wait_for(anext(events), TIMEOUT)
                assert (name, data) == ("data", [{"n": 1}])


def accepted_201(response: httpx.Response) -> httpx.Response:
    assert response.status_code == 201, response.text
    return response


async def ds_events(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    """``(event, data)`` of each SSE event of a Durable Streams read as it arrives."""
    name, data = "", []
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            name = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):])
        elif not line and name:
            yield name, json.loads("\n".join(data))
            name, data = "", []


# -- the same run through every worker -----------------------------------------------------


def test_a_runs_seqs_stay_gap_free_and_in_order_when_workers_write_it_at_once(database_url: str) -> None:
    """Two workers append to one run at the same moment, 200 times: the log's seqs are 1..n with
    no gap, each request's events keep their order, and the result holds every chunk in log order
    (the fold each process keeps is caught up with what the other appended)."""
    trials = 200
    with workers(database_url) as served, \
            httpx.Client(base_url=served.own[0], timeout=TIMEOUT) as a, \
            httpx.Client(base_url=served.own[1], timeout=TIMEOUT) as b:
        for trial in range(trials):
            run_id = accepted(a.post("/v1/runs", json={}))["runId"]
            # Each worker folds the run once first, so each holds a fold the other then moves past.
            accepted(a.post(f"/v1/runs/{run_id}/events", json=[chunk("a0 ")]))
            accepted(b.post(f"/v1/runs/{run_id}/events", json=[chunk("b0 ")]))
            barrier = threading.Barrier(2)
            errors: list[BaseException] = []

            def post(client: httpx.Client, name: str) -> None:
                try:
                    barrier.wait(timeout=TIMEOUT)
                    accepted(client.post(f"/v1/runs/{run_id}/events",
                                         json=[chunk(f"{name}1 "), chunk(f"{name}2 ")]))
                except BaseException as error:  # noqa: BLE001 - reported by the test below
                    errors.append(error)

            threads = [threading.Thread(target=post, args=(a, "a")), threading.Thread(target=post, args=(b, "b"))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(TIMEOUT)
            assert not errors, errors
            last = accepted((a if trial % 2 else b).post(f"/v1/runs/{run_id}/events", json=[chunk("end")]))
            log = logged(a, run_id)
            # subagent/start, then the seven chunks.
            assert [event["seq"] for event in log] == list(range(1, 9)), (trial, log)
            texts = [event["event"]["delta"]["text"] for event in log[1:]]
            assert texts.index("a1 ") < texts.index("a2 ") and texts.index("b1 ") < texts.index("b2 "), texts
            result = accepted((b if trial % 2 else a).get(f"/v1/runs/{run_id}/result"))
            assert result["output"] == [{"type": "text", "text": "".join(texts)}], (trial, texts, result)
            assert last["lastSeq"] == 8


# -- kill -9 of a worker -------------------------------------------------------------------


async def test_kill_9_of_a_worker_under_load_loses_nothing_acknowledged(database_url: str) -> None:
    """Writers post through both workers while worker 0 is killed with SIGKILL; every event
    acknowledged is in the log afterwards, the killed worker is started again, and a stream
    followed on it resumes on the other worker by its last id, missing nothing."""
    with workers(database_url) as served:
        with httpx.Client(base_url=served.url, timeout=TIMEOUT) as client:
            run_id = accepted(client.post("/v1/runs", json={}))["runId"]
        acknowledged: list[str] = []
        stop = threading.Event()
        half_way = threading.Event()

        def write(base: str, name: str) -> None:
            with httpx.Client(base_url=base, timeout=TIMEOUT) as writer:
                number = 0
                while not stop.is_set():
                    event_id = f"{name}-{number}"
                    number += 1
                    try:
                        response = writer.post(f"/v1/runs/{run_id}/events", json=[chunk(f"{event_id} ", event_id)])
                    except httpx.TransportError:
                        continue  # not acknowledged: the worker died under it
                    if response.status_code == 200:
                        acknowledged.append(event_id)
                        if len(acknowledged) >= 100:
                            half_way.set()

        writers = [threading.Thread(target=write, args=(base, name))
                   for base, name in ((served.own[0], "w0"), (served.own[1], "w1"), (served.url, "shared"))]
        async with httpx.AsyncClient(base_url=served.own[0], timeout=TIMEOUT) as a:
            async with open_stream(a, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                for thread in writers:
                    thread.start()
                assert await asyncio.to_thread(half_way.wait, TIMEOUT)
                heard = [event for event in await stream.take(20) if event.event == "assistant/chunk"]
                killed = served.worker_pid(0)
                os.kill(killed, signal.SIGKILL)
                # The parent starts worker 0 again: its own port answers from a new process.
                await asyncio.to_thread(wait_until, lambda: _pid_or_none(served, 0) not in (None, killed),
                                        "worker 0 restarted")
                await asyncio.to_thread(wait_until, lambda: served._ready(served.own[0]), "worker 0 ready")
                stop.set()
                for thread in writers:
                    await asyncio.to_thread(thread.join, TIMEOUT)
        last_id = ids(heard)[-1]
        with httpx.Client(base_url=served.own[1], timeout=TIMEOUT) as b:
            log = logged(b, run_id)
        assert [event["seq"] for event in log] == list(range(1, len(log) + 1))
        stored = {event["event"]["delta"]["text"].strip() for event in log if event["event"]["type"] == "assistant/chunk"}
        assert set(acknowledged) <= stored
        async with httpx.AsyncClient(base_url=served.own[1], timeout=TIMEOUT) as b2:
            async with open_stream(b2, f"/v1/runs/{run_id}/stream?include=chunks",
                                   last_event_id=str(last_id)) as resumed:
                rest: list[Any] = []
                while len(rest) < len(log) - last_id:
                    event = await resumed.next()
                    if event.event == "assistant/chunk":
                        rest.append(event)
        assert ids(rest) == list(range(last_id + 1, len(log) + 1))


def _pid_or_none(served: Workers, index: int) -> int | None:
    try:
        return served.worker_pid(index)
    except (AssertionError, FileNotFoundError):
        return None


# -- the drain and the start ---------------------------------------------------------------


async def test_sigterm_drains_every_worker_and_the_parent_exits_0(database_url: str) -> None:
    """SIGTERM to the parent: each worker's open stream is told to reconnect and ends, every
    worker exits, and the parent exits 0 within the drain."""
    with workers(database_url, LASTWORD_DRAIN_SECONDS="20") as served:
        pids = [served.worker_pid(index) for index in range(2)]
        async with (httpx.AsyncClient(base_url=served.own[0], timeout=TIMEOUT) as a,
                    httpx.AsyncClient(base_url=served.own[1], timeout=TIMEOUT) as b):
            run_id = accepted(await a.post("/v1/runs", json={}))["runId"]
            async with open_stream(a, f"/v1/runs/{run_id}/stream") as on_a, \
                    open_stream(b, f"/v1/runs/{run_id}/stream") as on_b:
                assert served.process is not None
                started = time.monotonic()
                served.process.send_signal(signal.SIGTERM)
                for stream in (on_a, on_b):
                    closing = await stream.until_closed()
                    assert "server/reconnect" in [event.event for event in closing]
        status = await asyncio.to_thread(served.process.wait, 20)
        assert status == 0, served.log()
        assert time.monotonic() - started < 20
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_workers_that_keep_dying_at_start_end_the_parent_with_status_1(tmp_path: Path) -> None:
    """A store that cannot be opened: each worker dies before it is ready; the parent gives up."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    served = Workers(f"sqlite:///{blocked}/under-a-file/lastword.db")
    served.process = subprocess.Popen(served.command, env=served.env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
    try:
        _, errors = served.process.communicate(timeout=120)
    finally:
        served.stop()
    assert served.process.returncode == 1, errors.decode()[-2000:]
    assert b"could not start" in errors


def test_auto_workers_are_the_cores_this_process_may_use_and_zero_is_a_bad_command_line() -> None:
    from lastword.settings import Settings

    assert Settings(workers="auto").workers == len(os.sched_getaffinity(0))
    refused = subprocess.run([sys.executable, "-m", "lastword.cli", "serve", "--workers", "0"], cwd=ROOT,
                             capture_output=True, timeout=60, env={**os.environ, "LASTWORD_PORT": str(free_port())})
    assert refused.returncode == 2, refused.stderr
    assert b"workers" in refused.stderr
