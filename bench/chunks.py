"""(c) Bare chunk text: ``POST /v1/runs/{id}/chunks`` with a streamed ``text/plain`` body, in MB/s.

The body is sent with chunked transfer encoding, as a producer that pipes a child's output
would send it. Two shapes of the same text:

* 16 KiB pieces — a producer that writes what it has in large blocks;
* 64-byte pieces — a producer that writes each token as it comes (one chunk frame each).

The server turns each piece of body it reads into one text delta, so the number of deltas it
stored (``accepted``) says how finely it had to cut the stream. Each request carries 8 MiB,
under the default body limit (16 MiB), so the service runs with its default configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import time

import orjson

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server
from bench.workload import TextSource

TITLE = "Bare chunk text (/chunks, streamed text/plain)"
MIB = 1 << 20


def _chunked_body(text: bytes, piece: int) -> bytes:
    frames = []
    for start in range(0, len(text), piece):
        part = text[start:start + piece]
        frames.append(b"%x\r\n%s\r\n" % (len(part), part))
    frames.append(b"0\r\n\r\n")
    return b"".join(frames)


async def _stream(server: Server, run_id: str, body: bytes) -> dict[str, int]:
    host, _, port = server.url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST /v1/runs/{run_id}/chunks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    view = memoryview(body)
    for start in range(0, len(body), 256 * 1024):
        writer.write(view[start:start + 256 * 1024])
        await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    answer = orjson.loads(await reader.readexactly(length))
    writer.close()
    if head[9:12] != b"200":
        raise http.HttpError(f"/chunks answered {head[:12]!r}: {answer}")
    return answer


async def _measure(ctx: Context, result: Result) -> None:
    per_request = ctx.pick(8 * MIB, 2 * MIB)
    requests = ctx.pick(4, 1)
    rounds = ctx.pick(3, 1)
    source = TextSource(seed=3, size=per_request + 1024)
    text = source.buffer[:per_request].encode()
    shapes = {"pieces_16k": ("16 KiB pieces", 16 * 1024), "pieces_64": ("64-byte pieces", 64)}
    bodies = {key: _chunked_body(text, size) for key, (_, size) in shapes.items()}
    with Server() as server:
        conn = await http.connect(server.url)
        speeds: dict[str, list[float]] = {key: [] for key in shapes}
        deltas: dict[str, list[int]] = {key: [] for key in shapes}

        async def one_round(key: str) -> None:
            run_id = f"bench-c-{secrets.token_hex(6)}"
            await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
            started = time.perf_counter()
            stored = 0
            for _ in range(requests):
                stored += (await _stream(server, run_id, bodies[key]))["accepted"]
            elapsed = time.perf_counter() - started
            speeds[key].append(requests * per_request / MIB / elapsed)
            deltas[key].append(stored)

        for key in shapes:  # warm-up
            await one_round(key)
            speeds[key].clear()
            deltas[key].clear()
        for round_number in range(rounds):
            for key in shapes:
                profiled = round_number == rounds - 1 and key == "pieces_64"
                with ctx.profiler.attach(server, f"c-{key}") if profiled else contextlib.nullcontext():
                    await one_round(key)
        conn.close()
    for key, (label, size) in shapes.items():
        stored = statistics.median(deltas[key])
        sent = requests * per_request / size
        result.add(key, label, statistics.median(speeds[key]), "MiB/s",
                   f"{sent:,.0f} pieces sent, {stored:,.0f} deltas stored ({requests * per_request / stored / 1024:.1f} KiB each)")
    result.series["speeds"] = {label: statistics.median(speeds[key]) for key, (label, _) in shapes.items()}
    result.note(f"{requests} request(s) of {per_request / MIB:g} MiB per round, {rounds} round(s), medians")


def run(ctx: Context) -> Result:
    result = Result("c", TITLE)
    http.run(_measure(ctx, result))
    return result
