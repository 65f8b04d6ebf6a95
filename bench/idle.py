"""(e) Memory per idle SSE connection: the server's resident memory, at 1,000 and 5,000 streams.

Streams are spread over 50 continuable runs and left idle once each has received its
``run/snapshot`` (the server then holds the connection, its response task and its hub
subscription, and sends only keep-alive comments). The baseline is taken after a warm-up
that opened and closed 50 streams (a few, so that the memory they free is not simply reused by
the measured ones), so that one-time costs (imports on first use,
the allocator's first arenas, the reader threads' connections) are not counted per stream.
"""

from __future__ import annotations

import asyncio
import gc
import secrets

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Memory per idle SSE connection (server RSS delta / connections)"
RUNS = 50


async def _settle(server: Server) -> int:
    """RSS once it stops moving (the server finishes what the last connections started)."""
    previous = -1
    current = server.rss()
    for _ in range(20):
        await asyncio.sleep(0.25)
        previous, current = current, server.rss()
        if abs(current - previous) < 64 * 1024:
            break
    return current


async def _measure(ctx: Context, result: Result) -> None:
    levels = ctx.pick([1000, 5000], [200, 1000])
    with Server() as server:
        conn = await http.connect(server.url)
        runs = [f"bench-e-{secrets.token_hex(5)}" for _ in range(RUNS)]
        for run_id in runs:
            await conn.post_json("/v1/runs", {"runId": run_id, "mode": "continuable", "leaseSeconds": 0}, expect=201)
        snapshot = http.Tally()
        watch = {b"run/snapshot": snapshot}

        async def open_streams(count: int, first: int) -> list[http.Subscriber]:
            snapshot.arm(count)
            paths = [f"/v1/runs/{runs[(first + i) % RUNS]}/stream" for i in range(count)]
            opened = await http.open_subscribers(server.url, paths, watch)
            await snapshot.wait(120)
            return opened

        warm = await open_streams(50, 0)
        for stream in warm:
            stream.close()
        await asyncio.sleep(1.0)
        base = await _settle(server)
        result.add("baseline_rss", "server RSS with no stream (after warm-up)", base / 2**20, "MiB")
        held: list[http.Subscriber] = []
        series: dict[int, float] = {}
        last_rss = base
        for level in levels:
            held += await open_streams(level - len(held), len(held))
            gc.collect()
            rss = await _settle(server)
            per = (rss - base) / level / 1024
            result.add(f"per_connection_{level}", f"{level:,} idle streams: per connection", per, "KiB",
                       f"server RSS {rss / 2**20:.0f} MiB")
            if series:
                previous = max(series)
                marginal = (rss - last_rss) / (level - previous) / 1024
                result.add(f"marginal_{previous}_{level}", f"streams {previous + 1:,} to {level:,}: per connection",
                           marginal, "KiB")
            series[level] = per
            last_rss = rss
        for stream in held:
            stream.close()
        conn.close()
    result.series["per_connection_kib"] = series
    result.target(f"<= 20 KB per idle connection (at {levels[-1]:,})", series[levels[-1]] * 1024 / 1000,
                  20.0, "KB", higher_is_better=False)  # issue 25 item 4


def run(ctx: Context) -> Result:
    result = Result("e", TITLE)
    http.run(_measure(ctx, result))
    return result
