"""Server-sent events on the wire: how a message is encoded, and the response that streams them.

One event can go to a thousand subscribers within milliseconds, so the per-message cost of a
stream is what fan-out costs. The response here does per message only what the wire needs:
one ``send`` of bytes already encoded (the event once for every subscriber, several events of
one wake-up joined into one write). What a generic SSE response does per message instead is
done per connection:

* **A client that stops reading.** A send only blocks when the connection's write buffer is
  full. Rather than a cancel scope around every send, the response notes when a send began and
  a timer, re-armed every quarter of ``send_timeout``, looks whether the send under way has
  waited longer than that; if so it cancels the stream at that send and the connection is
  closed with the response left unfinished (a client must not take a cut stream for a complete
  one). So a stuck client is cut off between ``send_timeout`` and 1.25 × ``send_timeout``.
* **A client that leaves.** The request's own task waits for ``http.disconnect`` and calls
  ``on_disconnect`` (the stream ends its subscription, which wakes it), while the messages go
  out from a task of their own. uvicorn makes every later send a no-op once the client has
  gone, and releases a send that waits for buffer space.

**Below the ASGI chain.** An idle stream is most of what a server holds by the thousand, and
its request's coroutines — one frame per middleware, the router, the endpoint, uvicorn's
request cycle — were most of an idle stream's memory, kept only to wait for the client to
leave. So once the headers are out, a response the server can take over (:data:`DETACH` in
the scope's extensions: lastword's own uvicorn protocol offers it) hands its body to the
connection's :class:`Line` and lets the request return: the messages go out from one small
task straight to the transport, and the connection tells the stream when the client leaves.
Under any other server (or a ``HEAD``, whose body is already complete) the response stays an
ASGI response as described above. Such a stream can also be written from outside its task
(:meth:`EventStream.write_now`): the hub writes a waiting subscriber's events at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Protocol

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

MEDIA_TYPE = "text/event-stream"

#: The scope extension a server offers when it can take a streaming body over from the ASGI
#: chain: a callable taking the ``gone`` callback, returning a :class:`Line` (or ``None`` when
#: this response cannot be taken over: its body already complete, the client already gone).
DETACH = "lastword.detach"

log = logging.getLogger(__name__)


class Line(Protocol):
    """A connection's response body written below the ASGI chain (after the headers went out)."""

    async def send(self, chunk: bytes) -> None:
        """Write ``chunk``; waits while the connection's write buffer is full. A no-op once the
        client has gone."""

    def write_now(self, chunk: bytes) -> bool:
        """Write ``chunk`` unless the connection's write buffer is full (``False``: nothing written)."""

    def track(self, task: asyncio.Task[None]) -> None:
        """Count ``task`` as a request in flight (a drain waits for it)."""

    def finish(self) -> None:
        """The body is complete: end it, and keep or close the connection as HTTP says."""

    def abort(self) -> None:
        """Close the connection with the body unfinished."""

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def encode(data: str, *, event: str | None = None, id: int | None = None, retry_ms: int | None = None) -> bytes:
    """One SSE message. ``data`` may hold line breaks (each line becomes a ``data:`` line)."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {_LINE_BREAK.sub('', event)}")
    lines.extend(f"data: {line}" for line in _LINE_BREAK.split(data))
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_message(data: bytes, *, event: str, id: int) -> bytes:
    """:func:`encode` of one JSON text, as bytes: one ``data:`` line, since JSON writes a line
    break in a string as an escape and has none between its tokens unless indented (orjson's
    compact output never is). A fifth of :func:`encode`'s cost, once per event a stream sends."""
    return b"id: %d\r\nevent: %b\r\ndata: %b\r\n\r\n" % (id, _event_name(event), data)


@functools.lru_cache(maxsize=256)
def _event_name(event: str) -> bytes:
    return _LINE_BREAK.sub("", event).encode()


class EventStream(Response):
    """A ``text/event-stream`` response whose body is the ``messages`` iterator's bytes.

    ``on_disconnect`` is called when the client leaves; ``release`` once, however the response
    ends (also when the client left before the first message, when ``messages`` never starts).
    """

    media_type = MEDIA_TYPE

    def __init__(
        self,
        messages: AsyncGenerator[bytes, None],
        *,
        send_timeout: float,
        on_disconnect: Callable[[], None],
        release: Callable[[], None],
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,  # FastAPI reads this default for the OpenAPI document
        content_type: str = "text/event-stream; charset=utf-8",
    ) -> None:
        # Not Response.__init__: it would add a Content-Length for the empty body it was given.
        self.status_code = status_code
        self.background = None
        self.raw_headers = [(b"content-type", content_type.encode("latin-1"))] + [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in (headers or {}).items()
        ]
        self._messages = messages
        self._send_timeout = send_timeout
        self._on_disconnect = on_disconnect
        self._release = release
        #: Loop time the send under way began at; 0.0 while none is.
        self._sending_since = 0.0
        self._listening = True
        self.cut_off = False
        #: The connection's body while the stream writes below the ASGI chain.
        self._line: Line | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        detach = scope.get("extensions", {}).get(DETACH)
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            line = None if detach is None else detach(self._gone)
        except BaseException:
            self._release()
            raise
        if line is not None:
            self._line = line
            pump = asyncio.ensure_future(self._detached(line))
            line.track(pump)
            return
        try:
            # The messages go out from a task of their own, whose stack is a few frames deep:
            # resuming this one, under every middleware, for each event would cost more than
            # the event's write. This one listens for the client leaving meanwhile.
            pump = asyncio.ensure_future(self._through_asgi(send))
            listener = asyncio.current_task()
            assert listener is not None

            def pumped(_: asyncio.Future[None]) -> None:
                if self._listening:  # the stream ended unfinished: stop listening
                    self._listening = False
                    listener.cancel()

            pump.add_done_callback(pumped)
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
                # The client left, or the stream finished (a finished response reads as gone).
                self._gone()
            except asyncio.CancelledError:
                if self._listening:  # not ours: the request itself is being cancelled
                    pump.cancel()
                    raise
                listener.uncancel()
            await pump
        finally:
            self._release()

    def _gone(self) -> None:
        """The client left (or, through ASGI, the response finished)."""
        if self._listening:
            self._listening = False
            self._on_disconnect()

    @property
    def detached(self) -> bool:
        """Written below the ASGI chain (so :meth:`write_now` can write)."""
        return self._line is not None

    def write_now(self, chunk: bytes) -> bool:
        """Write ``chunk`` at once, from outside the stream's task, if that can be done without
        waiting and without overtaking what the task is sending; ``False`` if not (nothing
        written): only a stream below the ASGI chain, with no send of its own under way and
        room in its connection's buffer, can."""
        line = self._line
        return line is not None and not self._sending_since and line.write_now(chunk)

    async def _through_asgi(self, send: Send) -> None:
        async def write(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        if await self._stream(write):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # else unfinished: uvicorn closes the connection

    async def _detached(self, line: Line) -> None:
        complete = False
        try:
            complete = await self._stream(line.send)
        except Exception:
            log.exception("an event stream failed")
        finally:
            self._line = None
            if complete:
                line.finish()
            else:
                line.abort()
            self._release()

    async def _stream(self, write: Callable[[bytes], Awaitable[None]]) -> bool:
        """Send every message through ``write``; ``True`` once all went, ``False`` when the
        client was cut off."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        period = self._send_timeout / 4
        check: asyncio.TimerHandle | None = None

        def look() -> None:
            nonlocal check
            if self._sending_since and loop.time() - self._sending_since >= self._send_timeout:
                self.cut_off = True
                task.cancel()  # the task waits in that send: that is where the cancel lands
                return
            check = loop.call_later(period, look)

        check = loop.call_later(period, look)
        messages = self._messages
        try:
            async for chunk in messages:
                self._sending_since = loop.time()
                try:
                    await write(chunk)
                except asyncio.CancelledError:
                    if not self.cut_off:
                        raise
                    task.uncancel()
                    return False
                self._sending_since = 0.0
            return True
        finally:
            if check is not None:
                check.cancel()
            await messages.aclose()
