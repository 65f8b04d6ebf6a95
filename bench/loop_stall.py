"""(h) The event loop while a maximum-size JSON batch is ingested: the worst ``/healthz`` latency.

One batch of ``EVENTS`` assistant messages (about 15.7 MB, just under the default body limit,
each event a mix of text, reasoning and a tool call, so every one takes the full validation
path) is posted to a fresh run while a second connection asks ``GET /healthz`` back to back.
Every ``/healthz`` answered while the batch was in flight (from the first byte sent to its
answer) counts; the figure is the slowest one. Parsing, validating and encoding such a batch
used to hold the loop for seconds; they now run in bounded slices with the loop free between
them (``lastword.ingest.json_input``), so a probe waits for one slice at most.

The baseline is the same ``/healthz`` loop with nothing else going on.
"""

from __future__ import annotations

import secrets

import orjson

from bench import http, probing
from bench.context import Context
from bench.report import Result
from bench.server import Server
from bench.workload import TextSource

TITLE = "Worst /healthz latency while a max-size JSON batch (4,000 events, ~15.7 MB) is ingested"
EVENTS = 4000
GOAL_MS = 50.0
HEALTHZ = http.request_bytes("GET", "/healthz")


def _batch(seed: int) -> bytes:
    source = TextSource(seed)
    events = []
    for number in range(EVENTS):
        events.append({
            "type": "assistant/message",
            "eventId": f"h-{seed}-{number}",
            "message": {
                "content": [
                    {"type": "reasoning", "text": source.piece(300, 500), "signature": "sig"},
                    {"type": "text", "text": source.piece(2600, 3000)},
                    {"type": "tool_call", "id": f"call-{number}", "name": "search",
                     "input": {"query": source.piece(20, 60), "limit": 10, "filters": {"lang": "en"}}},
                ],
                "usage": {"inputTokens": 1200, "outputTokens": 800},
            },
        })
    return orjson.dumps(events)


async def _round(server: Server, body: bytes) -> tuple[float, float, int]:
    """(worst /healthz latency, ingest seconds, probes answered) for one batch."""
    conn = await http.connect(server.url)
    run_id = f"bench-h-{secrets.token_hex(6)}"
    await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    latencies, seconds = await probing.during(
        probing.repeating(server.url, HEALTHZ, "/healthz"),
        lambda: conn.request("POST", f"/v1/runs/{run_id}/events", body, "application/json", expect=200))
    conn.close()
    return max(latencies), seconds, len(latencies)


async def _measure(ctx: Context, result: Result) -> None:
    rounds = ctx.pick(3, 1)
    bodies = [_batch(seed) for seed in range(rounds)]
    size_mb = len(bodies[0]) / 1e6
    with Server() as server:
        idle = await probing.idle(probing.repeating(server.url, HEALTHZ, "/healthz"), ctx.pick(2.0, 0.5))
        worst: list[float] = []
        ingest: list[float] = []
        probes = 0
        for number, body in enumerate(bodies):
            with ctx.profiler.attach(server, "h-batch") if number == rounds - 1 else _null():
                slowest, seconds, answered = await _round(server, body)
            worst.append(slowest)
            ingest.append(seconds)
            probes += answered
    result.add("healthz_worst_during_batch", "worst /healthz during a max-size batch", 1000 * max(worst), "ms",
               f"{probes} probes answered during {rounds} batch(es) of {EVENTS} events, {size_mb:.1f} MB")
    result.add("healthz_worst_idle", "worst /healthz, nothing else running", 1000 * idle, "ms")
    result.add("batch_seconds", "one max-size batch, request to answer", max(ingest), "s",
               f"{EVENTS / max(ingest):.0f} events/s")
    result.target(f"worst /healthz during the batch <= {GOAL_MS:g} ms", 1000 * max(worst), GOAL_MS, "ms",
                  higher_is_better=False)
    result.series["worst_ms"] = [1000 * value for value in worst]


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run(ctx: Context) -> Result:
    result = Result("i", TITLE)
    http.run(_measure(ctx, result))
    return result
