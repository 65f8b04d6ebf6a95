"""(j) A fleet: N children streaming small deltas through the client library, watched.

Each child is a run fed by the client's stream pusher (``AsyncLastwordClient.stream_pusher``:
one long-lived NDJSON request per child, each delta written as a line when pushed): every
``1 / RATE`` seconds one ticker pushes a delta of four characters to every child (a code unique
within the child, so its arrival can be matched to its push). Each
child has a parent holding ``GET …/result?wait=`` on it, and a subscriber on
``…/stream?include=chunks`` that notes when each delta arrives; 20 firehose subscribers
(``GET /v1/stream``) watch everything. The latency of a delta is its arrival at the child's
chunk subscriber minus the moment it was pushed. The server's CPU
(user + system over the measured window, 100 % = one core) and resident memory are read from
``/proc``. One server per N, on SQLite; the client shares the two cores with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

import httpx
import orjson
from lastword.client.core import AsyncLastwordClient
from lastword.client.stream_pusher import AsyncStreamPusher

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Fleet: N children streaming 4-character deltas at 40/s, watched"
RATE = 40.0
FIREHOSE = 20
GOAL_MS = 100.0


class ChunkSubscriber(asyncio.Protocol):
    """One ``?include=chunks`` stream; notes the arrival time of each delta's text."""

    def __init__(self, request: bytes, arrivals: dict[str, float]) -> None:
        self._request = request
        self._arrivals = arrivals
        self._buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: {\"type\":\"assistant/chunk\"") or (line.startswith(b"data: ") and b"assistant/chunk" in line):
                try:
                    text = orjson.loads(line[6:].strip())["delta"]["text"]
                except (ValueError, KeyError, TypeError):
                    continue
                self._arrivals.setdefault(text, now)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _one_fleet(
    server: Server, children: int, seconds: float, profile: contextlib.AbstractContextManager[None] | None = None,
) -> dict[str, float]:
    host, _, port = server.url.removeprefix("http://").partition(":")
    loop = asyncio.get_running_loop()
    # A stream pusher holds its connection for as long as it streams: one each, and room for the rest.
    limits = httpx.Limits(max_connections=children + 64, max_keepalive_connections=children + 64)
    transport = httpx.AsyncHTTPTransport(limits=limits)
    async with AsyncLastwordClient(server.url, transport=transport, timeout=120) as client:
        prefix = secrets.token_hex(3)
        runs = [f"fleet-{prefix}-{n}" for n in range(children)]
        for first in range(0, children, 50):
            await asyncio.gather(*(client.create_run(run_id, lease_seconds=0) for run_id in runs[first:first + 50]))
        arrivals: list[dict[str, float]] = [{} for _ in runs]
        subscribers: list[asyncio.BaseProtocol] = []
        for first in range(0, children, 100):
            made = await asyncio.gather(*(
                loop.create_connection(
                    lambda n=n: ChunkSubscriber(
                        f"GET /v1/runs/{runs[n]}/stream?include=chunks HTTP/1.1\r\nHost: x\r\n\r\n".encode(), arrivals[n]),
                    host, int(port))
                for n in range(first, min(children, first + 100))))
            subscribers.extend(protocol for _, protocol in made)
        firehose = await http.open_subscribers(server.url, ["/v1/stream"] * FIREHOSE, {b"subagent/end": http.Tally()})
        parents = []
        for run_id in runs:
            conn = await http.connect(server.url)
            raw = http.request_bytes("GET", f"/v1/runs/{run_id}/result?wait=120")
            parents.append((conn, asyncio.ensure_future(conn.send(raw))))
        await asyncio.sleep(0.5)  # streams registered

        pushed: list[dict[str, float]] = [{} for _ in runs]
        pushers = [client.stream_pusher(run_id) for run_id in runs]
        tick = 1.0 / RATE
        count = int(seconds * RATE)
        rss_before, cpu_before, client_before = server.rss(), server.cpu_seconds(), time.process_time()
        started = time.perf_counter()
        with profile or contextlib.nullcontext():  # the streaming only
            await _tick(pushers, pushed, started, count)
        behind = time.perf_counter() - (started + count * tick)
        await asyncio.gather(*(pusher.flush() for pusher in pushers))
        await asyncio.sleep(0.5)  # the last deltas reach their subscribers
        elapsed = time.perf_counter() - started
        cpu = (server.cpu_seconds() - cpu_before) / elapsed
        client_cpu = (time.process_time() - client_before) / elapsed
        rss_after = server.rss()
        await asyncio.gather(*(pusher.close() for pusher in pushers))
        for first in range(0, children, 50):
            await asyncio.gather(*(client.end(run_id, "completed") for run_id in runs[first:first + 50]))
        answered = 0
        for conn, waiting in parents:
            try:
                status, _ = await asyncio.wait_for(waiting, 30)
                answered += status == 200
            except (asyncio.TimeoutError, OSError, http.HttpError):
                pass
            conn.close()
        for subscriber in [*subscribers, *firehose]:
            subscriber.close()  # type: ignore[attr-defined]

    latencies = [arrived[code] - sent[code] for sent, arrived in zip(pushed, arrivals) for code in sent if code in arrived]
    missing = sum(len(sent) for sent in pushed) - len(latencies)
    return {
        "p50": 1000 * http.percentile(latencies, 0.5), "p99": 1000 * http.percentile(latencies, 0.99),
        "cpu": 100 * cpu, "client_cpu": 100 * client_cpu, "rss": rss_after / 2**20, "rss_growth": (rss_after - rss_before) / 2**20,
        "missing": missing, "deltas": len(latencies), "behind": behind, "parents": answered,
    }


async def _tick(pushers: list[AsyncStreamPusher], pushed: list[dict[str, float]], started: float, count: int) -> None:
    """Every ``1 / RATE`` seconds, a delta to every child, ``count`` times."""
    for k in range(count):
        now = time.perf_counter()
        code = f"{k:04x}"
        for n, pusher in enumerate(pushers):
            pusher.push_text(code)
            pushed[n][code] = now
        delay = started + (k + 1) / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


async def _measure(ctx: Context, result: Result) -> None:
    plan = ctx.pick([50, 100, 200, 500, 1000], [10, 50])
    seconds = ctx.pick(8.0, 2.0)
    series = {}
    largest = 0
    for children in plan:
        with Server() as server:
            figures = await _one_fleet(server, children, seconds, ctx.profiler.attach(server, f"j-{children}"))
        series[children] = figures
        result.add(f"p50_{children}", f"{children:,} children: delta→subscriber p50", figures["p50"], "ms",
                   f"{figures['deltas']:,} deltas seen, {figures['missing']:,} not seen in time; "
                   f"ticker {1000 * figures['behind']:.0f} ms late at the end")
        result.add(f"p99_{children}", f"{children:,} children: delta→subscriber p99", figures["p99"], "ms")
        result.add(f"cpu_{children}", f"{children:,} children: server CPU", figures["cpu"], "%",
                   f"100 % = one core; this client process {figures['client_cpu']:.0f} %")
        result.add(f"rss_{children}", f"{children:,} children: server memory", figures["rss"], "MiB",
                   f"+{figures['rss_growth']:.1f} MiB while streaming; {figures['parents']:,} parents answered")
        if figures["p99"] <= GOAL_MS and figures["missing"] == 0:
            largest = children
    result.series["fleet"] = series
    result.note(f"{seconds:g} s of streaming per N at {RATE:g} deltas/s per child, one NDJSON request each, "
                f"{FIREHOSE} firehose subscribers, one chunk subscriber and one waiting parent per child")
    result.add("largest", "largest N with p99 <= 100 ms (of those tried)", largest, "children")
    result.target(">= 1,000 children with p99 <= 100 ms", largest, 1000, "children", higher_is_better=True)


def run(ctx: Context) -> Result:
    result = Result("j", TITLE)
    http.run(_measure(ctx, result))
    return result
