"""Chunks nobody listens to are not handed to the fan-out, yet no subscriber misses one (issue 25).

An append checks, in the writer's transaction, whether the run has a live subscriber; without
one its chunks stay out of the outcome (``chunks_left_out``) and the service sends any
subscriber that registered since to the log. The race that must not lose a chunk: the check
finds nobody; a subscriber registers, reads the log (nothing new yet) and waits for live
events; then the commit lands. The server's gate (:mod:`tests.held_server`) holds the writer between writing and ``COMMIT``, and a
keep-alive comment on the stream says the subscriber has read the log and waits live, so that
interleaving happens in every round, signalled rather than timed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.builders import chunk, create_run_async
from tests.servers import ServerProcess
from tests.sse import WAIT_SECONDS

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 20
CHUNKS = 5


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {
        "LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
        "LASTWORD_LEASE_SECONDS": "3600",
        "LASTWORD_LOG_LEVEL": "warning",
        "LASTWORD_KEEPALIVE_SECONDS": "0.05",
    }
    process = ServerProcess(env, cwd=REPO, command=[sys.executable, "-m", "tests.held_server", str(gate)]).start()
    try:
        yield process, gate
    finally:
        process.kill()


async def appeared(path: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.005)


async def next_line(lines: AsyncIterator[str]) -> str:
    async with asyncio.timeout(WAIT_SECONDS):
        return await anext(lines)


async def test_a_subscriber_that_arrives_before_the_commit_gets_every_chunk(
    gated: tuple[ServerProcess, Path],
) -> None:
    """The append found no subscriber; one read the log and waited live before the commit: it
    still gets every chunk, in order, once."""
    server, gate = gated
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client, \
            httpx.AsyncClient(base_url=server.url, timeout=60) as reader:
        for round_number in range(ROUNDS):
            run_id = await create_run_async(client)
            after = (await client.get(f"/v1/runs/{run_id}")).json()["lastSeq"]
            texts = [f"<{round_number}.{n}>" for n in range(CHUNKS)]
            (gate / "hold").touch()
            # Nobody subscribes yet: the append leaves its chunks out, then waits at the gate.
            append = asyncio.create_task(client.post(f"/v1/runs/{run_id}/events", json=[chunk(t) for t in texts]))
            await appeared(gate / "paused")
            path = f"/v1/runs/{run_id}/stream?include=chunks&after={after}"
            async with reader.stream("GET", path) as response:
                assert response.status_code == 200
                lines = response.aiter_lines()
                while not (await next_line(lines)).startswith(":"):
                    pass  # a keep-alive: the subscriber read the log and waits for live events
                (gate / "hold").unlink()
                assert (await append).status_code == 200
                (gate / "paused").unlink()
                ended = await client.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"})
                assert ended.status_code == 200, ended.text
                received: list[tuple[str, dict[str, object]]] = []
                kind = ""
                while not received or received[-1][0] != "subagent/end":
                    line = await next_line(lines)
                    if line.startswith("event:"):
                        kind = line.removeprefix("event:").strip()
                    elif line.startswith("data:"):
                        received.append((kind, orjson.loads(line.removeprefix("data:"))))
            chunks = [body["delta"]["text"] for kind, body in received if kind == "assistant/chunk"]  # type: ignore[index]
            assert chunks == texts, f"round {round_number}"
