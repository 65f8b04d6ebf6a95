"""The streaming producer (issue 15): many small deltas go as a few requests, ``flush()`` and
``close()`` return once they are durable, and a request whose answer was lost is sent again
without losing or repeating an event. Against a real server."""

from __future__ import annotations

import httpx
import pytest
from lastword.client.core import AsyncLastwordClient, LastwordClient

from tests.api_helpers import logged


class Counting(httpx.AsyncHTTPTransport):
    """Real requests, counted; with ``lose_every`` > 0, every n-th answer is lost after the
    server handled the request (the connection drops on the way back)."""

    def __init__(self, lose_every: int = 0) -> None:
        super().__init__()
        self.requests = 0
        self.lost = 0
        self._lose_every = lose_every

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.requests += 1
        if request.url.path.endswith("/events") and self._lose_every and self.requests % self._lose_every == 0:
            await response.aread()
            await response.aclose()
            self.lost += 1
            raise httpx.ReadError("connection dropped after the server answered", request=request)
        return response


def chunk_texts(base_url: str, run_id: str) -> list[str]:
    with httpx.Client(base_url=base_url, timeout=30) as api:
        return [item["event"]["delta"]["text"] for item in logged(api, run_id)
                if item["event"]["type"] == "assistant/chunk"]


@pytest.mark.anyio
async def test_many_deltas_go_as_few_requests_and_close_waits_until_durable(base_url: str) -> None:
    transport = Counting()
    async with AsyncLastwordClient(base_url, transport=transport) as client:
        run_id = (await client.create_run()).runId
        sent: list[str] = []
        async with client.pusher(run_id, linger=0.05) as pusher:
            for n in range(300):
                pusher.push_text(f"d{n} ")
                sent.append(f"d{n} ")
            await pusher.flush()
            assert chunk_texts(base_url, run_id) == sent  # durable when flush() returned
            for n in range(300, 450):
                pusher.push_text(f"d{n} ")
                sent.append(f"d{n} ")
        assert chunk_texts(base_url, run_id) == sent  # and when close() returned
        assert pusher.batches <= 4
        assert transport.requests <= 6  # create, the batches


@pytest.mark.anyio
async def test_a_dropped_connection_loses_and_repeats_nothing(base_url: str) -> None:
    transport = Counting(lose_every=2)
    async with AsyncLastwordClient(base_url, transport=transport, backoff=0.01) as client:
        run_id = (await client.create_run()).runId
        sent: list[str] = []
        async with client.pusher(run_id, linger=0.0, max_events=7) as pusher:
            for n in range(100):
                pusher.push_text(f"<{n}>")
                sent.append(f"<{n}>")
                if n % 9 == 0:
                    await pusher.flush()
    assert transport.lost >= 5
    assert chunk_texts(base_url, run_id) == sent


def test_the_synchronous_pusher_batches_and_flushes(base_url: str) -> None:
    with LastwordClient(base_url, backoff=0.01) as client:
        run_id = client.create_run().runId
        sent: list[str] = []
        with client.pusher(run_id, linger=0.05) as pusher:
            for n in range(300):
                pusher.push_text(f"s{n} ")
                sent.append(f"s{n} ")
            pusher.flush()
            assert chunk_texts(base_url, run_id) == sent
            for n in range(300, 400):
                pusher.push_text(f"s{n} ")
                sent.append(f"s{n} ")
        assert chunk_texts(base_url, run_id) == sent
        assert pusher.batches <= 10
