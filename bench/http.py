"""A small HTTP/1.1 client on raw asyncio streams, and SSE subscribers on asyncio protocols.

Why not httpx here: a benchmark client must cost much less than the server it measures, or
both sides of a ratio converge on the client's own ceiling. A keep-alive connection that
writes a prepared request and reads one ``Content-Length`` answer costs a few tens of
microseconds per request (on uvloop); httpx costs several times that. httpx is still used
where a request's cost does not matter (setup, checks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import orjson

try:
    import uvloop
except ImportError:  # pragma: no cover - uvicorn[standard] brings it
    uvloop = None


def run(coroutine: object) -> object:
    """``asyncio.run`` on uvloop when it is there (the client then costs less)."""
    if uvloop is not None:
        return uvloop.run(coroutine)  # type: ignore[arg-type]
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def request_bytes(method: str, path: str, body: bytes = b"", content_type: str | None = None) -> bytes:
    """A complete HTTP/1.1 keep-alive request, prepared once and written many times."""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if body or method in ("POST", "PUT"):
        head.append(f"Content-Length: {len(body)}")
    if content_type:
        head.append(f"Content-Type: {content_type}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class HttpError(RuntimeError):
    pass


class Connection:
    """One keep-alive connection; ``send`` writes prepared bytes and reads one answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        return self

    async def send(self, raw: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        chunked = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            lowered = name.lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            return status, await self._read_chunked()
        body = await self.reader.readexactly(length) if length else b""
        return status, body

    async def _read_chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size + 2))
            parts[-1] = parts[-1][:-2]

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str | None = None, expect: int | None = None,
    ) -> tuple[int, bytes]:
        status, answer = await self.send(request_bytes(method, path, body, content_type))
        if expect is not None and status != expect:
            raise HttpError(f"{method} {path}: {status} {answer[:300]!r}")
        return status, answer

    async def post_json(self, path: str, value: object, expect: int | None = None) -> object:
        _, answer = await self.request("POST", path, orjson.dumps(value), "application/json", expect)
        return orjson.loads(answer) if answer else None

    async def get_json(self, path: str, expect: int | None = 200) -> object:
        _, answer = await self.request("GET", path, expect=expect)
        return orjson.loads(answer)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def connect(url: str) -> Connection:
    host, _, port = url.removeprefix("http://").partition(":")
    return await Connection(host, int(port)).open()


class Tally:
    """Counts one SSE event type across many subscribers; ``wait(n)`` until n have arrived."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._target = 0
        self._reached = asyncio.Event()

    def arm(self, target: int) -> None:
        self.times = []
        self._target = target
        self._reached.clear()

    def hit(self, at: float) -> None:
        self.times.append(at)
        if len(self.times) >= self._target:
            self._reached.set()

    async def wait(self, timeout: float) -> None:
        await asyncio.wait_for(self._reached.wait(), timeout)


class Subscriber(asyncio.Protocol):
    """One SSE connection that notes the arrival time of the event types it watches.

    It does not parse the stream: it looks for ``event: NAME`` lines in what arrives, which
    is all a latency measurement needs and keeps a thousand subscribers cheap for the client.
    """

    def __init__(self, request: bytes, watch: dict[bytes, Tally]) -> None:
        self._request = request
        self._markers = [(b"event: " + name, tally) for name, tally in watch.items()]
        self._keep = max(len(marker) for marker, _ in self._markers) - 1
        self._tail = b""
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        seen = self._tail + data
        for marker, tally in self._markers:
            start = seen.find(marker)
            while start != -1:
                tally.hit(now)
                start = seen.find(marker, start + len(marker))
        self._tail = seen[-self._keep:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_subscribers(
    url: str, paths: Sequence[str], watch: dict[bytes, Tally], *, wave: int = 200,
) -> list[Subscriber]:
    """Open one SSE connection per path, ``wave`` at a time (the listen backlog is finite)."""
    host, _, port = url.removeprefix("http://").partition(":")
    loop = asyncio.get_running_loop()
    found: list[Subscriber] = []
    for first in range(0, len(paths), wave):
        pending = []
        for path in paths[first:first + wave]:
            raw = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n").encode()
            pending.append(loop.create_connection(lambda raw=raw: Subscriber(raw, watch), host, int(port)))
        for _, protocol in await asyncio.gather(*pending):
            found.append(protocol)
    return found


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[rank]
