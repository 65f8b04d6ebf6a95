"""(w) Webhook delivery latency: from ``POST …/end`` to the receiver holding ``subagent.end``.

A receiver (a minimal HTTP/1.1 server on loopback, in this process) notes when each delivery's
body has arrived. Each iteration creates a run with a webhook and ends it, one at a time, so each
delivery is measured alone; a firehose subscriber on the same server notes when the same end's
``subagent/end`` reaches it, the baseline in the same run (the same commit, fanned out over SSE
instead of POSTed through the outbox). Percentiles are over all iterations.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Webhook delivery latency: POST /end to the receiver"


class _Receiver:
    """Answers every POST with 204 and records the arrival time by ``webhook-id``."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.signal = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                fields = dict(
                    line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line
                )
                headers = {k.strip().lower(): v.strip() for k, v in fields.items()}
                await reader.readexactly(int(headers.get(b"content-length", b"0")))
                self.arrived[headers.get(b"webhook-id", b"").decode()] = time.perf_counter()
                self.signal.set()
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def wait_for(self, webhook_id: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while webhook_id not in self.arrived:
            self.signal.clear()
            await asyncio.wait_for(self.signal.wait(), max(0.001, deadline - time.monotonic()))
        return self.arrived[webhook_id]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def _measure(ctx: Context, result: Result) -> None:
    iterations = ctx.pick(300, 30)
    receiver = _Receiver()
    await receiver.start()
    url = f"http://127.0.0.1:{receiver.port}/hook"
    try:
        # The receiver is on loopback, which the service refuses as a webhook target unless told
        # (SPEC §18's safe defaults).
        with Server(env={"LASTWORD_WEBHOOK_ALLOW_PRIVATE": "true"}) as server:
            conn = await http.connect(server.url)
            ends = http.Tally()
            streams = await http.open_subscribers(server.url, ["/v1/stream"], {b"subagent/end": ends})
            delivered: list[float] = []
            fanned: list[float] = []
            prefix = f"bench-w-{secrets.token_hex(4)}"
            try:
                for index in range(iterations + 5):
                    run_id = f"{prefix}-{index}"
                    await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0,
                                                      "webhook": {"url": url}}, expect=201)
                    ends.arm(1)
                    sent = time.perf_counter()
                    await conn.post_json(f"/v1/runs/{run_id}/end", {"stopReason": "completed"}, expect=200)
                    arrived = await receiver.wait_for(f"msg_{run_id}_1", 30)
                    await ends.wait(30)
                    if index >= 5:  # the first few warm the connections up
                        delivered.append(arrived - sent)
                        fanned.append(ends.times[0] - sent)
            finally:
                for stream in streams:
                    stream.close()
                conn.close()
    finally:
        receiver.close()
    p50, p99 = http.percentile(delivered, 0.5) * 1000, http.percentile(delivered, 0.99) * 1000
    base50, base99 = http.percentile(fanned, 0.5) * 1000, http.percentile(fanned, 0.99) * 1000
    result.add("p50", "end → receiver: p50", p50, "ms", f"{len(delivered)} deliveries, one at a time")
    result.add("p99", "end → receiver: p99", p99, "ms")
    result.add("sse_p50", "baseline: end → firehose subscriber, p50", base50, "ms")
    result.add("sse_p99", "baseline: end → firehose subscriber, p99", base99, "ms")
    result.add("ratio_p50", "webhook p50 / firehose p50", p50 / base50 if base50 else 0.0, "×")


def run(ctx: Context) -> Result:
    result = Result("w", TITLE)
    http.run(_measure(ctx, result))
    return result
