"""Waiting in tests for something the server does on its own time: one bounded poll.

A test that must wait for a server-side effect it has no signal for (a gauge, a stored row, a
file) asks :func:`wait_until` (or :func:`wait_until_async` in a coroutine): it looks again
every ``every`` seconds and fails naming what it waited for once ``within`` seconds passed.
The bound only keeps a broken build from hanging; no test asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _message(what: str | Callable[[], str], within: float) -> str:
    return f"not within {within} s: {what() if callable(what) else what}"


def wait_until(condition: Callable[[], T | None], what: str | Callable[[], str], within: float = 30.0,
               every: float = 0.01) -> T:
    """Call ``condition`` until it answers a true value, and return that value.

    ``what`` names the awaited state in the failure (a callable is asked only then, so it may
    read the server's state as it was when the wait gave up).
    """
    deadline = time.monotonic() + within
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(_message(what, within))
        time.sleep(every)
    return found


async def wait_until_async(condition: Callable[[], Awaitable[T | None]], what: str | Callable[[], str],
                           within: float = 30.0, every: float = 0.01) -> T:
    """:func:`wait_until` for a condition that is a coroutine (the event loop keeps running)."""
    deadline = time.monotonic() + within
    while not (found := await condition()):
        if time.monotonic() > deadline:
            raise AssertionError(_message(what, within))
        await asyncio.sleep(every)
    return found
