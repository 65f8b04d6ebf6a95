"""Every ``live=sse`` reader of a Durable Stream sees every message once, in the log's order,
through a real server (SPEC §17; issue 25's /ds fan-out).

While a reader waits, what an append brings is written to its connection from the append's
read (:meth:`StreamService.wait`'s ``deliver``), not by waking its task; a reader whose buffer is
full is woken instead and sends for itself. Concurrent producers and one reader that does not
read until they are done (its buffer fills) mix the two paths on one stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servers import threaded_server

pytestmark = pytest.mark.anyio

PRODUCERS = 3
APPENDS = 40
READERS = 12
#: Large enough that the reader who does not read fills its connection's buffers.
PAD = "x" * 60_000
WITHIN = 60


@pytest.fixture(params=["patient", "ticking"])
def server_url(request: pytest.FixtureRequest, make_settings: Any) -> Iterator[str]:
    """Keep-alives that outlast the test (a reader not written to is not rescued by a tick), or
    every 10 ms (a reader's wait often ends between deliveries, and its stream goes on from
    where they left it)."""
    keepalive = 4 * WITHIN if request.param == "patient" else 0.01
    with threaded_server(make_settings(keepalive_seconds=keepalive)) as url:
        yield url


class Reader:
    """One ``live=sse`` reader: the messages of its ``data`` events and its controls' offsets."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.offsets: list[str] = []
        self.at_tail = asyncio.Event()
        self.go = asyncio.Event()
        self.go.set()

    async def run(self, client: httpx.AsyncClient, path: str, total: int) -> None:
        async with client.stream("GET", path, params={"offset": "-1", "live": "sse"}) as response:
            assert response.status_code == 200
            event, data = "", []
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:])
                elif not line and event:
                    if event == "data":
                        self.messages.extend(json.loads("\n".join(data)))
                    elif event == "control":
                        control = json.loads("\n".join(data))
                        self.offsets.append(control["streamNextOffset"])
                        if control.get("upToDate"):
                            self.at_tail.set()
                            if len(self.messages) >= total:
                                return
                    event, data = "", []
                    await self.go.wait()


async def _log(client: httpx.AsyncClient, path: str) -> tuple[list[dict[str, Any]], str]:
    """The stream's messages read back by catch-up reads, and its tail offset."""
    messages: list[dict[str, Any]] = []
    offset = "-1"
    while True:
        answer = await client.get(path, params={"offset": offset})
        assert answer.status_code == 200
        messages.extend(answer.json())
        offset = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return messages, offset


async def test_every_live_reader_sees_every_message_once_in_order(server_url: str) -> None:
    path = "/ds/fan-out/every-reader"
    total = PRODUCERS * APPENDS
    async with httpx.AsyncClient(base_url=server_url, timeout=WITHIN) as client:
        assert (await client.put(path, headers={"Content-Type": "application/json"})).status_code == 201
        readers = [Reader() for _ in range(READERS)]
        slow = readers[0]
        tasks = [asyncio.create_task(reader.run(client, path, total)) for reader in readers]
        await asyncio.wait_for(asyncio.gather(*(reader.at_tail.wait() for reader in readers)), WITHIN)
        slow.go.clear()  # from its first control on, it reads nothing until the producers are done

        async def produce(producer: int) -> None:
            for n in range(APPENDS):
                body = json.dumps({"producer": producer, "n": n, "pad": PAD})
                answer = await client.post(path, content=body, headers={"Content-Type": "application/json"})
                assert answer.status_code in (200, 204), answer.text

        await asyncio.wait_for(asyncio.gather(*(produce(p) for p in range(PRODUCERS))), WITHIN)
        slow.go.set()
        await asyncio.wait_for(asyncio.gather(*tasks), WITHIN)
        log, tail = await _log(client, path)
    assert len(log) == total
    for number, reader in enumerate(readers):
        assert [(m["producer"], m["n"]) for m in reader.messages] == [(m["producer"], m["n"]) for m in log], number
        assert reader.offsets == sorted(set(reader.offsets)), number  # each control moves on
        assert reader.offsets[-1] == tail, number
