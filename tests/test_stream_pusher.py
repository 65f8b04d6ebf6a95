"""The stream pusher (issue 15): a child's deltas over one long-lived NDJSON request, each stored
while the request is still open; ``flush()``/``close()`` return once everything is durable; a
request that fails is sent again without losing or repeating an event. Against a real server."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from lastword.client.core import AsyncLastwordClient, LastwordAPIError, LastwordClient

from tests.test_pusher import Counting, chunk_texts


class Dropping(httpx.AsyncHTTPTransport):
    """Real requests; the answer to each of the first ``drops`` event requests is lost after the
    server stored the lines (the connection drops on the way back)."""

    def __init__(self, drops: int) -> None:
        super().__init__()
        self.drops = drops
        self.event_requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.url.path.endswith("/events"):
            self.event_requests += 1
            if self.drops:
                self.drops -= 1
                await response.aread()
                await response.aclose()
                raise httpx.ReadError("connection dropped after the server answered", request=request)
        return response


@pytest.mark.anyio
async def test_deltas_are_stored_while_the_request_is_open_and_flush_waits_until_durable(base_url: str) -> None:
    transport = Counting()
    async with AsyncLastwordClient(base_url, transport=transport) as client:
        run_id = (await client.create_run()).runId
        sent: list[str] = []
        async with client.stream_pusher(run_id) as pusher:
            for n in range(50):
                pusher.push_text(f"d{n} ")
                sent.append(f"d{n} ")
            # Not flushed: the request is still open, and the lines are already in the log.
            for _ in range(500):
                if await asyncio.to_thread(chunk_texts, base_url, run_id) == sent:
                    break
                await asyncio.sleep(0.01)
            assert await asyncio.to_thread(chunk_texts, base_url, run_id) == sent
            assert pusher.requests == 1
            for n in range(50, 300):
                pusher.push_text(f"d{n} ")
                sent.append(f"d{n} ")
            await pusher.flush()
            assert await asyncio.to_thread(chunk_texts, base_url, run_id) == sent  # durable when flush() returned
            for n in range(300, 350):
                pusher.push_text(f"d{n} ")
                sent.append(f"d{n} ")
        assert await asyncio.to_thread(chunk_texts, base_url, run_id) == sent  # and when close() returned
        assert pusher.requests == 2  # one until the flush, one after
        assert transport.requests == 3  # create, and the two


@pytest.mark.anyio
async def test_a_lost_answer_loses_and_repeats_nothing(base_url: str) -> None:
    transport = Dropping(drops=3)
    async with AsyncLastwordClient(base_url, transport=transport, backoff=0.01) as client:
        run_id = (await client.create_run()).runId
        sent = [f"<{n}>" for n in range(200)]
        async with client.stream_pusher(run_id, roll_events=40) as pusher:
            for text in sent:
                pusher.push_text(text)
                await asyncio.sleep(0)
    assert transport.drops == 0 and transport.event_requests >= 4  # three lost, then answered
    assert chunk_texts(base_url, run_id) == sent


@pytest.mark.anyio
async def test_a_request_ends_after_roll_events_lines(base_url: str) -> None:
    async with AsyncLastwordClient(base_url) as client:
        run_id = (await client.create_run()).runId
        async with client.stream_pusher(run_id, roll_events=100) as pusher:
            for n in range(350):
                pusher.push_text(f"r{n}")
                await asyncio.sleep(0)
        assert pusher.requests == 4
    assert len(chunk_texts(base_url, run_id)) == 350


@pytest.mark.anyio
async def test_a_refused_line_is_raised_and_the_lines_before_it_stay(base_url: str) -> None:
    async with AsyncLastwordClient(base_url) as client:
        run_id = (await client.create_run()).runId
        pusher = client.stream_pusher(run_id)
        pusher.push_text("kept")
        pusher.push_events([{"type": "assistant/chunk", "delta": {"type": "text"}}])  # no text
        with pytest.raises(LastwordAPIError) as refused:
            await pusher.flush()
        assert refused.value.status == 422
        with pytest.raises(LastwordAPIError):
            pusher.push_text("after")
    assert chunk_texts(base_url, run_id) == ["kept"]


def test_the_synchronous_stream_pusher_streams_and_flushes(base_url: str) -> None:
    with LastwordClient(base_url, backoff=0.01) as client:
        run_id = client.create_run().runId
        sent: list[str] = []
        with client.stream_pusher(run_id, roll_events=1000) as pusher:
            for n in range(300):
                pusher.push_text(f"s{n} ")
                sent.append(f"s{n} ")
            pusher.flush()
            assert chunk_texts(base_url, run_id) == sent
            for n in range(300, 400):
                pusher.push_text(f"s{n} ")
                sent.append(f"s{n} ")
        assert chunk_texts(base_url, run_id) == sent
        assert pusher.requests == 2
