"""(j) A fleet: N children streaming small deltas through the client library, watched.

Each child is a run fed as the client library's stream pusher feeds one (one long-lived
``application/x-ndjson`` request per child, each delta written as a line with an ``eventId`` the
moment it is pushed), on a raw connection (:class:`NdjsonPusher`): httpx cost the load
generator a core at 200 children, and then measured itself instead of the server. Every
``1 / RATE`` seconds one ticker pushes a delta of four characters to every child (a code unique
within the child, so its arrival can be matched to its push). Each
child has a parent holding ``GET …/result?wait=`` on it, and a subscriber on
``…/stream?include=chunks`` that notes when each delta arrives; 20 firehose subscribers
(``GET /v1/stream``) watch everything. The latency of a delta is its arrival at the child's
chunk subscriber minus the moment it was pushed. Each child's request opens with a first delta,
timed on its own ("first delta"): all N requests start at once, a cold start that would
otherwise fill the tail of every N; the ticks begin once every first delta has arrived, so
the p50/p99 are the fleet's steady streaming. The server's CPU
(user + system over the measured window, 100 % = one core) and resident memory are read from
``/proc``. One server per N, on SQLite; the client shares the two cores with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
import uuid

import httpx
import orjson
from lastword.client.core import AsyncLastwordClient
from lastword.client.pusher import text_chunk

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Fleet: N children streaming 4-character deltas at 40/s, watched"
RATE = 40.0
FIREHOSE = 20
GOAL_MS = 100.0
#: The first delta of every child (its text is no tick's code), and how long to wait for all of them.
WARM = "warm"
WARM_SECONDS = 30.0


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


class NdjsonPusher(asyncio.Protocol):
    """One child's ``POST …/events`` with a chunked NDJSON body, open while it streams: each
    delta one line in one chunk, written when pushed, shaped as the client library's stream
    pusher shapes it (an ``assistant/chunk`` with an ``eventId``)."""

    def __init__(self, run_id: str) -> None:
        self._request = (f"POST /v1/runs/{run_id}/events HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        self._answer = b""
        self._status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def push_text(self, text: str) -> None:
        assert self.transport is not None
        line = orjson.dumps({**text_chunk(text), "eventId": uuid.uuid4().hex}) + b"\n"
        self.transport.write(b"%x\r\n%s\r\n" % (len(line), line))

    def data_received(self, data: bytes) -> None:
        self._answer += data
        if not self._status.done() and b"\r\n" in self._answer:
            self._status.set_result(int(self._answer.split(b" ", 2)[1]))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._status.done():
            self._status.set_result(0)

    async def end(self) -> int:
        """End the body; the status the service answers once it has stored every line."""
        assert self.transport is not None
        self.transport.write(b"0\r\n\r\n")
        try:
            return await asyncio.wait_for(self._status, 60)
        finally:
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
                    functools.partial(
                        ChunkSubscriber,
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

        pushers = [protocol for _, protocol in await asyncio.gather(*(
            loop.create_connection(functools.partial(NdjsonPusher, run_id), host, int(port)) for run_id in runs))]
        # Each child's request opens with its first delta: N connections and requests started at
        # once, a cold start that would otherwise fill the first half second of every N's tail.
        # It is measured on its own (``first_p99``); the fleet is timed once every child streams.
        first_pushed: list[dict[str, float]] = []
        for pusher in pushers:
            pusher.push_text(WARM)
            first_pushed.append({WARM: time.perf_counter()})
        opened = await _arrived(first_pushed, arrivals, WARM_SECONDS)
        pushed: list[dict[str, float]] = [{} for _ in runs]
        tick = 1.0 / RATE
        count = int(seconds * RATE)
        rss_before, cpu_before, client_before = server.rss(), server.cpu_seconds(), time.process_time()
        started = time.perf_counter()
        with profile or contextlib.nullcontext():  # the streaming only
            await _tick(pushers, pushed, started, count)
        behind = time.perf_counter() - (started + count * tick)
        acknowledged = await asyncio.gather(*(pusher.end() for pusher in pushers))
        await asyncio.sleep(0.5)  # the last deltas reach their subscribers
        elapsed = time.perf_counter() - started
        cpu = (server.cpu_seconds() - cpu_before) / elapsed
        client_cpu = (time.process_time() - client_before) / elapsed
        rss_after = server.rss()
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

    latencies = _latencies(pushed, arrivals)
    missing = sum(len(sent) for sent in pushed) - len(latencies)
    return {
        "p50": 1000 * http.percentile(latencies, 0.5), "p99": 1000 * http.percentile(latencies, 0.99),
        "first_p99": 1000 * http.percentile(opened, 0.99) if opened else float("nan"),
        "first_missing": len(runs) - len(opened),
        "cpu": 100 * cpu, "client_cpu": 100 * client_cpu, "rss": rss_after / 2**20, "rss_growth": (rss_after - rss_before) / 2**20,
        "missing": missing, "deltas": len(latencies), "refused": sum(status != 200 for status in acknowledged), "behind": behind, "parents": answered,
    }


def _latencies(pushed: list[dict[str, float]], arrivals: list[dict[str, float]]) -> list[float]:
    return [arrived[code] - sent[code] for sent, arrived in zip(pushed, arrivals) for code in sent if code in arrived]


async def _arrived(pushed: list[dict[str, float]], arrivals: list[dict[str, float]], seconds: float) -> list[float]:
    """Wait (at most ``seconds``) for every pushed delta to reach its subscriber; their latencies."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if all(code in arrived for sent, arrived in zip(pushed, arrivals) for code in sent):
            break
        await asyncio.sleep(0.01)
    return _latencies(pushed, arrivals)


async def _tick(pushers: list[NdjsonPusher], pushed: list[dict[str, float]], started: float, count: int) -> None:
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
                   f"ticker {1000 * figures['behind']:.0f} ms late at the end; "
                   f"{figures['refused']:,} requests not answered 200")
        result.add(f"p99_{children}", f"{children:,} children: delta→subscriber p99", figures["p99"], "ms")
        result.add(f"first_p99_{children}", f"{children:,} children: first delta (opens the request) p99",
                   figures["first_p99"], "ms", f"{figures['first_missing']:,} not seen within {WARM_SECONDS:g} s")
        result.add(f"cpu_{children}", f"{children:,} children: server CPU", figures["cpu"], "%",
                   f"100 % = one core; this client process {figures['client_cpu']:.0f} %")
        result.add(f"rss_{children}", f"{children:,} children: server memory", figures["rss"], "MiB",
                   f"+{figures['rss_growth']:.1f} MiB while streaming; {figures['parents']:,} parents answered")
        if figures["p99"] <= GOAL_MS and figures["missing"] == 0 and figures["refused"] == 0:
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
