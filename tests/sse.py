"""Reading the service's SSE streams in tests: httpx-sse over a real connection, every wait bounded.

Keep-alive comments arrive every second in tests, so an httpx read timeout never fires on a
stream that has stopped sending events; each wait here has its own deadline instead, and a
stream that hangs fails the test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse

#: Longest wait for one event, or for a stream to close, before a test fails.
WAIT_SECONDS = 10.0


class Stream:
    """An open SSE response, read one event at a time."""

    def __init__(self, response: httpx.Response, events: AsyncIterator[ServerSentEvent]) -> None:
        self.response = response
        self._events = events

    async def next(self) -> ServerSentEvent:
        """The next event; fails if none comes in time or the stream ends."""
        async with asyncio.timeout(WAIT_SECONDS):
            try:
                return await anext(self._events)
            except StopAsyncIteration:
                raise AssertionError("the stream ended before the next event") from None

    async def take(self, count: int) -> list[ServerSentEvent]:
        return [await self.next() for _ in range(count)]

    async def until_closed(self) -> list[ServerSentEvent]:
        """Every event up to the server closing the stream; fails if it stays open."""
        async with asyncio.timeout(WAIT_SECONDS):
            return [event async for event in self._events]


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient, path: str, *, last_event_id: str | None = None
) -> AsyncIterator[Stream]:
    """Subscribe to ``path``; the subscription is live once this yields (the headers arrived)."""
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    async with aconnect_sse(client, "GET", path, headers=headers) as source:
        assert source.response.status_code == 200, source.response.status_code
        yield Stream(source.response, source.aiter_sse())


def payload(event: ServerSentEvent) -> Any:
    return json.loads(event.data)


def ids(events: list[ServerSentEvent]) -> list[int]:
    return [int(event.id) for event in events]


def strictly_increasing(values: list[int]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))
