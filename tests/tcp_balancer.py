"""A TCP forwarder standing where a Kubernetes Service stands in front of lastword's replicas.

Each new connection goes to the next replica that is *up*, round robin, and its bytes are
copied both ways until either side closes; a connection already forwarded stays with its
replica (as kube-proxy's does) until that replica closes it. Which replicas are up is the
test's to say, as the endpoints controller says it: :meth:`Balancer.down` when a pod starts
terminating, :meth:`Balancer.up` once it is ready again. A replica that refuses the connection
is skipped for the next one up, so a client never sees a refusal while another replica is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

#: Bytes copied at a time each way.
PIECE = 64 * 1024


class Balancer:
    """Listens on 127.0.0.1 (``.url``) and forwards to ``backends`` (ports on 127.0.0.1)."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = list(backends)
        self._up = [True] * len(backends)
        self._next = 0
        self._lock = threading.Lock()
        #: How many connections went to each backend (by index), for the test to see both served.
        self.forwarded = [0] * len(backends)
        self._loop = asyncio.new_event_loop()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, name="tcp-balancer", daemon=True)
        self._started = threading.Event()
        self._server: asyncio.Server | None = None

    def up(self, index: int) -> None:
        with self._lock:
            self._up[index] = True

    def down(self, index: int) -> None:
        with self._lock:
            self._up[index] = False

    def _candidates(self) -> list[int]:
        """Backends to try for a new connection: those up, starting after the last one chosen."""
        with self._lock:
            count = len(self.backends)
            order = [(self._next + step) % count for step in range(count)]
            self._next = (self._next + 1) % count
            return [index for index in order if self._up[index]]

    def start(self) -> Balancer:
        self._thread.start()
        self._started.wait(10)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._listener.close()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def listen() -> None:
            self._server = await asyncio.start_server(self._forward, sock=self._listener)
            self._started.set()

        self._loop.run_until_complete(listen())
        self._loop.run_forever()
        # Connections still forwarded at the close (a client's keep-alive, a stream): their
        # tasks close both ends as they are cancelled, and the loop runs until the transports
        # are gone, or they would be collected unclosed (a ResourceWarning in the test).
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    async def _forward(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        writers = [client_writer]
        try:
            upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
            for index in self._candidates():
                try:
                    upstream = await asyncio.open_connection("127.0.0.1", self.backends[index])
                except OSError:
                    continue  # not listening (yet, or any more): the next one up
                self.forwarded[index] += 1
                break
            if upstream is None:
                return  # no replica up: the client sees the connection closed
            upstream_reader, upstream_writer = upstream
            writers.append(upstream_writer)
            await asyncio.gather(_copy(client_reader, upstream_writer, client_writer),
                                 _copy(upstream_reader, client_writer, upstream_writer))
        except asyncio.CancelledError:
            # The balancer closes with the connection open: an end, not a failure (asyncio's
            # server would log the cancelled task as one).
            return
        finally:
            for writer in writers:
                writer.close()
        for writer in writers:
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: asyncio.StreamWriter) -> None:
    """Copy until ``reader`` ends, then pass its end on (a half close, as TCP would); a reset on
    either side resets both (``source`` is the writer of ``reader``'s own connection)."""
    try:
        while piece := await reader.read(PIECE):
            writer.write(piece)
            await writer.drain()
        if not writer.is_closing() and writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()
        source.transport.abort()


@contextlib.contextmanager
def balancing(backends: list[int]) -> Iterator[Balancer]:
    balancer = Balancer(backends).start()
    try:
        yield balancer
    finally:
        balancer.close()
