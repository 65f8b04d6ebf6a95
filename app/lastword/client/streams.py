"""The resumable SSE streams: a run's stream and the firehose, as both clients follow them.

:class:`_Stream` says where to connect and when the stream is over (a closing message, or a run
that ended); :class:`_Resume` keeps the last id, so that a reconnect continues with
``Last-Event-ID`` right after it, and how long to pause before the next try: a stream that was
open waits out a server restart (``reconnects``), one that never opened reports soon
(``retries``), and a draining replica's 503 is waited out for at least its ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from httpx_sse import ServerSentEvent

from lastword.client import retry
from lastword.client.answers import _Retryable, decode
from lastword.client.retry import RETRIED_STATUSES
from lastword.rules.lifecycle import closes_run_stream
from lastword.schemas import Run

__all__ = ["StreamMessage"]


#: Streams wait for their next message as long as it takes (keep-alives arrive meanwhile).
STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)


@dataclass(frozen=True, slots=True)
class StreamMessage:
    """One SSE message: ``id`` resumes the stream, ``event`` is its type, ``data`` its body."""

    id: int
    event: str
    data: dict[str, Any]


class _Resume:
    """Where a stream stands, so that a reconnect continues right after the last message."""

    def __init__(self, after: int | None, retries: int, reconnects: int, backoff: float) -> None:
        self.last = after
        #: Whether a connection was ever opened: before that, failing to connect is an error to
        #: report soon (``retries``); after it, a server restart to wait out (``reconnects``).
        self.opened = False
        self._failures = 0
        self._retries = retries
        self._reconnects = reconnects
        self._backoff = backoff

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": str(self.last)} if self.last is not None else {}

    def take(self, event: ServerSentEvent) -> StreamMessage | None:
        """The message an SSE event carries; None for ``server/reconnect`` (and anything without
        an id). The parser gives an event without an ``id`` line the last id seen, as the SSE
        specification says, so ``server/reconnect`` is told apart by its type."""
        if event.event == "server/reconnect":
            # The server ends this connection on purpose (a drain, the connection's lifetime):
            # coming back is the plan, not a failure, so the reconnects start afresh. A stream
            # that has had no message yet (a quiet firehose) resumes from where the server says
            # it stood, so what is said while the server restarts is not missed.
            self._failures = 0
            if self.last is None and event.data:
                stood = orjson.loads(event.data).get("lastEventId")
                if isinstance(stood, int) and not isinstance(stood, bool):
                    self.last = stood
            return None
        if not event.id:
            return None
        message = StreamMessage(int(event.id), event.event, orjson.loads(event.data) if event.data else {})
        self._failures = 0
        self.last = message.id
        return message

    def failed(self, error: Exception) -> float:
        """The pause before reconnecting after ``error`` (a lost connection, or a 503 from a
        draining replica: at least its ``Retry-After``); re-raises it once retries are spent."""
        self._failures += 1
        if self._failures > (self._reconnects if self.opened else self._retries):
            if isinstance(error, _Retryable):
                _problem_of_stream(error.response)
            raise error
        pause = retry.pause(self._backoff, self._failures)
        if isinstance(error, _Retryable):
            pause = max(pause, _retry_after(error.response))
        return pause


class _Stream:
    """One SSE subscription as both clients follow it: where to connect, how to resume, when to stop."""

    def __init__(self, path: str, params: dict[str, str], resume: _Resume) -> None:
        self.path = path
        self.params = params
        self.resume = resume
        #: A run stream's mode, once known: it decides whether ``subagent/end`` ends the stream.
        self.mode: str | None = None
        #: Set when a message ended the stream (as opposed to the server closing the connection).
        self.finished_by_message = False

    def connect_options(self) -> dict[str, Any]:
        return {"params": self.params, "headers": self.resume.headers(), "timeout": STREAM_TIMEOUT}

    def finished(self, message: StreamMessage) -> bool:
        """Whether this message ends the stream (it is then the last one given out)."""
        if self.mode is not None and closes_run_stream(message.event, self.mode):
            self.finished_by_message = True
        return self.finished_by_message

    def over(self, run: Run) -> bool:
        """After the server closed the connection: whether the stream has nothing more to say
        (else the server restarted or the connection's lifetime ran out: reconnect)."""
        return self.resume.last is not None and run.status == "ended"


def _problem_of_stream(response: httpx.Response) -> None:
    if response.is_error:
        decode(response, Run)


def _open_stream_refused(response: httpx.Response) -> None:
    """Raise for a refused stream: retryably for a replica that is draining or overloaded."""
    if response.status_code in RETRIED_STATUSES:
        raise _Retryable(response)
    _problem_of_stream(response)


def _retry_after(response: httpx.Response) -> float:
    """The ``Retry-After`` seconds of ``response`` (0 when it has none; at most a minute)."""
    try:
        return min(60.0, max(0.0, float(response.headers.get("retry-after", "0"))))
    except ValueError:
        return 0.0
