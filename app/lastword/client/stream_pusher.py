"""A child's deltas over one long-lived NDJSON request: each line written the moment it is pushed.

Where :mod:`lastword.client.pusher` batches deltas with a linger (a request per batch), a stream pusher
holds one ``POST …/events`` open with an ``application/x-ndjson`` body and writes every pushed
event as a line at once; the service stores the lines as they arrive (in commit groups shared
with every other writer) and its subscribers see each delta within milliseconds. A child
streaming fifty deltas a second costs one request every few seconds, not fifty.

The service answers a request when its body ends, so that answer is the acknowledgement: the
lines written in a request are kept until it is answered. A request ends when ``flush()`` or
``close()`` asks (they return once everything pushed before them is acknowledged), after
``idle`` seconds without a push (well inside the service's body time-out), or once it has
carried ``roll_events`` lines or ``roll_bytes`` bytes, so that acknowledgements keep coming and
what is kept stays small. If a request fails (the connection dropped, the service answered 502,
503 or 504), its lines go out again first in the next one, with growing pauses, for
``retry_seconds`` of failures in a row (a :class:`~lastword.client.retry.RetryWindow`; a
rolling restart of the service is ridden out): every event got its ``eventId`` when it was
pushed and the service stores each id once, so nothing is lost and nothing is stored twice. A
failure that outlasts the window, or a refusal (a 4xx), is raised by the next ``push_*``,
``flush()`` or ``close()``; what was not acknowledged stays kept.

:class:`_Lines` is the bookkeeping both pushers share; :class:`AsyncStreamPusher` drives it
from a task, :class:`StreamPusher` (the synchronous client's) from a thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import orjson

from lastword.client import retry
from lastword.client.pusher import AsyncPusherBase, ThreadPusherBase, with_event_ids

#: Seconds without a push after which the open request is ended (and so acknowledged).
IDLE = 5.0
#: A request is ended (and acknowledged) once it has carried this many lines …
ROLL_EVENTS = 5_000
#: … or this many bytes.
ROLL_BYTES = 1 << 20


def _lines(events: Iterable[Mapping[str, Any]]) -> list[bytes]:
    """Each event as one NDJSON line, with an ``eventId`` (kept when it has one)."""
    return [orjson.dumps(event) + b"\n" for event in with_event_ids(events)]


class _Lines:
    """What is pushed, what the open request has carried, and when that request should end."""

    def __init__(self, roll_events: int, roll_bytes: int) -> None:
        self._roll_events = roll_events
        self._roll_bytes = roll_bytes
        #: Pushed, not yet written.
        self.pending: list[bytes] = []
        #: Written in the open request, not yet acknowledged.
        self.unacked: list[bytes] = []
        self._unacked_bytes = 0
        #: A flush or close asked the open request to end.
        self.finishing = False
        self.error: BaseException | None = None

    @property
    def idle(self) -> bool:
        """Everything pushed is acknowledged."""
        return not self.pending and not self.unacked

    def take(self) -> bytes:
        """Pending lines to be written now, as many as the open request has room for; they
        count as carried by it."""
        room = self._roll_events - len(self.unacked)
        taken, self.pending = self.pending[:room], self.pending[room:]
        self.unacked.extend(taken)
        piece = b"".join(taken)
        self._unacked_bytes += len(piece)
        return piece

    def request_full(self) -> bool:
        return len(self.unacked) >= self._roll_events or self._unacked_bytes >= self._roll_bytes

    def acknowledged(self) -> None:
        self.unacked.clear()
        self._unacked_bytes = 0
        if not self.pending:
            self.finishing = False

    def failed(self) -> None:
        """The open request failed: what it carried goes out again first."""
        self.pending[:0] = self.unacked
        self.unacked.clear()
        self._unacked_bytes = 0


AsyncSend = Callable[[AsyncIterator[bytes]], Awaitable[Any]]
Send = Callable[[Iterator[bytes]], Any]
Sender = TypeVar("Sender", AsyncSend, Send)


class _StreamPusher(Generic[Sender]):
    """What both stream pushers hold: how to send a request, their options (written once) and the
    :class:`_Lines`. Each starts its own sender (a task or a thread) in :meth:`_start`."""

    def __init__(
        self, send: Sender, *, idle: float = IDLE, roll_events: int = ROLL_EVENTS, roll_bytes: int = ROLL_BYTES,
        retry_seconds: float = retry.RETRY_SECONDS, backoff: float = 0.2,
    ) -> None:
        self._send: Sender = send
        self._idle_seconds = idle
        self._window = retry.RetryWindow(retry_seconds, backoff)
        self._lines = _Lines(roll_events, roll_bytes)
        self._closed = False
        #: Requests sent (a retried one counts again).
        self.requests = 0
        self._start()

    def _start(self) -> None:
        raise NotImplementedError

    def _raise_failure(self) -> None:
        if self._lines.error is not None:
            raise self._lines.error


class AsyncStreamPusher(_StreamPusher[AsyncSend], AsyncPusherBase):
    """Deltas of one run over one long-lived NDJSON request (see the module's docstring)."""

    def _start(self) -> None:
        self._wake = asyncio.Event()
        self._done = asyncio.Event()  # set while everything pushed is acknowledged
        self._done.set()
        self._task = asyncio.get_running_loop().create_task(self._sender())

    def push_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Queue session events; each gets an ``eventId`` now unless it has one."""
        self._raise_failure()
        if self._closed:
            raise RuntimeError("the pusher is closed")
        self._lines.pending.extend(_lines(events))
        self._done.clear()
        self._wake.set()

    async def flush(self) -> None:
        """Return once every event pushed so far is durable."""
        self._raise_failure()
        if not self._lines.idle:
            self._lines.finishing = True
            self._wake.set()
        await self._done.wait()
        self._raise_failure()

    async def _body(self) -> AsyncIterator[bytes]:
        lines = self._lines
        while True:
            if lines.pending:
                yield lines.take()
            if lines.finishing or lines.request_full():
                return
            if not lines.pending:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self._idle_seconds)
                except TimeoutError:
                    return

    async def _sender(self) -> None:
        lines = self._lines
        while True:
            if not lines.pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            self.requests += 1
            started = time.monotonic()
            try:
                await self._send(self._body())
            except Exception as error:
                lines.failed()
                wait = self._window.failed(error, started)
                if wait is None:
                    lines.error = error  # kept for the caller's next call; the lines stay kept
                    self._done.set()
                    return
                await asyncio.sleep(wait)
                continue
            self._window.succeeded()
            lines.acknowledged()
            if lines.idle:
                self._done.set()


class StreamPusher(_StreamPusher[Send], ThreadPusherBase):
    """The same as :class:`AsyncStreamPusher` for the synchronous client: a thread sends."""

    def _start(self) -> None:
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._sender, name="lastword-stream-pusher", daemon=True)
        self._thread.start()

    def push_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Queue session events; each gets an ``eventId`` now unless it has one."""
        encoded = _lines(events)
        with self._changed:
            self._raise_failure()
            if self._closed:
                raise RuntimeError("the pusher is closed")
            self._lines.pending.extend(encoded)
            self._changed.notify_all()

    def flush(self) -> None:
        """Return once every event pushed so far is durable."""
        with self._changed:
            self._raise_failure()
            if not self._lines.idle:
                self._lines.finishing = True
                self._changed.notify_all()
            while not self._lines.idle and self._lines.error is None:
                self._changed.wait()
            self._raise_failure()

    def _body(self) -> Iterator[bytes]:
        lines = self._lines
        while True:
            with self._changed:
                if not lines.pending and not (lines.finishing or lines.request_full()):
                    self._changed.wait(self._idle_seconds)
                if not lines.pending:
                    return  # idle, or asked to end
                piece = lines.take()
                end = lines.finishing or lines.request_full()
            yield piece
            if end:
                return

    def _sender(self) -> None:
        lines = self._lines
        while True:
            with self._changed:
                while not lines.pending and not self._closed:
                    self._changed.wait()
                if not lines.pending:
                    return  # closed with nothing left
                self.requests += 1
            started = time.monotonic()
            try:
                self._send(self._body())
            except Exception as error:
                with self._changed:
                    lines.failed()
                    wait = self._window.failed(error, started)
                    if wait is None:
                        lines.error = error
                        self._changed.notify_all()
                        return
                time.sleep(wait)
                continue
            self._window.succeeded()
            with self._changed:
                lines.acknowledged()
                self._changed.notify_all()
