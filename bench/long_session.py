"""(n) A 64 MB Claude Code session ingested whole through one streamed request: the server's peak memory.

Workload: a Claude Code ``stream-json`` session built from a recorded one
(``tests/cli_children/fixtures/claude-code-partial/tool_then_empty_end_turn.ndjson``: text and a
Bash call streamed as partial messages, the tool's result, then two empty replies and the
``result`` line). Its first line (``system/init``) opens the session, its tool round (the lines
from the first ``system/status`` to the ``tool_result``) is repeated with fresh message, tool
call and line ids until the session has the size wanted, and its last round ends it. The whole
session goes to ``POST /v1/runs/{id}/ingest/claude-code`` as one chunked request, written as
fast as the server reads it, so the server holds what it has not yet stored at any moment.

Figures: the server's peak resident memory (``VmHWM``) over its whole life, for a fresh server
per session: one that was only started and warmed up with the recorded session itself (the
baseline), one fed a 1 MB session, one fed the 64 MB session. The ratios: the peak's growth
over the baseline for 64 MB against 1 MB (1 when the peak does not grow with the session), and
the 64 MB session's growth per MB of session. Each session is checked stored whole: the turn
ended ``completed`` by the ``result`` line, with every tool round's message stored.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
import uuid
from pathlib import Path

import httpx

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server, rss_bytes

TITLE = "A 64 MB Claude Code session ingested whole in one streamed request: server peak memory"
SIZES_MB = (1, 64)
QUICK_SIZES_MB = (1, 8)
FIXTURE = (Path(__file__).resolve().parent.parent / "tests" / "cli_children" / "fixtures" / "claude-code-partial"
           / "tool_then_empty_end_turn.ndjson")
#: Bytes of body written at a time.
PIECE = 64 * 1024
#: Ids a repeated round must not share with another: messages, tool calls, lines.
_IDS = re.compile(rb"msg_fake_[0-9a-f]+|toolu_fake_[0-9a-f]+|\"uuid\":\"[0-9a-f-]+\"")


def _parts() -> tuple[bytes, bytes, bytes]:
    """The recorded session cut into its opening line, its tool round, and the rest."""
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    round_end = next(index for index, line in enumerate(lines) if b'"tool_result"' in line) + 1
    return lines[0], b"".join(lines[1:round_end]), b"".join(lines[round_end:])


def _fresh(part: bytes) -> bytes:
    """``part`` with every id replaced by a new one (the same id by the same new one)."""
    new: dict[bytes, bytes] = {}

    def replace(found: re.Match[bytes]) -> bytes:
        old = found.group(0)
        if old not in new:
            if old.startswith(b'"uuid"'):
                new[old] = b'"uuid":"' + str(uuid.uuid4()).encode() + b'"'
            else:
                prefix = old[: old.index(b"fake_") + 5]
                new[old] = prefix + secrets.token_hex((len(old) - len(prefix)) // 2).encode()
        return new[old]

    return _IDS.sub(replace, part)


def session(size: int) -> tuple[list[bytes], int]:
    """A session of about ``size`` bytes (at least one tool round) as body pieces, and its rounds."""
    head, tool_round, tail = _parts()
    pieces = [head]
    total, rounds = len(head) + len(tail), 0
    while rounds == 0 or total + len(tool_round) <= size:
        fresh = _fresh(tool_round)
        pieces.append(fresh)
        total += len(fresh)
        rounds += 1
    pieces.append(_fresh(tail))
    return pieces, rounds


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (``VmHWM``), in bytes."""
    return rss_bytes(pid, "VmHWM")


async def _ingest(server: Server, pieces: list[bytes]) -> str:
    """Send the session as one chunked request to a new run; the run's id."""
    run_id = f"bench-n-{secrets.token_hex(6)}"
    connection = await http.connect(server.url)
    await connection.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    assert connection.writer is not None
    writer = connection.writer
    writer.write(f"POST /v1/runs/{run_id}/ingest/claude-code HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    for piece in pieces:
        for at in range(0, len(piece), PIECE):
            data = piece[at : at + PIECE]
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
    status, answer = await connection.send(b"0\r\n\r\n")
    connection.close()
    if status != 200:
        raise http.HttpError(f"ingest answered {status}: {answer[:300]!r}")
    return run_id


def _check_whole(server: Server, run_id: str, rounds: int) -> None:
    """The turn ended completed, with one stored tool call per round sent."""
    result = httpx.get(f"{server.url}/v1/runs/{run_id}/result", timeout=60).json()
    if result.get("stopReason") != "completed":
        raise AssertionError(f"the turn ended {result.get('stopReason')}: {result}")
    calls, after = 0, 0
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while True:
            page = client.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 1000}).json()
            if not page["events"]:
                break
            for entry in page["events"]:
                event = entry["event"]
                if event["type"] == "assistant/message":
                    calls += sum(1 for block in event["message"]["content"] if block.get("type") == "tool_call")
            after = page["nextAfter"]
    if calls != rounds:
        raise AssertionError(f"{calls} tool calls stored of {rounds} sent")


def _peak_after(pieces: list[bytes] | None, rounds: int) -> tuple[int, float]:
    """A fresh server's peak RSS after the warm-up (the recorded session) and ``pieces``, if any;
    and the seconds the pieces' request took."""
    server = Server().start()
    try:
        warm, warm_rounds = session(0)
        run_id = str(http.run(_ingest(server, warm)))
        _check_whole(server, run_id, warm_rounds)
        if pieces is None:
            return peak_rss(server.pid), 0.0
        started = time.perf_counter()
        run_id = str(http.run(_ingest(server, pieces)))
        seconds = time.perf_counter() - started
        _check_whole(server, run_id, rounds)
        return peak_rss(server.pid), seconds
    finally:
        server.cleanup()


def run(ctx: Context) -> Result:
    result = Result("n", TITLE)
    sizes = ctx.pick(SIZES_MB, QUICK_SIZES_MB)
    base, _ = _peak_after(None, 0)
    result.add("baseline_peak", "server peak RSS, started and fed the recorded session only", base / 2**20, "MiB")
    growth: dict[int, float] = {}
    for megabytes in sizes:
        pieces, rounds = session(megabytes * 1_000_000)
        size = sum(len(piece) for piece in pieces)
        lines = sum(piece.count(b"\n") for piece in pieces)
        peak, seconds = _peak_after(pieces, rounds)
        growth[megabytes] = (peak - base) / 2**20
        result.add(f"peak_{megabytes}mb", f"server peak RSS, a {megabytes} MB session in one request", peak / 2**20,
                   "MiB", f"{size / 1e6:.1f} MB, {lines:,} lines, {rounds:,} tool rounds, stored whole in "
                   f"{seconds:.1f} s; +{growth[megabytes]:.1f} MiB over the baseline")
    small, large = sizes[0], sizes[-1]
    result.ratio("peak_growth", f"peak growth over the baseline, {large} MB session / {small} MB session "
                 f"(1: the peak does not grow with the session; {large // small}: it holds the whole session)",
                 growth[large] / growth[small] if growth[small] > 0 else float("inf"))
    result.add("peak_growth_per_mb", f"peak growth over the baseline per MB of the {large} MB session",
               growth[large] / large, "MiB/MB")
    result.series["peak_mib"] = {0: base / 2**20, **{size: base / 2**20 + grown for size, grown in growth.items()}}
    result.note("SQLite, a fresh server per session (VmHWM is a process's peak over its life), "
                f"{PIECE // 1024} KiB chunks written as fast as the server reads them")
    return result
