"""A clock the test process sets, for a server that runs in it (``threaded_server(settings, clock)``).

Leases, lease sweeps and timestamps read the service's clock (``create_app(settings, clock=…)``);
with this one a test moves time on by ``advance`` instead of sleeping, and waits for proof that
the service has read the new time (``wait_for_reads``) instead of sleeping "long enough".
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter


class ManualClock:
    """Seconds since the epoch, standing still until ``advance``; counts how often it is read."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._reads = 0
        #: Reads by the name of the asyncio task that read (a service's background jobs are named).
        self._reads_by: Counter[str] = Counter()
        self._changed = threading.Condition()

    def __call__(self) -> float:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # not on an event loop
            task = None
        with self._changed:
            self._reads += 1
            if task is not None:
                self._reads_by[task.get_name()] += 1
            self._changed.notify_all()
            return self._now

    def advance(self, seconds: float) -> None:
        with self._changed:
            self._now += seconds

    @property
    def reads(self) -> int:
        with self._changed:
            return self._reads

    def wait_for_reads(self, count: int, timeout: float = 30.0, *, by: str | None = None) -> None:
        """Block until the clock has been read ``count`` more times (the service is working);
        with ``by``, by that named task only (other jobs, e.g. the webhook sender, read it too)."""
        with self._changed:
            def reads() -> int:
                return self._reads if by is None else self._reads_by[by]
            target = reads() + count
            if not self._changed.wait_for(lambda: reads() >= target, timeout):
                raise AssertionError(f"{by or 'the service'} did not read the clock {count} times in {timeout} s")
