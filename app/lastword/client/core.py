"""The clients' public names where they were first defined: ``from lastword.client.core import ...``.

The clients are split by concern: :mod:`~lastword.client.sync` and :mod:`~lastword.client.aio`
(the two clients, which only send and receive), :mod:`~lastword.client.calls` (the requests, one
builder for both), :mod:`~lastword.client.answers`, :mod:`~lastword.client.bodies`,
:mod:`~lastword.client.polls` (``wait_result``, ``join``), :mod:`~lastword.client.streams`
(resuming SSE), :mod:`~lastword.client.transport` and :mod:`~lastword.client.errors`. This
module names them again because the CLI, the benchmarks and the tests import them from here; it
is the top of the client's layers, so nothing in the client imports it.
"""

from __future__ import annotations

from lastword.client.aio import AsyncLastwordClient
from lastword.client.errors import LastwordAPIError, LastwordConnectionError, LastwordError
from lastword.client.streams import StreamMessage
from lastword.client.sync import LastwordClient

__all__ = [
    "AsyncLastwordClient",
    "LastwordAPIError",
    "LastwordClient",
    "LastwordConnectionError",
    "LastwordError",
    "StreamMessage",
]
