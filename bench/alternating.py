"""Two kinds of request measured on one server in alternating windows, for a ratio of the two.

Used where a scenario compares a path with its baseline in the same run (the adapters against
the equivalent §4 events): a warm-up window of each, then ``rounds`` rounds of one window each,
the last round of ``profiled`` recorded by the profiler; the figure per kind is the median.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Awaitable, Callable

from bench.context import Context
from bench.server import Server

Window = Callable[[Server, str, float], Awaitable[float]]


async def alternate(ctx: Context, kinds: tuple[str, str], window: Window, *, profiled: str,
                    label: str) -> tuple[dict[str, float], float, int]:
    """Median rate per kind, and the window length and rounds used (for the note)."""
    seconds = ctx.pick(5.0, 2.0)
    rounds = ctx.pick(3, 1)
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(Server())
        for kind in kinds:  # warm-up
            await window(server, kind, 0.5)
        for round_number in range(rounds):
            for kind in kinds:
                profile = round_number == rounds - 1 and kind == profiled
                with ctx.profiler.attach(server, f"{label}-{kind}") if profile else contextlib.nullcontext():
                    rates[kind].append(await window(server, kind, seconds))
    return {kind: statistics.median(values) for kind, values in rates.items()}, seconds, rounds
