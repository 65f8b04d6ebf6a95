"""(b) One event per request, against a no-op endpoint of the same server.

The no-op is ``GET /healthz``: it goes through the same uvicorn, the same FastAPI app, its
middleware and a pydantic response model, and does nothing else — so the ratio says what
parsing, validating, folding and committing one event costs on top of serving a request.

Load: ``CONNECTIONS`` keep-alive connections from one asyncio client (uvloop, raw HTTP/1.1,
one request in flight per connection), each posting one text delta per request to its own
run. The same client drives both endpoints, in alternating windows, for several rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import time

import orjson

from bench import http
from bench.context import Context, Skip
from bench.report import Result
from bench.server import Server
from bench.workload import text_delta

TITLE = "One event per request vs the no-op endpoint (GET /healthz)"
CONNECTIONS = 16
EVENT = orjson.dumps(text_delta("a small streamed delta of some fifty bytes of text."))


async def _window(server: Server, requests: list[bytes], seconds: float) -> tuple[float, list[float]]:
    """Requests per second over ``seconds``, and each request's latency (seconds)."""
    connections = [await http.connect(server.url) for _ in requests]
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def hammer(conn: http.Connection, raw: bytes) -> int:
        done = 0
        while True:
            sent = time.perf_counter()
            if sent >= deadline:
                return done
            status, answer = await conn.send(raw)
            if status != 200:
                raise http.HttpError(f"answered {status}: {answer[:300]!r}")
            latencies.append(time.perf_counter() - sent)
            done += 1

    started = time.perf_counter()
    counts = await asyncio.gather(*(hammer(conn, raw) for conn, raw in zip(connections, requests)))
    elapsed = time.perf_counter() - started
    for conn in connections:
        conn.close()
    return sum(counts) / elapsed, latencies


async def _event_requests(server: Server) -> list[bytes]:
    conn = await http.connect(server.url)
    requests = []
    for _ in range(CONNECTIONS):
        run_id = f"bench-b-{secrets.token_hex(6)}"
        await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
        requests.append(http.request_bytes("POST", f"/v1/runs/{run_id}/events", EVENT, "application/json"))
    conn.close()
    return requests


async def _measure(ctx: Context, result: Result) -> None:
    seconds = ctx.pick(4.0, 1.5)
    rounds = ctx.pick(3, 1)
    noop = [http.request_bytes("GET", "/healthz")] * CONNECTIONS
    with contextlib.ExitStack() as stack:
        servers = {"sqlite": stack.enter_context(Server()),
                   "sqlite_full": stack.enter_context(Server(durability="full"))}
        try:
            pg_url = stack.enter_context(ctx.postgres_database())
            servers["postgres"] = stack.enter_context(Server(database_url=pg_url))
        except Skip as reason:
            result.note(f"PostgreSQL skipped: {reason}")
        except RuntimeError as error:
            result.note(f"PostgreSQL skipped: the server did not start: {error}")
        windows = {}
        for name, server in servers.items():
            windows[f"{name}_event"] = (server, await _event_requests(server))
            windows[f"{name}_noop"] = (server, noop)
        for server, requests in windows.values():  # warm-up
            await _window(server, requests, 0.3)
        rates: dict[str, list[float]] = {key: [] for key in windows}
        latencies: dict[str, list[float]] = {key: [] for key in windows}
        for round_number in range(rounds):
            for key, (server, requests) in windows.items():
                profiled = round_number == rounds - 1 and key in ("sqlite_event", "sqlite_noop")
                with ctx.profiler.attach(server, f"b-{key}") if profiled else contextlib.nullcontext():
                    rate, seen = await _window(server, requests, seconds)
                rates[key].append(rate)
                latencies[key].extend(seen)

    labels = {"sqlite": "SQLite", "sqlite_full": "SQLite durability=full", "postgres": "PostgreSQL"}
    median = {key: statistics.median(values) for key, values in rates.items()}
    for name, label in labels.items():
        if f"{name}_event" not in median:
            continue
        for kind, what in (("event", "POST one event"), ("noop", "GET /healthz (no-op)")):
            key = f"{name}_{kind}"
            lat = latencies[key]
            result.add(key, f"{label}: {what}", median[key], "req/s",
                       f"p50 {1000 * http.percentile(lat, 0.5):.1f} ms, p99 {1000 * http.percentile(lat, 0.99):.1f} ms")
        result.ratio(f"{name}_event_vs_noop", f"{label}: one event / no-op", median[f"{name}_event"] / median[f"{name}_noop"])
    if "sqlite_full_event" in median:
        result.ratio("full_vs_normal", "one event, durability full / normal",
                     median["sqlite_full_event"] / median["sqlite_event"])
    result.series["rates"] = {key: median[key] for key in median}
    result.note(f"{CONNECTIONS} connections, {seconds:g} s windows, {rounds} round(s), medians")
    result.target(">= 0.5x the no-op (SQLite, 16 connections)", median["sqlite_event"] / median["sqlite_noop"], 0.5,
                  "x", higher_is_better=True)
    if "postgres_event" in median:
        result.target(">= 0.3x the no-op (PostgreSQL, 16 connections; issue 25)",
                      median["postgres_event"] / median["postgres_noop"], 0.3, "x", higher_is_better=True)


def run(ctx: Context) -> Result:
    result = Result("b", TITLE)
    http.run(_measure(ctx, result))
    return result
