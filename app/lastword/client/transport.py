"""What both clients are made of: their options, an httpx client of their kind, its failures as ours.

The transport is injectable (``transport=``), as in httpx. A transport error met once the
retries are spent is raised as :class:`LastwordConnectionError`, for a request and for a stream
that can reconnect no more alike.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import httpx

from lastword.client.calls import _Core
from lastword.client.errors import LastwordConnectionError
from lastword.client.retry import RETRY_SECONDS
from lastword.client.streams import _Stream


Http = TypeVar("Http", httpx.Client, httpx.AsyncClient)

Transport = TypeVar("Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)


class _Client(Generic[Http, Transport]):
    """What both clients are made of: their options, written once, and an httpx client of their kind.

    ``retries``: how often a request is retried after a transport error or a 429/502/503/504,
    with exponential ``backoff``; ``timeout``: seconds per request (long polls get their wait on
    top); ``reconnects``: how many failed reconnects in a row a stream that was open survives
    (default: ``retries``; a large number waits out a server restart of any length);
    ``retry_seconds``: how long a child's output (``ingest_cli_stream``, the stream pushers) is
    sent again after failures in a row, however many tries that takes.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: float = 30.0,
        reconnects: int | None = None,
        retry_seconds: float = RETRY_SECONDS,
        transport: Transport | None = None,
    ) -> None:
        self._core = _Core(token, retries, backoff, timeout, reconnects, retry_seconds)
        self._http: Http = self._open(base_url, timeout, transport)

    def _open(self, base_url: str, timeout: float, transport: Transport | None) -> Http:
        raise NotImplementedError

    def _unreachable(self, error: httpx.TransportError) -> LastwordConnectionError:
        """``error``, met once the retries were spent, as the clients' own error."""
        if isinstance(error, LastwordConnectionError):
            return error
        unreachable = LastwordConnectionError(str(self._http.base_url).rstrip("/"), error)
        unreachable.__cause__ = error
        return unreachable

    def _reconnect_pause(self, stream: _Stream, error: Exception) -> float:
        """The pause before a stream reconnects; the clients' own error once there is to be none."""
        try:
            return stream.resume.failed(error)
        except httpx.TransportError as lost:
            raise self._unreachable(lost) from lost
