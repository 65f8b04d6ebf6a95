"""(d) From ``POST …/end`` to each subscriber holding ``subagent/end``: p50 and p99.

N subscribers (1, 100, 1,000) hold ``GET /v1/runs/{id}/stream`` on one continuable run, all
in this one asyncio process (raw sockets on uvloop: a subscriber only notes the time an
``event: subagent/end`` line arrives). Each iteration starts a turn, waits until every
subscriber has seen its ``subagent/start``, pushes a few events, then notes the time and
posts ``/end``; every subscriber's latency is its arrival time minus that time. Percentiles
are over all subscribers of all iterations.

Arrival is when the bytes reached the subscriber's socket (the kernel's receive time,
:class:`bench.http.StampedSubscriber`), not when this process got round to reading them: it
reads a thousand sockets one after another, and measured against the server's own write times
that queue added about 1 ms at the median and up to 3 ms to a subscriber at 1,000 (issue 44).
The time the client read it is reported beside (``read_p99_*``). The client still shares the
machine's cores with the server: reading a thousand sockets takes CPU the server's writes
could have had.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server
from bench.workload import mixed_events

TITLE = "Latency from POST /end to subscribers receiving subagent/end"


@dataclass
class Latencies:
    """Seconds from each ``POST /end`` to each subscriber's ``subagent/end``: at its socket
    (``arrived``) and read by this process (``read``); and to the ``POST``'s own answer."""

    arrived: list[float] = field(default_factory=list)
    read: list[float] = field(default_factory=list)
    answers: list[float] = field(default_factory=list)


async def _measure_one(
    server: Server, subscribers: int, iterations: int, profile: contextlib.AbstractContextManager[None] | None = None,
) -> tuple[Latencies, float]:
    conn = await http.connect(server.url)
    run_id = f"bench-d-{secrets.token_hex(6)}"
    await conn.post_json("/v1/runs", {"runId": run_id, "mode": "continuable", "leaseSeconds": 0}, expect=201)
    snapshot, start, end = http.Tally(), http.Tally(), http.Tally()
    watch = {b"run/snapshot": snapshot, b"subagent/start": start, b"subagent/end": end}
    snapshot.arm(subscribers)
    streams = await http.open_stamped_subscribers(server.url, [f"/v1/runs/{run_id}/stream"] * subscribers, watch)
    await snapshot.wait(60)
    # Opening a thousand streams on a loaded machine can outlast the server's keep-alive
    # time-out: the control connection would be closed under the first request.
    conn.close()
    conn = await http.connect(server.url)
    latencies = Latencies()
    try:
        with profile or contextlib.nullcontext():  # the iterations only, not the connections' opening
            cpu_before = server.cpu_seconds()
            await _iterate(conn, run_id, subscribers, iterations, start, end, latencies)
            cpu = (server.cpu_seconds() - cpu_before) / iterations
    finally:
        for stream in streams:
            stream.close()
        conn.close()
    return latencies, cpu


async def _iterate(
    conn: http.Connection, run_id: str, subscribers: int, iterations: int,
    start: http.Tally, end: http.Tally, latencies: Latencies,
) -> None:
    turn_events = mixed_events(40, seed=4)
    for iteration in range(iterations):
        if iteration:
            start.arm(subscribers)
            await conn.request("POST", f"/v1/runs/{run_id}/turns", b"", "application/json", expect=201)
            await start.wait(60)
        await conn.post_json(f"/v1/runs/{run_id}/events", turn_events, expect=200)
        await asyncio.sleep(0.02)  # let the chunks' fan-out settle: measure the end alone
        end.arm(subscribers)
        sent = time.perf_counter()
        await conn.post_json(f"/v1/runs/{run_id}/end", {"stopReason": "completed"}, expect=200)
        latencies.answers.append(time.perf_counter() - sent)
        await end.wait(60)
        latencies.arrived.extend(at - sent for at in end.times)
        latencies.read.extend(at - sent for at in end.read_times)


async def _measure(ctx: Context, result: Result) -> None:
    plan = ctx.pick([(1, 200), (100, 40), (1000, 10)], [(1, 30), (100, 5), (1000, 2)])
    series = {}
    with Server() as server:
        await _measure_one(server, 10, 2)  # warm-up
        for subscribers, iterations in plan:
            profile = ctx.profiler.attach(server, f"d-{subscribers}")
            latencies, cpu = await _measure_one(server, subscribers, iterations, profile)
            p50, p99 = http.percentile(latencies.arrived, 0.5) * 1000, http.percentile(latencies.arrived, 0.99) * 1000
            answer = http.percentile(latencies.answers, 0.5) * 1000
            result.add(f"p50_{subscribers}", f"{subscribers:,} subscriber(s): p50", p50, "ms",
                       f"{len(latencies.arrived):,} samples; POST /end answered in {answer:.1f} ms (p50)")
            result.add(f"p99_{subscribers}", f"{subscribers:,} subscriber(s): p99", p99, "ms",
                       "at the subscriber's socket")
            result.add(f"read_p99_{subscribers}", f"{subscribers:,} subscriber(s): p99 as read by the client",
                       http.percentile(latencies.read, 0.99) * 1000, "ms",
                       "the one client process's loop reading every socket in turn")
            result.add(f"cpu_{subscribers}", f"{subscribers:,} subscriber(s): server CPU per turn", cpu * 1000, "ms",
                       "start, 40 events, end: what the fan-out costs the server, whatever the load")
            series[subscribers] = {"p50": p50, "p99": p99, "cpu": cpu}
            if subscribers == 100:
                result.target("p99 <= 5 ms at 100 subscribers", p99, 5.0, "ms", higher_is_better=False)
            if subscribers == 1000:
                result.target("p99 <= 20 ms at 1,000 subscribers", p99, 20.0, "ms", higher_is_better=False)
    if 1 in series and len(series) > 1:
        most = max(series)
        per = (series[most]["cpu"] - series[1]["cpu"]) / (most - 1) / 2  # a start and an end per turn
        result.add("cpu_per_delivery", "server CPU per event delivered to a subscriber", per * 1e6, "µs",
                   f"(CPU per turn at {most:,} − at 1) ÷ {most - 1:,} subscribers ÷ 2 events")
    result.series["latency"] = series


def run(ctx: Context) -> Result:
    result = Result("d", TITLE)
    http.run(_measure(ctx, result))
    return result
