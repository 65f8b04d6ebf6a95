"""What the clients retry and how long they pause between tries: one policy for every sender.

A request retried after a lost connection or a 429/502/503/504 (:mod:`lastword.client.calls`,
through tenacity), a stream reconnecting after a dropped connection, and the stream pusher
resending what a failed request carried (:mod:`lastword.client.stream_pusher`) all wait
:func:`pause` seconds, and all raise :class:`LastwordAPIError` for a refusal and
:class:`LastwordConnectionError` for a service they could not reach (:mod:`lastword.client.errors`;
named here too, beside :func:`is_retried`, the rule that sorts them). A child's output
(a CLI's lines, a pusher's deltas) is sent again for as long as a :class:`RetryWindow` allows:
a time, not a number of tries, so that a rolling restart of the service (a replica draining,
then gone, then back) is ridden out however many tries it takes. The module imports no other
module of the client but the errors, so all of those can import it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import httpx

from lastword.client.errors import LastwordAPIError, LastwordConnectionError, LastwordError

__all__ = ["MAX_PAUSE", "RETRIED_STATUSES", "RETRY_SECONDS", "LastwordAPIError", "LastwordConnectionError",
           "LastwordError", "RetryWindow", "is_retried", "pause"]

#: Answers that mean "try again": too many requests, or a replica that is away or draining.
RETRIED_STATUSES = frozenset({429, 502, 503, 504})
#: The longest pause between two tries, however many failed before.
MAX_PAUSE = 5.0
#: Seconds a child's output is sent again after failures in a row (the clients' ``retry_seconds``).
RETRY_SECONDS = 120.0


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
