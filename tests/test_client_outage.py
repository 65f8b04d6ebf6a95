"""Both clients ride out a restart of the service (SPEC §16a): a CLI's output streamed through
``ingest_cli_stream`` and a stream pusher's deltas are sent again, from the first line, after a
lost connection, with growing pauses, for ``retry_seconds``; nothing is lost or stored twice.

The service is a real process killed (``kill -9``) and started again on the same port while a
body is in flight; the test says when, from inside the body's own iterable, so nothing races a
sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword import AsyncLastwordClient, LastwordClient

from tests.polling import wait_until, wait_until_async
from tests.servers import ServerProcess

REPO = Path(__file__).resolve().parents[1]
BODY = (REPO / "tests" / "cli_children" / "fixtures" / "codex" / "max_tokens_partial.ndjson").read_bytes()
PARTIAL = [{"type": "text", "text": "This answer is cut off at the token ceil"}]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess({"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
                             "LASTWORD_LOG_LEVEL": "error"}, cwd=REPO).start()
    try:
        yield process
    finally:
        process.stop()


def logged(url: str, run_id: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/v1/runs/{run_id}/events", params={"limit": 1000}, timeout=10).json()
    return [entry["event"] for entry in body["events"]]


def event_ids(url: str, run_id: str) -> list[str]:
    return [event["eventId"] for event in logged(url, run_id) if "eventId" in event]


def restart_after_some_lines(server: ServerProcess, run_id: str, lines: list[bytes]) -> Iterator[bytes]:
    """The CLI's lines, the service killed and started again once the first half is stored."""
    half = len(lines) // 2
    yield from lines[:half]
    wait_until(lambda: len(event_ids(server.url, run_id)) >= 2, "the first lines are stored")
    server.kill()
    server.start()
    yield from lines[half:]


def assert_stored_once(url: str, run_id: str) -> None:
    ids = event_ids(url, run_id)
    assert len(ids) == len(set(ids))


def test_the_sync_client_sends_a_streamed_cli_output_again_after_a_restart(server: ServerProcess) -> None:
    lines = BODY.splitlines(keepends=True)
    with LastwordClient(server.url, backoff=0.05) as client:
        run_id = client.create_run().runId
        answer = client.ingest_cli_stream(run_id, "codex", restart_after_some_lines(server, run_id, lines))
        assert answer.stopReason == "max_tokens"
        assert client.result(run_id).output == PARTIAL
    assert_stored_once(server.url, run_id)


def test_the_async_client_sends_a_streamed_cli_output_again_after_a_restart(server: ServerProcess) -> None:
    lines = BODY.splitlines(keepends=True)

    async def main() -> None:
        async with AsyncLastwordClient(server.url, backoff=0.05) as client:
            run_id = (await client.create_run()).runId

            async def body() -> AsyncIterator[bytes]:
                for line in restart_after_some_lines(server, run_id, lines):
                    yield line
                    await asyncio.sleep(0)

            answer = await client.ingest_cli_stream(run_id, "codex", body())
            assert answer.stopReason == "max_tokens"
            assert (await client.result(run_id)).output == PARTIAL
            assert_stored_once(server.url, run_id)

    asyncio.run(main())


def test_a_stream_pusher_outlasts_an_outage_longer_than_its_retries(server: ServerProcess) -> None:
    """The service stays down for more tries than ``retries`` allows (each a lost connection):
    within ``retry_seconds`` the pusher keeps sending, and flushes once the service is back."""
    with LastwordClient(server.url, retries=2, backoff=0.01) as client:
        run_id = client.create_run().runId
        with client.stream_pusher(run_id) as pusher:
            pusher.push_text("before ")
            pusher.flush()
            server.kill()
            tried = pusher.requests
            pusher.push_text("during ")
            wait_until(lambda: pusher.requests >= tried + 6, "the pusher tried six times while the service was down")
            server.start()
            pusher.push_text("after")
            pusher.flush()
    texts = [event["delta"]["text"] for event in logged(server.url, run_id) if event["type"] == "assistant/chunk"]
    assert texts == ["before ", "during ", "after"]


@pytest.mark.anyio
async def test_an_async_stream_pusher_outlasts_an_outage_longer_than_its_retries(server: ServerProcess) -> None:
    async with AsyncLastwordClient(server.url, retries=2, backoff=0.01) as client:
        run_id = (await client.create_run()).runId
        async with client.stream_pusher(run_id) as pusher:
            pusher.push_text("before ")
            await pusher.flush()
            await asyncio.to_thread(server.kill)
            tried = pusher.requests
            pusher.push_text("during ")

            async def tried_six_times() -> bool:
                return pusher.requests >= tried + 6

            await wait_until_async(tried_six_times, "the pusher tried six times while the service was down")
            await asyncio.to_thread(server.start)
            pusher.push_text("after")
            await pusher.flush()
    texts = [event["delta"]["text"] for event in logged(server.url, run_id) if event["type"] == "assistant/chunk"]
    assert texts == ["before ", "during ", "after"]


def test_the_pusher_gives_up_once_retry_seconds_ran_out(server: ServerProcess) -> None:
    """A service down for longer than ``retry_seconds``: the failure is raised by ``flush``."""
    with LastwordClient(server.url, retries=0, backoff=0.01, retry_seconds=0.5) as client:
        run_id = client.create_run().runId
        pusher = client.stream_pusher(run_id)
        server.kill()
        pusher.push_text("lost")
        with pytest.raises(httpx.TransportError):
            pusher.flush()
