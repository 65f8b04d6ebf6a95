"""(s) Durable Streams beside the Node reference server (issue 25 item 5, issue 27's speed).

Both servers run in the same bench, on loopback: lastword's ``/ds`` face (``lastword serve`` on
SQLite, durable) and the protocol's Node reference server, ``@durable-streams/server`` as pinned
in ``tests/durable_streams/package.json`` (installed there with ``npm ci`` when missing; it keeps
its streams in memory), started by ``bench/ds_reference.mjs``. Stream paths are
``/v1/stream/NAME`` under each base URL, as the conformance suite names them.

* append, one message per request: ``POST`` of a short ``text/plain`` body over a few
  keep-alive connections — appends/s;
* batched: ``POST`` of a JSON array of 100 messages to an ``application/json`` stream —
  messages/s;
* SSE fan-out: S subscribers on one stream (``?offset=-1&live=sse``); one message is appended
  and each subscriber's latency is the arrival of its ``event: data`` minus the time the
  ``POST`` was written — p50/p99 over all subscribers of all appends.

Throughput is measured in alternating windows (lastword, reference, lastword, …; the median per
server), so a change in the machine's load falls on both. The ratios are lastword ÷ reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from bench import http
from bench.context import Context, Skip
from bench.report import Result
from bench.server import ROOT, Server

TITLE = "Durable Streams beside the Node reference server"

PACKAGE_DIR = ROOT / "tests" / "durable_streams"
LAUNCHER = Path(__file__).resolve().parent / "ds_reference.mjs"
CONNECTIONS = 4
BATCH = 100
MESSAGE = b"a short message of the kind a token stream appends, some tens of bytes"


@dataclass(frozen=True)
class Target:
    """One server's Durable Streams face: where to connect and the path prefix of its streams."""

    name: str
    url: str  # http://host:port
    prefix: str  # "" or "/ds"
    pid: int  # the server's process, for its CPU time

    def cpu_seconds(self) -> float:
        import psutil

        return float(sum(psutil.Process(self.pid).cpu_times()[:2]))

    def path(self, stream: str) -> str:
        return f"{self.prefix}/v1/stream/{stream}"


def install_reference() -> None:
    """Skip without node and npm; install the pinned reference server when it is missing."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        raise Skip(f"{' and '.join(missing)} not installed: the Node reference server cannot run")
    if (PACKAGE_DIR / "node_modules" / "@durable-streams" / "server" / "package.json").is_file():
        return
    print("  installing @durable-streams/server (npm ci in tests/durable_streams)", flush=True)
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PACKAGE_DIR, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise Skip(f"npm ci in tests/durable_streams failed: {(done.stderr or done.stdout).strip()[-300:]}")


@contextlib.contextmanager
def reference_server() -> Iterator[tuple[str, int]]:
    """The Node reference server's base URL and pid while it runs."""
    with subprocess.Popen(["node", str(LAUNCHER)], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        try:
            line = process.stdout.readline().decode().strip()  # empty when node exits first
            if not line.startswith("http://"):
                process.wait(timeout=10)
                raise RuntimeError(f"the reference server did not start: {process.stderr.read().decode()[-500:]}")
            yield line.rstrip("/"), process.pid
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def create(target: Target, stream: str, content_type: str) -> str:
    path = target.path(stream)
    answer = httpx.put(target.url + path, headers={"Content-Type": content_type}, timeout=30)
    if answer.status_code != 201:
        raise RuntimeError(f"{target.name}: PUT {path}: {answer.status_code} {answer.text[:300]}")
    return path


async def _appends(target: Target, raw: bytes, requests: int) -> tuple[float, float]:
    """Seconds, and the server's CPU seconds, for ``requests`` prepared appends over CONNECTIONS
    keep-alive connections."""
    connections = [await http.connect(target.url) for _ in range(CONNECTIONS)]

    async def one(connection: http.Connection, count: int) -> None:
        for _ in range(count):
            status, body = await connection.send(raw)
            if status not in (200, 204):
                raise http.HttpError(f"{target.name}: append answered {status} {body[:300]!r}")

    share = requests // CONNECTIONS
    try:
        cpu = target.cpu_seconds()
        started = time.perf_counter()
        await asyncio.gather(*(one(connection, share) for connection in connections))
        return time.perf_counter() - started, target.cpu_seconds() - cpu
    finally:
        for connection in connections:
            connection.close()


async def _throughput(ctx: Context, result: Result, targets: list[Target]) -> None:
    rounds = ctx.pick(3, 1)
    single_requests = ctx.pick(6000, 1000)
    batched_requests = ctx.pick(400, 60)
    batch = orjson.dumps([{"type": "delta", "text": f"token {n}"} for n in range(BATCH)])
    kinds = {  # kind -> (content type, body, requests per window, messages per request, unit, label)
        "single": ("text/plain", MESSAGE, single_requests, 1, "appends/s", "append, one message per request"),
        "batched": ("application/json", batch, batched_requests, BATCH, "messages/s",
                    f"append, a JSON array of {BATCH} messages per request"),
    }
    for kind, (content_type, body, requests, per_request, unit, label) in kinds.items():
        raws = {}
        for target in targets:
            path = create(target, f"bench-{kind}-{secrets.token_hex(4)}", content_type)
            raws[target.name] = http.request_bytes("POST", path, body, content_type)
            await _appends(target, raws[target.name], max(CONNECTIONS, requests // 10))  # warm-up
        rates: dict[str, list[float]] = {target.name: [] for target in targets}
        cpus: dict[str, list[float]] = {target.name: [] for target in targets}
        for round_number in range(rounds):
            # Alternate which server goes first, so neither always follows the other's garbage.
            for target in targets if round_number % 2 == 0 else targets[::-1]:
                seconds, cpu = await _appends(target, raws[target.name], requests)
                messages = requests // CONNECTIONS * CONNECTIONS * per_request
                rates[target.name].append(messages / seconds)
                cpus[target.name].append(cpu / messages)
        medians = {name: statistics.median(values) for name, values in rates.items()}
        note = f"{CONNECTIONS} connections, median of {rounds} window(s) of {requests:,} requests"
        for target in targets:
            result.add(f"{target.name}_{kind}", f"{target.name}: {label}", medians[target.name], unit, note)
        for target in targets:
            # CPU time depends much less on the machine's other load than the rate does.
            result.add(f"{target.name}_{kind}_cpu", f"{target.name}: server CPU per message ({kind})",
                       statistics.median(cpus[target.name]) * 1e6, "µs")
        ratio = medians["lastword"] / medians["reference"]
        result.ratio(kind, f"{label}, lastword / reference", ratio)
        if kind == "single":
            result.target("append one message per request >= 1.0x the reference", ratio, 1.0, "x",
                          higher_is_better=True)


async def _fan_out_once(target: Target, subscribers: int, appends: int) -> list[float]:
    """Latencies (s) from writing an append to each subscriber seeing its ``event: data``."""
    path = create(target, f"bench-fanout-{secrets.token_hex(4)}", "text/plain")
    control, data = http.Tally(), http.Tally()
    control.arm(subscribers)
    streams = await http.open_subscribers(target.url, [path + "?offset=-1&live=sse"] * subscribers,
                                          {b"control": control, b"data": data})
    latencies: list[float] = []
    try:
        await control.wait(120)  # every subscriber is at the (empty) tail
        connection = await http.connect(target.url)
        raw = http.request_bytes("POST", path, MESSAGE, "text/plain")
        try:
            for _ in range(appends):
                await asyncio.sleep(0.02)  # let the last round's control events settle
                data.arm(subscribers)
                sent = time.perf_counter()
                status, body = await connection.send(raw)
                if status not in (200, 204):
                    raise http.HttpError(f"{target.name}: append answered {status} {body[:300]!r}")
                await data.wait(60)
                latencies.extend(at - sent for at in data.times)
        finally:
            connection.close()
    finally:
        for stream in streams:
            stream.close()
    return latencies


async def _fan_out(ctx: Context, result: Result, targets: list[Target]) -> None:
    plan = ctx.pick([(100, 30), (1000, 10)], [(100, 5)])
    for target in targets:  # warm-up
        await _fan_out_once(target, 10, 3)
    p99: dict[str, float] = {}
    for subscribers, appends in plan:
        for target in targets:
            latencies = await _fan_out_once(target, subscribers, appends)
            p50 = http.percentile(latencies, 0.5) * 1000
            p99[target.name] = http.percentile(latencies, 0.99) * 1000
            note = f"{len(latencies):,} samples ({appends} appends)"
            result.add(f"{target.name}_p50_{subscribers}", f"{target.name}: SSE fan-out to {subscribers:,}, p50",
                       p50, "ms", note)
            result.add(f"{target.name}_p99_{subscribers}", f"{target.name}: SSE fan-out to {subscribers:,}, p99",
                       p99[target.name], "ms")
        result.ratio(f"p99_{subscribers}", f"SSE fan-out p99 at {subscribers:,}, lastword / reference",
                     p99["lastword"] / p99["reference"], "lower is better")
    most = plan[-1][0]
    result.target(f"fan-out p99 at {most:,} subscribers <= the reference's", p99["lastword"], p99["reference"],
                  "ms", higher_is_better=False)


async def _measure(ctx: Context, result: Result, reference: tuple[str, int]) -> None:
    # A /ds SSE read ends after LASTWORD_DS_SSE_SECONDS (60 s by default) and the client would
    # resume; a thousand subscribers opened on a loaded machine must outlast the measurement.
    with Server(env={"LASTWORD_DS_SSE_SECONDS": "3600"}) as server:
        targets = [Target("lastword", server.url, "/ds", server.pid), Target("reference", reference[0], "", reference[1])]
        await _throughput(ctx, result, targets)
        await _fan_out(ctx, result, targets)
    result.note("the reference server keeps streams in memory; lastword's are in SQLite (durability normal)")


def run(ctx: Context) -> Result:
    install_reference()
    result = Result("s", TITLE)
    with reference_server() as reference:
        http.run(_measure(ctx, result, reference))
    return result
