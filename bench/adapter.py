"""(h) A provider's own stream vs the equivalent session events (SPEC §13).

Workload: Anthropic Messages ``text/event-stream`` bodies of one message with ``DELTAS`` text
deltas (``message_start``, a ``ping``, the text block, ``message_delta``, ``message_stop``),
posted to ``POST /v1/runs/{id}/ingest/anthropic``; against the same messages as the §4 events
a producer would push itself (``DELTAS`` ``assistant/chunk`` text deltas and one
``assistant/message``, each with an ``eventId``) in one JSON request to ``/events``. Both go to
the same server, one open run per connection (each body a new step of its turn), in
alternating windows; the figure is messages per second, the ratio adapter / events, and the
server's CPU time per message of each (the same ratio by CPU, which a busy machine disturbs
least).

What the adapter adds: parsing the SSE (httpx-sse), a JSON parse per provider event, the
translation, and storing ``source`` (the raw event) in every event, which makes the stored
events about twice as large.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import orjson

from bench import http
from bench.alternating import alternate
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Anthropic SSE through the adapter vs the equivalent §4 events"
CONNECTIONS = 4
DELTAS = 1000
PIECE = "a streamed delta of text "  # 25 characters


def sse_body(message_id: str) -> bytes:
    def event(value: dict[str, object]) -> str:
        return f"event: {value['type']}\ndata: {orjson.dumps(value).decode()}\n\n"

    parts = [event({"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": "bench", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        event({"type": "ping"}),
        event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})]
    delta = event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": PIECE}})
    parts.extend([delta] * DELTAS)
    parts.append(event({"type": "content_block_stop", "index": 0}))
    parts.append(event({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                        "usage": {"output_tokens": 5000}}))
    parts.append(event({"type": "message_stop"}))
    return "".join(parts).encode()


def events_body(message_id: str) -> bytes:
    events: list[dict[str, object]] = [
        {"type": "assistant/chunk", "delta": {"type": "text", "text": PIECE}, "eventId": f"{message_id}:{n + 3}"}
        for n in range(DELTAS)]
    events.append({"type": "assistant/message", "eventId": f"{message_id}:message", "message": {
        "id": message_id, "content": [{"type": "text", "text": PIECE * DELTAS}],
        "usage": {"inputTokens": 100, "outputTokens": 5000}, "stopReason": "tool_use"}})
    return orjson.dumps(events)


async def _window(server: Server, kind: str, seconds: float) -> tuple[int, float]:
    """Messages per second over ``seconds``, each connection posting to its own open run."""
    conn = await http.connect(server.url)
    runs = []
    for _ in range(CONNECTIONS):
        run_id = f"bench-h-{secrets.token_hex(6)}"
        await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
        runs.append(run_id)
    conn.close()
    connections = [await http.connect(server.url) for _ in runs]
    deadline = time.perf_counter() + seconds

    async def hammer(connection: http.Connection, run_id: str) -> int:
        done = 0
        while time.perf_counter() < deadline:
            message_id = f"msg_{secrets.token_hex(8)}"  # each body a new step (no duplicates)
            if kind == "adapter":
                raw = http.request_bytes("POST", f"/v1/runs/{run_id}/ingest/anthropic", sse_body(message_id),
                                         "text/event-stream")
            else:
                raw = http.request_bytes("POST", f"/v1/runs/{run_id}/events", events_body(message_id),
                                         "application/json")
            status, answer = await connection.send(raw)
            if status != 200:
                raise http.HttpError(f"{kind} answered {status}: {answer[:300]!r}")
            done += 1
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(hammer(c, r) for c, r in zip(connections, runs, strict=True)))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return sum(counts), elapsed


async def _measure(ctx: Context, result: Result) -> None:
    measured = await alternate(ctx, ("adapter", "events"), _window, profiled="adapter", label="h")
    median, cpu = measured.rates, measured.cpu_ms
    result.add("adapter", f"SSE body of {DELTAS} deltas → /ingest/anthropic", median["adapter"], "msg/s",
               f"{median['adapter'] * (DELTAS + 7):.0f} provider events/s")
    result.add("events", f"the same message as {DELTAS + 1} §4 events → /events", median["events"], "msg/s",
               f"{median['events'] * (DELTAS + 1):.0f} events/s")
    result.add("adapter_cpu", "server CPU per SSE body (/ingest/anthropic)", cpu["adapter"], "ms")
    result.add("events_cpu", "server CPU per §4 body (/events)", cpu["events"], "ms")
    ratio = median["adapter"] / median["events"]
    result.ratio("adapter_vs_events", "adapter / §4 events", ratio)
    result.ratio("adapter_vs_events_cpu", "adapter / §4 events, by server CPU per message", cpu["events"] / cpu["adapter"])
    result.series["rates"] = median
    result.series["cpu_ms"] = cpu
    result.note(f"SQLite, {CONNECTIONS} connections, {measured.seconds:g} s windows, {measured.rounds} round(s), medians")
    result.target(">= 0.8x the equivalent §4 events (issue 25)", ratio, 0.8, "x", higher_is_better=True)


def run(ctx: Context) -> Result:
    result = Result("h", TITLE)
    http.run(_measure(ctx, result))
    return result
