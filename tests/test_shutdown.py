"""Graceful shutdown and connection lifetime: streams are told to reconnect, ingests finish."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.servers import ServerProcess, threaded_app_server, threaded_server
from tests.sse import open_stream, payload


@pytest.mark.slow
def test_sigterm_drains_streams_and_finishes_the_ingest_in_flight(tmp_path: Path) -> None:
    """On SIGTERM a subscriber gets server/reconnect, an NDJSON ingest in flight completes, then it exits."""
    env = {"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}", "LASTWORD_DRAIN_SECONDS": "10",
           "LASTWORD_KEEPALIVE_SECONDS": "1"}
    server = ServerProcess(env, tmp_path).start()
    try:
        run = httpx.post(server.url + "/v1/runs", json={"runId": "draining"}).json()["runId"]
        first_half_sent, terminated = threading.Event(), threading.Event()
        lines = [orjson.dumps({"type": "x-line", "eventId": f"e{n}", "n": n}) + b"\n" for n in range(6)]

        def body() -> Iterator[bytes]:
            yield b"".join(lines[:3])
            first_half_sent.set()
            terminated.wait(10)
            yield b"".join(lines[3:])

        answers: list[httpx.Response] = []
        ingest = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{server.url}/v1/runs/{run}/events", content=body(),
            headers={"content-type": "application/x-ndjson"}, timeout=20)))

        async def subscribe() -> list[Any]:
            async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
                async with open_stream(client, f"/v1/runs/{run}/stream") as stream:
                    snapshot = await stream.next()
                    assert snapshot.event == "run/snapshot"
                    ingest.start()
                    await asyncio.to_thread(first_half_sent.wait, 10)
                    while httpx.get(f"{server.url}/v1/runs/{run}").json()["lastSeq"] < 4:
                        await asyncio.sleep(0.05)  # the first three lines are stored
                    assert server.process is not None
                    server.process.send_signal(signal.SIGTERM)
                    rest = await stream.until_closed()
                    terminated.set()
                    return rest

        rest = asyncio.run(subscribe())
        assert [event.event for event in rest] == ["server/reconnect"]
        assert payload(rest[0]) == {"reason": "shutdown", "lastEventId": 1}
        ingest.join(20)
        assert answers and answers[0].status_code == 200, answers
        assert answers[0].json()["accepted"] == 6
        assert server.process is not None
        # A graceful shutdown on SIGTERM ends with status 0 (a container's clean exit), not by
        # the signal uvicorn raises again once it is done.
        assert server.process.wait(timeout=20) == 0
    finally:
        server.kill()

    restarted = ServerProcess(env, tmp_path).start()
    try:
        events = httpx.get(f"{restarted.url}/v1/runs/draining/events").json()["events"]
        assert [e["event"].get("n") for e in events if e["event"]["type"] == "x-line"] == list(range(6))
    finally:
        restarted.stop()


def test_streams_are_asked_to_reconnect_when_their_lifetime_ends(make_settings: Any) -> None:
    """After sse_max_lifetime_seconds a stream sends server/reconnect and closes; resuming loses nothing."""

    async def main(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=20) as client:
            run = (await client.post("/v1/runs", json={"mode": "continuable"})).json()["runId"]
            async with open_stream(client, f"/v1/runs/{run}/stream") as stream:
                events = await stream.until_closed()
            assert [e.event for e in events] == ["run/snapshot", "server/reconnect"]
            assert payload(events[1])["reason"] == "lifetime"
            await client.post(f"/v1/runs/{run}/end", json={"stopReason": "completed"})
            async with open_stream(client, f"/v1/runs/{run}/stream", last_event_id=events[0].id) as resumed:
                assert (await resumed.next()).event == "subagent/end"
            for feed_path in ("/v1/stream",):
                async with open_stream(client, feed_path) as feed:
                    assert [e.event for e in await feed.until_closed()] == ["server/reconnect"]

    with threaded_server(make_settings(sse_max_lifetime_seconds=1.5)) as url:
        asyncio.run(main(url))


def test_long_polls_answer_at_shutdown(make_settings: Any) -> None:
    """A ?wait= long poll in progress answers with the running result when the server shuts down."""
    answers: list[httpx.Response] = []
    with threaded_app_server(make_settings()) as (url, app):
        run = httpx.post(url + "/v1/runs", json={}).json()["runId"]
        poll = threading.Thread(target=lambda: answers.append(
            httpx.get(f"{url}/v1/runs/{run}/result", params={"wait": 60}, timeout=30)))
        poll.start()
        # Shut down only once the server holds the poll parked: a fixed pause lost that race on a
        # loaded CI machine (the poll connected after the listener had closed).
        deadline = time.monotonic() + 30
        while app.state.core.runs.result_polls_waiting != 1:
            assert poll.is_alive() and time.monotonic() < deadline, "the poll never parked"
            threading.Event().wait(0.01)
    poll.join(30)
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["status"] == "running"
