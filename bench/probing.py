"""The worst latency of a probe while something else runs: what the stall scenarios share.

A probe is a coroutine that sends one request after another until told to stop, noting for each
when it was sent and how long its answer took (:data:`Probe`). :func:`during` runs a probe around
a piece of work and keeps the probes that were in flight at any moment of it; :func:`idle` runs it
alone, for the baseline measured in the same run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from bench import http

#: A probe: requests back to back until the event is set, each ``(sent at, latency)`` appended.
Probe = Callable[[asyncio.Event, list[tuple[float, float]]], Awaitable[None]]
#: How long a probe runs before the work starts, so it is answering when the work begins.
LEAD = 0.2


def repeating(url: str, raw: bytes, what: str) -> Probe:
    """A probe sending the prepared request ``raw`` to ``url`` on one keep-alive connection; any
    answer but 200 ends the bench (``what`` names the request in the error)."""

    async def probe(stop: asyncio.Event, seen: list[tuple[float, float]]) -> None:
        conn = await http.connect(url)
        try:
            while not stop.is_set():
                sent = time.perf_counter()
                status, _ = await conn.send(raw)
                if status != 200:
                    raise http.HttpError(f"{what} answered {status}")
                seen.append((sent, time.perf_counter() - sent))
        finally:
            conn.close()

    return probe


async def during(probe: Probe, work: Callable[[], Awaitable[object]]) -> tuple[list[float], float]:
    """The latencies of the probes in flight while ``work`` ran, and how long it took."""
    stop = asyncio.Event()
    seen: list[tuple[float, float]] = []
    task = asyncio.create_task(probe(stop, seen))
    await asyncio.sleep(LEAD)
    started = time.perf_counter()
    await work()
    ended = time.perf_counter()
    stop.set()
    await task
    return [latency for sent, latency in seen if sent <= ended and sent + latency >= started], ended - started


async def idle(probe: Probe, seconds: float) -> float:
    """The probe's worst latency with nothing else running, over ``seconds``."""
    stop = asyncio.Event()
    seen: list[tuple[float, float]] = []
    task = asyncio.create_task(probe(stop, seen))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    return max(latency for _, latency in seen)
