"""(k) An agent CLI's own output vs the equivalent session events (SPEC §16).

Workload: what ``claude -p … --output-format stream-json --verbose --include-partial-messages``
prints for one reply of ``DELTAS`` text deltas (``system/init``, ``message_start``, the block's
deltas, the ``assistant`` line, ``content_block_stop``, ``message_delta``, ``message_stop``,
``result``), posted as NDJSON to ``POST /v1/runs/{id}/ingest/claude-code``; against the same
run as the §4 events a producer would push itself (``DELTAS`` ``assistant/chunk``s, one
``assistant/message`` and a ``turn/end``, each with an ``eventId``) as NDJSON to ``/events``.
Each body is a whole run, so each goes to a run of its own, created in the window. Both go to
the same server in alternating windows; the figure is runs per second, the ratio CLI / events,
and the server's CPU time per run of each (the same ratio by CPU, which a busy machine
disturbs least).
Issue 20's goal: >= 0.8x.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid

import orjson

from bench import http
from bench.alternating import alternate
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Claude Code stream-json (partial messages) through the CLI adapter vs the equivalent §4 events"
CONNECTIONS = 4
DELTAS = 1000
PIECE = "a streamed delta of text "  # 25 characters


def _lines(message_id: str) -> bytes:
    session = str(uuid.uuid4())

    def line(value: dict[str, object]) -> bytes:
        return orjson.dumps({**value, "session_id": session, "uuid": str(uuid.uuid4())}) + b"\n"

    def stream(event: dict[str, object]) -> bytes:
        return line({"type": "stream_event", "event": event, "parent_tool_use_id": None})

    usage = {"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    parts = [line({"type": "system", "subtype": "init", "model": "bench"}),
             stream({"type": "message_start", "message": {"id": message_id, "type": "message", "role": "assistant",
                                                          "content": [], "usage": usage}}),
             stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})]
    parts.extend(stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": PIECE}})
                 for _ in range(DELTAS))
    parts.append(line({"type": "assistant", "parent_tool_use_id": None, "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": "bench", "stop_reason": None,
        "content": [{"type": "text", "text": PIECE * DELTAS}], "usage": usage}}))
    parts.append(stream({"type": "content_block_stop", "index": 0}))
    parts.append(stream({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5000}}))
    parts.append(stream({"type": "message_stop"}))
    parts.append(line({"type": "result", "subtype": "success", "is_error": False, "result": PIECE * DELTAS,
                       "stop_reason": "end_turn", "usage": {**usage, "output_tokens": 5000}}))
    return b"".join(parts)


def _events(message_id: str) -> bytes:
    events: list[dict[str, object]] = [
        {"type": "assistant/chunk", "delta": {"type": "text", "text": PIECE}, "eventId": f"{message_id}:{n}"}
        for n in range(DELTAS)]
    events.append({"type": "assistant/message", "eventId": f"{message_id}:message", "message": {
        "id": message_id, "content": [{"type": "text", "text": PIECE * DELTAS}],
        "usage": {"inputTokens": 100, "outputTokens": 5000}, "stopReason": "end_turn"}})
    events.append({"type": "turn/end", "eventId": f"{message_id}:end", "stopReason": "completed"})
    return b"".join(orjson.dumps(event) + b"\n" for event in events)


async def _window(server: Server, kind: str, seconds: float) -> tuple[int, float]:
    """Runs per second over ``seconds``, each connection posting whole runs."""
    connections = [await http.connect(server.url) for _ in range(CONNECTIONS)]
    deadline = time.perf_counter() + seconds

    async def hammer(connection: http.Connection) -> int:
        done = 0
        while time.perf_counter() < deadline:
            run_id = f"bench-k-{secrets.token_hex(6)}"
            await connection.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
            message_id = f"msg_{secrets.token_hex(8)}"
            if kind == "cli":
                raw = http.request_bytes("POST", f"/v1/runs/{run_id}/ingest/claude-code", _lines(message_id),
                                         "application/x-ndjson")
            else:
                raw = http.request_bytes("POST", f"/v1/runs/{run_id}/events", _events(message_id),
                                         "application/x-ndjson")
            status, answer = await connection.send(raw)
            if status != 200:
                raise http.HttpError(f"{kind} answered {status}: {answer[:300]!r}")
            done += 1
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(hammer(connection) for connection in connections))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return sum(counts), elapsed


async def _measure(ctx: Context, result: Result) -> None:
    measured = await alternate(ctx, ("cli", "events"), _window, profiled="cli", label="k")
    median, cpu = measured.rates, measured.cpu_ms
    result.add("cli", f"Claude Code run of {DELTAS} deltas → /ingest/claude-code", median["cli"], "runs/s",
               f"{median['cli'] * (DELTAS + 8):.0f} lines/s")
    result.add("events", f"the same run as {DELTAS + 2} §4 events → /events (NDJSON)", median["events"], "runs/s",
               f"{median['events'] * (DELTAS + 2):.0f} events/s")
    result.add("cli_cpu", "server CPU per run (/ingest/claude-code, its run's creation included)", cpu["cli"], "ms")
    result.add("events_cpu", "server CPU per run (/events, its run's creation included)", cpu["events"], "ms")
    ratio = median["cli"] / median["events"]
    result.ratio("cli_vs_events", "CLI adapter / §4 events", ratio)
    result.ratio("cli_vs_events_cpu", "CLI adapter / §4 events, by server CPU per run", cpu["events"] / cpu["cli"])
    result.series["rates"] = median
    result.series["cpu_ms"] = cpu
    result.note(f"SQLite, {CONNECTIONS} connections, {measured.seconds:g} s windows, {measured.rounds} round(s), medians")
    result.target(">= 0.8x the equivalent §4 events (issue 20)", ratio, 0.8, "x", higher_is_better=True)


def run(ctx: Context) -> Result:
    result = Result("k", TITLE)
    http.run(_measure(ctx, result))
    return result
