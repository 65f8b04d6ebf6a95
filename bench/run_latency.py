"""(l) What ``lastword run`` adds between a line a child prints and a subscriber seeing it.

Workload: a child (a small Python program) prints Claude Code ``stream_event`` text-delta lines,
each holding the wall-clock time it was printed, one each time this process writes a line to the
child's standard input (every ``PACE`` seconds); ``lastword run --format claude-code`` streams
them into a run, and a subscriber here holds ``GET …/stream?include=chunks`` and notes, for each
``assistant/chunk``, its arrival time minus the time in its text. The baseline, in the same run:
this process posts the same chunks itself to ``POST …/events`` (one request each, the time taken
just before the request), read by the same kind of subscriber. Both on one SQLite server.
Issue 20's goal: ``lastword run`` adds <= 5 ms at p99.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "lastword run: a child's printed line to a subscriber, vs the producer posting it itself"
PACE = 0.02

CHILD = r'''
import json, sys, time, uuid
for n, _ in enumerate(sys.stdin):
    event = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"t={time.time_ns()};"}}
    print(json.dumps({"type": "stream_event", "event": event, "session_id": "bench", "uuid": str(uuid.uuid4()),
                      "parent_tool_use_id": None}), flush=True)
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "", "session_id": "bench",
                  "uuid": str(uuid.uuid4()), "usage": {"input_tokens": 1, "output_tokens": 1}}), flush=True)
'''


async def _subscribe(url: str, run_id: str, count: int, ready: asyncio.Event, latencies: list[float]) -> None:
    async with httpx.AsyncClient(timeout=None) as client, \
            client.stream("GET", f"{url}/v1/runs/{run_id}/stream", params={"include": "chunks"}) as stream:
        ready.set()
        async for line in stream.aiter_lines():
            if line.startswith("data:") and '"assistant/chunk"' in line:
                now = time.time_ns()
                text = orjson.loads(line[5:])["delta"]["text"]
                latencies.append((now - int(text[2:-1])) / 1e6)
                if len(latencies) == count:
                    return


async def _via_run(server: Server, count: int) -> list[float]:
    run_id = f"bench-l-{secrets.token_hex(6)}"
    latencies: list[float] = []
    ready = asyncio.Event()
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / "child.py"
        child.write_text(CHILD)
        process = subprocess.Popen(
            [*server.code.cli, "run", "--url", server.url, "--run-id", run_id,
             "--format", "claude-code", "--", sys.executable, str(child)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=server.code.env(dict(os.environ)))
        assert process.stdin is not None
        async with httpx.AsyncClient() as client:  # lastword run creates the run; the child waits for stdin
            for _ in range(600):
                if (await client.get(f"{server.url}/v1/runs/{run_id}")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
        reader = asyncio.create_task(_subscribe(server.url, run_id, count, ready, latencies))
        await ready.wait()
        for _ in range(count):
            process.stdin.write(b"go\n")
            process.stdin.flush()
            await asyncio.sleep(PACE)
        process.stdin.close()
        await asyncio.wait_for(reader, 60)
        await asyncio.to_thread(process.wait, 60)
    return latencies


async def _direct(server: Server, count: int) -> list[float]:
    run_id = f"bench-l-{secrets.token_hex(6)}"
    conn = await http.connect(server.url)
    await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    latencies: list[float] = []
    ready = asyncio.Event()
    reader = asyncio.create_task(_subscribe(server.url, run_id, count, ready, latencies))
    await ready.wait()
    for _ in range(count):
        event = {"type": "assistant/chunk", "delta": {"type": "text", "text": f"t={time.time_ns()};"}}
        await conn.post_json(f"/v1/runs/{run_id}/events", event, expect=200)
        await asyncio.sleep(PACE)
    await asyncio.wait_for(reader, 60)
    conn.close()
    return latencies


async def _measure(ctx: Context, result: Result) -> None:
    count = ctx.pick(500, 100)
    figures: dict[str, list[float]] = {"run": [], "direct": []}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(Server())
        await _direct(server, 10)  # warm-up
        for _ in range(ctx.pick(2, 1)):
            figures["direct"].extend(await _direct(server, count))
            figures["run"].extend(await _via_run(server, count))
    p = {kind: (http.percentile(values, 0.5), http.percentile(values, 0.99)) for kind, values in figures.items()}
    result.add("run_p50", "lastword run: printed → subscriber, p50", p["run"][0], "ms")
    result.add("run_p99", "lastword run: printed → subscriber, p99", p["run"][1], "ms")
    result.add("direct_p50", "the producer posting each chunk itself, p50", p["direct"][0], "ms")
    result.add("direct_p99", "the producer posting each chunk itself, p99", p["direct"][1], "ms")
    added = p["run"][1] - p["direct"][1]
    result.add("added_p99", "what lastword run adds at p99", added, "ms")
    result.note(f"SQLite, {len(figures['run'])} lines each way, one every {PACE * 1000:g} ms")
    result.target("lastword run adds <= 5 ms at p99 (issue 20)", added, 5.0, "ms", higher_is_better=False)


def run(ctx: Context) -> Result:
    result = Result("l", TITLE)
    http.run(_measure(ctx, result))
    return result
