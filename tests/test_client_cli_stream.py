"""``ingest_cli_stream`` on both clients (SPEC §16): a CLI's output as one NDJSON request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from lastword import AsyncLastwordClient, LastwordClient
from tests.test_client import FlakyTransport

BODY = (Path(__file__).resolve().parent / "cli_children" / "fixtures" / "codex" / "max_tokens_partial.ndjson")
PARTIAL = [{"type": "text", "text": "This answer is cut off at the token ceil"}]


def test_a_list_of_lines_is_one_body_retried_after_a_lost_answer(base_url: str) -> None:
    """The first answer is lost; the retry sends the same lines and stores nothing twice."""
    lines = BODY.read_text().splitlines()  # without their newlines: the client adds them
    transport = FlakyTransport()
    with LastwordClient(base_url, backoff=0.01, transport=transport) as client:
        run = client.create_run(run_id="cli-list")
        answer = client.ingest_cli_stream(run.runId, "codex", lines)
        assert answer.accepted == 0 and answer.duplicates > 0  # the retry's answer: all stored before
        assert answer.stopReason == "max_tokens" and answer.providerStopReason == "turn.failed"
        assert client.result(run.runId).output == PARTIAL
    with httpx.Client(base_url=base_url) as plain:
        events = plain.get(f"/v1/runs/{run.runId}/events").json()["events"]
    ids = [item["event"].get("eventId") for item in events if item["event"].get("eventId")]
    assert len(ids) == len(set(ids))


def test_the_async_client_streams_an_async_iterable(base_url: str) -> None:
    async def main() -> None:
        async def lines() -> AsyncIterator[bytes]:
            for line in BODY.read_bytes().splitlines(keepends=True):
                yield line
                await asyncio.sleep(0)

        async with AsyncLastwordClient(base_url) as client:
            run = await client.create_run(run_id="cli-async")
            answer = await client.ingest_cli_stream(run.runId, "codex", lines())
            assert answer.stopReason == "max_tokens" and answer.accepted > 0
            assert (await client.result(run.runId)).output == PARTIAL

    asyncio.run(main())
