"""A child's stream of deltas as a handful of requests: push now, sent after a short linger.

A model writes tokens one at a time; one request per token would cost a child fifty requests a
second. :class:`AsyncPusher` buffers what it is given and sends it as one ``POST …/events``
(a JSON array) once ``linger`` seconds have passed since the first unsent event, or at once when
``max_events`` are waiting. One request is in flight at a time, so the events reach the log in
the order they were pushed. Every event gets its ``eventId`` when it is pushed; a request whose
connection drops is sent again by the client's retries with the same ids, and the service
stores each id once: nothing is lost and nothing is stored twice.

``flush()`` returns once everything pushed so far is durable (acknowledged by the service);
``close()`` flushes and stops. A failure that outlasts the retries is raised by the next
``push_*``, ``flush()`` or ``close()``, and what was not acknowledged stays buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Self

#: Seconds an event may wait for others to share its request.
LINGER = 0.05
#: Events that make a request go at once.
MAX_EVENTS = 500

Send = Callable[[list[dict[str, Any]]], Awaitable[Any]]


def with_event_ids(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the events, each with an ``eventId`` (kept when it has one). Given before the
    first attempt, so a retried request is counted as duplicates, not stored twice."""
    return [dict(event) if event.get("eventId") else {**event, "eventId": uuid.uuid4().hex} for event in events]


def text_chunk(text: str) -> dict[str, Any]:
    """A text delta as a session event (an ``assistant/chunk``)."""
    return {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}


class AsyncPusherBase:
    """What every asyncio pusher does alike: text as a chunk, ``close`` (flush, then stop the
    sending task) and ``async with``. A pusher supplies ``push_events``, ``flush`` and ``_task``."""

    _task: asyncio.Task[None]
    _closed: bool

    def push_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        raise NotImplementedError

    async def flush(self) -> None:
        raise NotImplementedError

    def push_text(self, text: str) -> None:
        """Queue a text delta (an ``assistant/chunk``)."""
        self.push_events([text_chunk(text)])

    async def close(self) -> None:
        """Flush, then stop sending."""
        try:
            await self.flush()
        finally:
            self._closed = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ThreadPusherBase:
    """What every threaded pusher (the synchronous client's) does alike: text as a chunk,
    ``close`` (flush, then stop the sending thread) and ``with``. A pusher supplies
    ``push_events``, ``flush``, ``_changed`` and ``_thread``."""

    _changed: threading.Condition
    _thread: threading.Thread
    _closed: bool

    def push_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def push_text(self, text: str) -> None:
        """Queue a text delta (an ``assistant/chunk``)."""
        self.push_events([text_chunk(text)])

    def close(self) -> None:
        """Flush, then stop sending."""
        try:
            self.flush()
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()
            self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncPusher(AsyncPusherBase):
    """Deltas of one run, batched with a short linger (see the module's docstring)."""

    def __init__(self, send: Send, *, linger: float = LINGER, max_events: int = MAX_EVENTS) -> None:
        self._send = send
        self._linger = linger
        self._max_events = max_events
        self._pending: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._sender())
        #: Requests sent (each attempt of the client's retries is one request on the wire).
        self.batches = 0

    def push_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Queue session events; each gets an ``eventId`` now unless it has one."""
        self._raise_failure()
        if self._closed:
            raise RuntimeError("the pusher is closed")
        self._pending.extend(with_event_ids(events))
        self._idle.clear()
        self._wake.set()

    async def flush(self) -> None:
        """Return once every event pushed so far is durable."""
        self._raise_failure()
        if self._pending:
            self._wake.set()
        await self._idle.wait()
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def _sender(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            if len(self._pending) < self._max_events:
                await asyncio.sleep(self._linger)
            batch = self._pending[: self._max_events]
            try:
                await self._send(batch)
            except Exception as error:  # kept for the caller's next call; the batch stays queued
                self._error = error
                self._idle.set()
                return
            self.batches += 1
            del self._pending[: len(batch)]
            if self._pending:
                self._wake.set()
            else:
                self._idle.set()


class Pusher(ThreadPusherBase):
    """The same as :class:`AsyncPusher` for the synchronous client: a thread sends the batches."""

    def __init__(
        self, send: Callable[[list[dict[str, Any]]], Any], *, linger: float = LINGER, max_events: int = MAX_EVENTS
    ) -> None:
        self._send = send
        self._linger = linger
        self._max_events = max_events
        self._pending: list[dict[str, Any]] = []
        self._sending = False
        self._hurry = False
        self._error: BaseException | None = None
        self._closed = False
        self._changed = threading.Condition()
        self.batches = 0
        self._thread = threading.Thread(target=self._sender, name="lastword-pusher", daemon=True)
        self._thread.start()

    def push_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Queue session events; each gets an ``eventId`` now unless it has one."""
        with self._changed:
            self._raise_failure()
            if self._closed:
                raise RuntimeError("the pusher is closed")
            self._pending.extend(with_event_ids(events))
            self._changed.notify_all()

    def flush(self) -> None:
        """Return once every event pushed so far is durable."""
        with self._changed:
            self._hurry = True
            self._changed.notify_all()
            while (self._pending or self._sending) and self._error is None:
                self._changed.wait()
            self._hurry = False
            self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _sender(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if self._closed and not self._pending:
                    return
                deadline = time.monotonic() + self._linger
                while len(self._pending) < self._max_events and not self._hurry and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(left)  # a flush(), close() or a full batch cuts it short
                batch = self._pending[: self._max_events]
                self._sending = True
            try:
                self._send(batch)
            except Exception as error:  # kept for the caller's next call; the batch stays queued
                with self._changed:
                    self._error = error
                    self._sending = False
                    self._changed.notify_all()
                return
            with self._changed:
                self.batches += 1
                del self._pending[: len(batch)]
                self._sending = False
                self._changed.notify_all()
