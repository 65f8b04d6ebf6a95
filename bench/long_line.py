"""(m) A long line trickled in small pieces: the server's CPU per MB must not grow with the line (SPEC §16a).

Workload: one line of ``SIZES_MB`` megabytes (a Claude Code ``stream_event`` text delta to
``POST /v1/runs/{id}/ingest/claude-code``, and an ``assistant/chunk`` to NDJSON
``/v1/runs/{id}/events``), sent as a chunked body ``PIECE`` bytes at a time with a pause after
each piece, so the server reads the pieces one by one as a child killed mid-print, or a slow
link, would send them. The figure is the server's CPU time while the line is still unfinished
(from its first byte to its last but the newline), per MB, at each size; the ratio is the
largest size's CPU per MB over the smallest's: 1 when the cost grows linearly with the line's
length, the size ratio (16) when it grows with its square (every piece re-reading the line so
far, as the NDJSON splitter did). The server's CPU for the whole request (the line then parsed,
translated and stored) is shown beside it.

The server takes 32 MiB bodies and events (so the 16 MB line is stored, not refused, on both
endpoints); lines are bounded by ``LASTWORD_MAX_LINE_BYTES`` (16 MiB) as by default.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import orjson

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "A long line trickled in small pieces: server CPU per MB at 1, 4 and 16 MB (linear, not quadratic)"
SIZES_MB = (1, 4, 16)
QUICK_SIZES_MB = (1, 2, 4)
#: Bytes of the line sent at a time, and the pause after each (so that each is read alone).
PIECE = 1024
PAUSE = 0.001
LIMIT = str(32 * 1024 * 1024)


def _line(kind: str, size: int) -> tuple[bytes, bytes, bytes]:
    """The body before the long line, the long line (without its newline), and what follows it."""
    session = secrets.token_hex(8)
    if kind == "cli":
        def line(value: dict[str, object]) -> bytes:
            return orjson.dumps({**value, "session_id": session, "uuid": secrets.token_hex(16)})

        head = line({"type": "system", "subtype": "init", "model": "bench"}) + b"\n"
        template = line({"type": "stream_event", "parent_tool_use_id": None, "event": {
            "type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "@"}}})
        tail = b"\n" + line({"type": "result", "subtype": "success", "is_error": False, "result": "",
                             "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}) + b"\n"
    else:
        head = b""
        template = orjson.dumps({"type": "assistant/chunk", "delta": {"type": "text", "text": "@"}})
        tail = b"\n"
    before, _, after = template.partition(b"@")
    return head, before + b"a" * (size - len(before) - len(after)) + after, tail


def _cpu_seconds(pid: int) -> float:
    """CPU time of every thread of the process so far, to the nanosecond (``/proc/PID/task/*/schedstat``:
    psutil's clock ticks are too coarse for the 1 MB line)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass
    return total / 1e9


async def _trickle(server: Server, kind: str, size: int) -> tuple[float, float]:
    """Server CPU seconds while the line is unfinished, and for the whole request."""
    connection = await http.connect(server.url)
    run_id = f"bench-m-{secrets.token_hex(6)}"
    await connection.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    head, line, tail = _line(kind, size)
    path = f"/v1/runs/{run_id}/ingest/claude-code" if kind == "cli" else f"/v1/runs/{run_id}/events"
    assert connection.writer is not None and connection.reader is not None
    writer = connection.writer

    def chunk(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n".encode())
    if head:
        writer.write(chunk(head))
    await writer.drain()
    await asyncio.sleep(0.2)  # the head read and stored before the clock starts
    started = _cpu_seconds(server.pid)
    for at in range(0, len(line), PIECE):
        writer.write(chunk(line[at : at + PIECE]))
        await writer.drain()
        await asyncio.sleep(PAUSE)
    await asyncio.sleep(0.2)  # the last piece read
    unfinished = _cpu_seconds(server.pid) - started
    writer.write(chunk(tail) + b"0\r\n\r\n")
    await writer.drain()
    status, answer = await connection.send(b"")
    whole = _cpu_seconds(server.pid) - started
    connection.close()
    if status != 200:
        raise http.HttpError(f"{kind} answered {status}: {answer[:300]!r}")
    return unfinished, whole


async def _measure(ctx: Context, result: Result) -> None:
    sizes = ctx.pick(SIZES_MB, QUICK_SIZES_MB)
    server = Server(env={"LASTWORD_MAX_BODY_BYTES": LIMIT, "LASTWORD_MAX_EVENT_BYTES": LIMIT}).start()
    try:
        for kind, where in (("cli", "/ingest/claude-code"), ("events", "/events NDJSON")):
            per_mb: dict[int, float] = {}
            for megabytes in sizes:
                started = time.perf_counter()
                unfinished, whole = await _trickle(server, kind, megabytes * 1_000_000)
                per_mb[megabytes] = unfinished / megabytes * 1000
                result.add(f"{kind}_{megabytes}mb", f"{where}: a {megabytes} MB line in {PIECE}-byte pieces, "
                           "server CPU per MB while unfinished", per_mb[megabytes], "ms/MB",
                           f"{unfinished:.2f} s unfinished, {whole:.2f} s with the line stored, "
                           f"{time.perf_counter() - started:.1f} s wall")
            ratio = per_mb[sizes[-1]] / per_mb[sizes[0]]
            result.ratio(f"{kind}_growth", f"{where}: CPU per MB at {sizes[-1]} MB / at {sizes[0]} MB "
                         f"(1: linear; {sizes[-1] // sizes[0]}: quadratic)", ratio)
            result.series[kind] = per_mb
            result.target(f"{where}: CPU per MB at {sizes[-1]} MB within 2x of {sizes[0]} MB (linear)", ratio, 2.0,
                          "x", higher_is_better=False)
    finally:
        server.cleanup()
    result.note(f"SQLite, one connection, {PIECE}-byte chunks each followed by a {PAUSE * 1000:g} ms pause")


def run(ctx: Context) -> Result:
    result = Result("m", TITLE)
    http.run(_measure(ctx, result))
    return result
