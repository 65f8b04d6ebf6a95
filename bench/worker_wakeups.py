"""(u) ``lastword serve --workers 2`` on SQLite: how soon one worker hears another, and what idling costs.

The workers share one SQLite file and hear each other's commits from it
(:mod:`lastword.fanout.data_version`). Each worker also listens on a port of its own
(``LASTWORD_WORKER_PORTS``), so this bench chooses where a request lands:

* **a commit heard across workers**: one subscriber holds a run's stream (``?include=chunks``)
  on worker A; after a quiet spell (no commit anywhere, so the watchers are idle) one chunk is
  posted through worker B, and the latency is its arrival at the subscriber minus the moment it
  was posted. The baseline, in the same run and the same way, posts through A itself (the
  in-process hand-over). The ratio is across ÷ same.
* **idle CPU**: user + system CPU of the parent and both workers over a spell with no request
  at all (100 % = one core).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

import httpx

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server, free_port

TITLE = "--workers 2 on SQLite: a commit heard across workers after a quiet spell, and idle CPU"


async def _latencies(origin: http.Connection, subscriber_url: str, run_id: str, posts: int, quiet: float,
                     tally: http.Tally) -> list[float]:
    """Each of ``posts`` chunks posted through ``origin`` after ``quiet`` seconds: its latency."""
    found = []
    for number in range(posts):
        await asyncio.sleep(quiet)
        tally.arm(1)
        chunk = {"type": "assistant/chunk", "delta": {"type": "text", "text": f"c{number}"}}
        sent = time.perf_counter()
        await origin.post_json(f"/v1/runs/{run_id}/events", [chunk], expect=200)
        await tally.wait(30)
        found.append(tally.times[0] - sent)
    return found


async def _measure(ctx: Context, result: Result, server: Server, own: list[str]) -> None:
    posts, quiet = ctx.pick(40, 8), ctx.pick(0.3, 0.2)
    a, b = await http.connect(own[0]), await http.connect(own[1])
    run_id = f"bench-u-{secrets.token_hex(6)}"
    await b.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    tally, snapshot = http.Tally(), http.Tally()
    snapshot.arm(1)
    watch = {b"assistant/chunk": tally, b"run/snapshot": snapshot}
    streams = await http.open_subscribers(own[0], [f"/v1/runs/{run_id}/stream?include=chunks"], watch)
    try:
        await snapshot.wait(30)
        across, same = [], []
        for _ in range(2):  # interleaved halves: a drift in the machine's load meets both
            across += await _latencies(b, own[0], run_id, posts // 2, quiet, tally)
            same += await _latencies(a, own[0], run_id, posts // 2, quiet, tally)
    finally:
        for stream in streams:
            stream.close()
        a.close()
        b.close()
    for key, label, values in (("across", "posted through B, heard on A", across),
                               ("same", "posted through A, heard on A (baseline)", same)):
        p50, p99 = http.percentile(values, 0.5) * 1000, http.percentile(values, 0.99) * 1000
        result.add(f"{key}_p50", f"{label}: p50", p50, "ms", f"{len(values)} posts, each after {quiet} s quiet")
        result.add(f"{key}_p99", f"{label}: p99", p99, "ms")
    result.ratio("across_over_same", "across ÷ same, p50", http.percentile(across, 0.5) / http.percentile(same, 0.5))
    result.series["latency_ms"] = {"across": [v * 1000 for v in across], "same": [v * 1000 for v in same]}

    idle = ctx.pick(10.0, 3.0)
    before, started = server.cpu_seconds(), time.perf_counter()
    await asyncio.sleep(idle)
    cpu = (server.cpu_seconds() - before) / (time.perf_counter() - started)
    result.add("idle_cpu", "idle CPU, parent and 2 workers", cpu * 100, "%", f"{idle:.0f} s without a request; 100 % = one core")


def run(ctx: Context) -> Result:
    result = Result("u", TITLE)
    ports = [free_port(), free_port()]
    env = {"LASTWORD_WORKER_PORTS": ",".join(map(str, ports)), "LASTWORD_KEEPALIVE_SECONDS": "300"}
    with Server(workers="2", env=env) as server:
        own = [f"http://127.0.0.1:{port}" for port in ports]
        for url in own:  # the shared port answered: each worker must, too
            _ready(url)
        http.run(_measure(ctx, result, server, own))
    result.note("one SQLite file, 2 workers; latency from a POST's start to the chunk's arrival at the subscriber")
    return result


def _ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.02)
    raise RuntimeError(f"worker {url} was not ready within {timeout:.0f} s")
