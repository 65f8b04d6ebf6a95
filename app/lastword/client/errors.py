"""What the clients raise when a call did not get its answer: one tree for every sender.

A refusal is a :class:`LastwordAPIError` (the service answered), a service that could not be
reached a :class:`LastwordConnectionError` (after the retries), both a :class:`LastwordError`.
The requests, the stream reconnects and the pushers all raise these, and
:mod:`lastword.client.retry` sorts them into worth another try or not. Imports no other module
of the client, so every one of them can import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["LastwordAPIError", "LastwordConnectionError", "LastwordError"]


class LastwordError(Exception):
    """What the clients raise when a call did not get its answer; catch it for "lastword did not
    do it". The tree::

        LastwordError
        ├── LastwordAPIError         the service answered, refusing: status, code, problem
        └── LastwordConnectionError  the service could not be reached or the connection broke,
                                     after the retries (also an httpx.TransportError)
    """


class LastwordAPIError(LastwordError):
    """The service answered with a problem document (or another non-2xx answer)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        self.code = str(problem.get("code", "http_error"))
        super().__init__(f"{status} {self.code}: {problem.get('detail', '')}")


class LastwordConnectionError(LastwordError, httpx.TransportError):
    """The service could not be reached at ``url``, or the connection failed before it answered,
    once the retries were spent. The httpx error is its ``__cause__``; it is an
    ``httpx.TransportError`` too, so code that caught httpx's errors still catches it."""

    def __init__(self, url: str, error: httpx.TransportError) -> None:
        super().__init__(f"cannot reach the service at {url}: {str(error) or type(error).__name__}",
                         request=getattr(error, "_request", None))
        self.url = url
