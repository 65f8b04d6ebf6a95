"""A small HTTP/1.1 client on raw asyncio streams, and SSE subscribers on asyncio protocols.

Why not httpx here: a benchmark client must cost much less than the server it measures, or
both sides of a ratio converge on the client's own ceiling. A keep-alive connection that
writes a prepared request and reads one ``Content-Length`` answer costs a few tens of
microseconds per request (on uvloop); httpx costs several times that. httpx is still used
where a request's cost does not matter (setup, checks).
"""

from __future__ import annotations

import asyncio
import socket
import struct
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
    """Counts one SSE event type across many subscribers; ``wait(n)`` until n have arrived.

    ``times`` are when each arrived; ``read_times`` when this process's loop read it (the same,
    except from a :class:`StampedSubscriber`, whose arrival is its socket's)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.read_times: list[float] = []
        self._target = 0
        self._reached = asyncio.Event()

    def arm(self, target: int) -> None:
        self.times = []
        self.read_times = []
        self._target = target
        self._reached.clear()

    def hit(self, at: float, read_at: float | None = None) -> None:
        self.times.append(at)
        self.read_times.append(at if read_at is None else read_at)
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


#: ``SO_TIMESTAMPNS`` (Linux): each read's ancillary data carries the kernel's receive time.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("qq")


def _realtime_offset_ns() -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC (``time.perf_counter``'s clock on Linux), in ns."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class StampedSubscriber:
    """:class:`Subscriber`, timing each watched event by when its bytes reached the socket.

    Why: this one process reads every subscriber's socket, one after another. With 100 to
    1,000 of them, a subscriber whose bytes arrived early can be read milliseconds later,
    behind the others that arrived in the same wake-up: a latency taken at the read holds this
    client's queue, which subscribers in processes of their own would not wait in. The kernel
    notes when each piece arrives (``SO_TIMESTAMPNS``, in CLOCK_REALTIME, taken here onto
    ``perf_counter``'s clock); a read that takes several pieces carries the last one's time,
    so a latency is never made shorter than it was. The read time is kept too (``read_at``).
    """

    def __init__(self, request: bytes, watch: dict[bytes, Tally]) -> None:
        self._request = request
        self._markers = [(b"event: " + name, tally) for name, tally in watch.items()]
        self._keep = max(len(marker) for marker, _ in self._markers) - 1
        self._tail = b""
        self._loop = asyncio.get_running_loop()
        self._sock: socket.socket | None = None
        self.closed = self._loop.create_future()

    async def open(self, host: str, port: int) -> StampedSubscriber:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await self._loop.sock_connect(sock, (host, port))
            await self._loop.sock_sendall(sock, self._request)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self._readable)
        return self

    def _readable(self) -> None:
        assert self._sock is not None
        try:
            data, ancillary, _, _ = self._sock.recvmsg(1 << 16, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        if not data:
            self.close()
            return
        now = time.perf_counter()
        arrived = now
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack_from(value)
                arrived = (seconds * 1_000_000_000 + nanoseconds - _realtime_offset_ns()) / 1e9
        seen = self._tail + data
        for marker, tally in self._markers:
            start = seen.find(marker)
            while start != -1:
                tally.hit(arrived, now)
                start = seen.find(marker, start + len(marker))
        self._tail = seen[-self._keep:]

    def close(self) -> None:
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if not self.closed.done():
            self.closed.set_result(None)


def _stream_request(path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n").encode()


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
            raw = _stream_request(path)
            pending.append(loop.create_connection(lambda raw=raw: Subscriber(raw, watch), host, int(port)))
        for _, protocol in await asyncio.gather(*pending):
            found.append(protocol)
    return found


async def open_stamped_subscribers(
    url: str, paths: Sequence[str], watch: dict[bytes, Tally], *, wave: int = 200,
) -> list[StampedSubscriber]:
    """:func:`open_subscribers` whose events are timed by their arrival at the socket."""
    host, _, port = url.removeprefix("http://").partition(":")
    found: list[StampedSubscriber] = []
    for first in range(0, len(paths), wave):
        found.extend(await asyncio.gather(*(
            StampedSubscriber(_stream_request(path), watch).open(host, int(port)) for path in paths[first:first + wave])))
    return found


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[rank]
