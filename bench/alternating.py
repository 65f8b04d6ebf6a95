"""Two kinds of request measured on one server in alternating windows, for a ratio of the two.

Used where a scenario compares a path with its baseline in the same run (the adapters against
the equivalent §4 events): a warm-up window of each, then ``rounds`` rounds of one window each,
the last round of ``profiled`` recorded by the profiler; the figures per kind are the medians
of its rate and of the server's CPU time per item. The CPU time (user and system, every thread
of the server) is what the load of other processes on the machine disturbs least: a rate
measured on a busy machine is as much the machine's as the server's.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.context import Context
from bench.server import Server

#: A window: (server, kind, seconds) -> (items done, seconds it took).
Window = Callable[[Server, str, float], Awaitable[tuple[int, float]]]


@dataclass(frozen=True)
class Alternated:
    """Medians per kind: items per second, and the server's CPU milliseconds per item."""

    rates: dict[str, float]
    cpu_ms: dict[str, float]
    seconds: float
    rounds: int


async def alternate(ctx: Context, kinds: tuple[str, str], window: Window, *, profiled: str, label: str) -> Alternated:
    seconds = ctx.pick(5.0, 2.0)
    rounds = ctx.pick(3, 1)
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(Server())
        for kind in kinds:  # warm-up
            await window(server, kind, 0.5)
        for round_number in range(rounds):
            for kind in kinds:
                profile = round_number == rounds - 1 and kind == profiled
                with ctx.profiler.attach(server, f"{label}-{kind}") if profile else contextlib.nullcontext():
                    before = server.cpu_seconds()
                    items, elapsed = await window(server, kind, seconds)
                    used = server.cpu_seconds() - before
                rates[kind].append(items / elapsed)
                cpu[kind].append(1000 * used / max(items, 1))
    return Alternated({kind: statistics.median(values) for kind, values in rates.items()},
                      {kind: statistics.median(values) for kind, values in cpu.items()}, seconds, rounds)
