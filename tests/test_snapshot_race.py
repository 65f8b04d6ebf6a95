"""A fresh run stream's ``run/snapshot`` with id N reflects exactly the log up to N, while
producers write: never an event after N (which the stream would then send a second time).

The race is between the snapshot's read of the run and of the turn's shared fold, which a
writer may advance in between; it is repeated hundreds of times against live producers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from tests.servers import threaded_server

TRIALS = 500
PRODUCERS = 3


async def _produce(client: httpx.AsyncClient, run_id: str, name: str, stop: asyncio.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1
        event = {"type": "assistant/chunk", "delta": {"type": "text", "text": f"<{name}{count}>"}}
        (await client.post(f"/v1/runs/{run_id}/events", json=event)).raise_for_status()


async def _snapshot(client: httpx.AsyncClient, run_id: str) -> tuple[int, str]:
    async with asyncio.timeout(10), aconnect_sse(client, "GET", f"/v1/runs/{run_id}/stream") as source:
        assert source.response.status_code == 200
        async for event in source.aiter_sse():
            assert event.event == "run/snapshot"
            output = json.loads(event.data)["result"]["output"]
            return int(event.id), "".join(block["text"] for block in output if block["type"] == "text")
    raise AssertionError("the stream closed before its snapshot")


def test_snapshot_reflects_exactly_the_events_up_to_its_id(make_settings: Any) -> None:
    """Under concurrent producers, every snapshot's output is the text of chunks 1..N, nothing after."""
    with threaded_server(make_settings()) as url:

        async def trials() -> tuple[str, list[tuple[int, str]]]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                run_id = (await client.post("/v1/runs", json={})).json()["runId"]
                stop = asyncio.Event()
                producers = [asyncio.create_task(_produce(client, run_id, f"p{i}-", stop)) for i in range(PRODUCERS)]
                try:
                    seen = [await _snapshot(client, run_id) for _ in range(TRIALS)]
                finally:
                    stop.set()
                    await asyncio.gather(*producers)
                return run_id, seen

        run_id, seen = asyncio.run(trials())
        with httpx.Client(base_url=url, timeout=30) as api:
            text_at: dict[int, str] = {}
            after = 0
            while True:
                page = api.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 1000}).json()
                for item in page["events"]:
                    text_at[item["seq"]] = item["event"].get("delta", {}).get("text", "")
                if not page["events"]:
                    break
                after = page["nextAfter"]
        wrong = [(n, text[-60:]) for n, text in seen
                 if text != "".join(text_at[seq] for seq in sorted(text_at) if seq <= n)]
        assert not wrong, f"{len(wrong)} of {TRIALS} snapshots do not match the log up to their id, e.g. {wrong[:3]}"
        assert len({n for n, _ in seen}) > 10  # the producers really were writing meanwhile
