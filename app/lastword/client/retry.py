"""What the clients retry and how long they pause between tries: one policy for every sender.

A request retried after a lost connection or a 429/502/503/504 (:mod:`lastword.client.core`,
through tenacity), a stream reconnecting after a dropped connection, and the stream pusher
resending what a failed request carried (:mod:`lastword.client.stream_pusher`) all wait
:func:`pause` seconds, and all raise :class:`LastwordAPIError` for a refusal and
:class:`LastwordConnectionError` for a service they could not reach (the errors live here, with
the rule that sorts them, so that every sender raises the same ones). A child's output
(a CLI's lines, a pusher's deltas) is sent again for as long as a :class:`RetryWindow` allows:
a time, not a number of tries, so that a rolling restart of the service (a replica draining,
then gone, then back) is ridden out however many tries it takes. The module imports no other
module of the client, so both of those can import it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

__all__ = ["MAX_PAUSE", "RETRIED_STATUSES", "RETRY_SECONDS", "LastwordAPIError", "LastwordConnectionError",
           "LastwordError", "RetryWindow", "is_retried", "pause"]

#: Answers that mean "try again": too many requests, or a replica that is away or draining.
RETRIED_STATUSES = frozenset({429, 502, 503, 504})
#: The longest pause between two tries, however many failed before.
MAX_PAUSE = 5.0
#: Seconds a child's output is sent again after failures in a row (the clients' ``retry_seconds``).
RETRY_SECONDS = 120.0


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


def pause(backoff: float, failures: int) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (1 for the first): doubling
    from ``backoff``, at most :data:`MAX_PAUSE`, and jittered down by up to a half so that
    clients that failed together do not all come back together."""
    full = min(MAX_PAUSE, backoff * 2.0 ** max(0, failures - 1))
    return random.uniform(full / 2, full)


def is_retried(error: BaseException) -> bool:
    """Whether a failed try is worth another: a transport error, or a refusal with a retried status."""
    if isinstance(error, LastwordAPIError):
        return error.status in RETRIED_STATUSES
    return isinstance(error, httpx.TransportError)


class RetryWindow:
    """How long one body (a child's output) is tried again: after each failure worth another try,
    a :func:`pause` growing from ``backoff``, until the failures in a row have gone on for
    ``seconds``. A try that lasted longer than :data:`MAX_PAUSE` was connected (a long-lived body
    streaming), so the failure that ends it starts the window again."""

    def __init__(self, seconds: float, backoff: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.backoff = backoff
        self._clock = clock
        #: Failures in the window; set when it opens (at the first failure after ``_since`` is None).
        self._failures = 0
        self._since: float | None = None

    def failed(self, error: BaseException, started: float) -> float | None:
        """The pause before the next try, after ``error`` ended a try begun at ``started``
        (by ``clock``, ``time.monotonic`` unless given); None when there is to be none: a refusal not worth another try,
        or the window has run out."""
        if not is_retried(error):
            return None
        now = self._clock()
        if self._since is None or now - started > MAX_PAUSE:
            self._since, self._failures = now, 0
        self._failures += 1
        if now - self._since > self.seconds:
            return None
        return pause(self.backoff, self._failures)

    def succeeded(self) -> None:
        """A try was answered: the next failure starts a new window (and counts from 1)."""
        self._since = None
