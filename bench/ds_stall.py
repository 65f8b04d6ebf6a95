"""(t) Other writers while a maximal JSON-mode ``/ds`` append commits, and a refused oversized one.

A JSON-mode ``/ds`` append may hold ``LASTWORD_DS_MAX_JSON_MESSAGES`` messages (10,000 by
default; more is 413). Two bodies are posted to an ``application/json`` stream while a second
connection appends one event per request to a run (``POST /v1/runs/{id}/events``, another
writer of the same database) back to back:

* the largest allowed: 10,000 messages of ~1.5 KB (~15 MB, under the default body limit);
* the body that used to stall every writer for 20+ seconds: ``[0,0,…]`` of 4M messages (8 MB),
  now refused at its 10,001st message.

The figure is the slowest of the other writer's appends in flight at any moment of the big
request, against its slowest with nothing else running (the baseline, measured in the same run).
"""

from __future__ import annotations

import secrets

import orjson

from bench import http, probing
from bench.context import Context
from bench.report import Result
from bench.server import Server
from bench.workload import TextSource

TITLE = "Another writer's worst append while a maximal /ds JSON append commits"
MESSAGES = 10_000
ZEROS = 4_000_000


def _largest_allowed(seed: int) -> bytes:
    source = TextSource(seed)
    return orjson.dumps([{"n": number, "text": source.piece(1300, 1500)} for number in range(MESSAGES)])


def _zeros() -> bytes:
    return b"[" + b"0," * (ZEROS - 1) + b"0]"


async def _writer(server: Server) -> probing.Probe:
    """Another writer: one-event appends to a run of its own, back to back."""
    conn = await http.connect(server.url)
    run_id = f"bench-t-{secrets.token_hex(6)}"
    await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    conn.close()
    event = http.request_bytes("POST", f"/v1/runs/{run_id}/events",
                               orjson.dumps({"type": "assistant/chunk", "delta": {"type": "text", "text": "x"}}),
                               "application/json")
    return probing.repeating(server.url, event, "the other writer's append")


async def _while(server: Server, body: bytes, expect: int) -> tuple[float, float, int]:
    """(the other writer's worst append during the body's request, the request's seconds, appends)."""
    conn = await http.connect(server.url)
    path = f"/ds/bench-t/{secrets.token_hex(6)}"
    await conn.request("PUT", path, b"", "application/json", expect=201)
    latencies, seconds = await probing.during(await _writer(server),
                                              lambda: conn.request("POST", path, body, "application/json", expect))
    conn.close()
    return max(latencies), seconds, len(latencies)


async def _measure(ctx: Context, result: Result) -> None:
    rounds = ctx.pick(3, 1)
    largest = _largest_allowed(7)
    zeros = _zeros()
    with Server() as server:
        idle = await probing.idle(await _writer(server), ctx.pick(2.0, 0.5))
        allowed = [await _while(server, largest, 204) for _ in range(rounds)]
        refused = [await _while(server, zeros, 413) for _ in range(rounds)]
    worst_allowed = max(worst for worst, _, _ in allowed)
    worst_refused = max(worst for worst, _, _ in refused)
    result.add("writer_worst_idle", "another writer's worst append, nothing else running", 1000 * idle, "ms")
    result.add("writer_worst_during_max_ds_append", "its worst during a maximal /ds JSON append",
               1000 * worst_allowed, "ms",
               f"{MESSAGES} messages, {len(largest) / 1e6:.1f} MB; {sum(n for _, _, n in allowed)} appends in flight")
    result.add("max_ds_append_seconds", "the maximal append, request to answer", max(s for _, s, _ in allowed), "s")
    result.add("writer_worst_during_refused_append", "its worst during a refused [0,0,…] of 4M messages",
               1000 * worst_refused, "ms", f"{len(zeros) / 1e6:.1f} MB body")
    result.add("refused_append_seconds", "the refused append, request to its 413", max(s for _, s, _ in refused), "s")
    result.ratio("writer_stall_ratio", "worst during the maximal append ÷ idle worst", worst_allowed / idle)


def run(ctx: Context) -> Result:
    result = Result("t", TITLE)
    http.run(_measure(ctx, result))
    return result
