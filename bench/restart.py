"""(g) Restart: from process start to ready with 100k and 1M events in the log, and right results.

The log is built quickly through the service's own core (:func:`lastword.core.open_core` over
the SQLite store, in this process: no HTTP, the same transactions), then a fresh server process is
started on it. Ten runs share the events:

* four ended (their results were stored when they ended),
* four open with a long lease (their folds are rebuilt from the log when first read),
* one open run of text deltas only (its output is the whole streamed text),
* one open run whose lease ran out while the service was down (the start-up sweep ends it as
  ``timeout``, rebuilding its fold before the service reports ready).

Two times: start → ``/readyz`` 200, and start → every run's result read and right. "Right"
is checked against :class:`tests.reference.ReferenceTurn`, the selection rule written again
independently of ``lastword`` (the one reference the tests use too), fed with the events as
they were generated. In a full run a third log holds
1M deltas in a single open turn (the worst case for a fold rebuild).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server
from bench.workload import delta_blocks, mixed_events
from tests.reference import ReferenceTurn

if TYPE_CHECKING:
    from lastword.service import RunService

TITLE = "Restart: process start to ready, and open turns' results after it"
RUNS = 10


async def _build(url: str, total: int, layout: str) -> dict[str, dict[str, Any]]:
    """Fill the log; what each run's result must be: ``{run_id: {status, stopReason, output}}``."""
    from lastword.core import open_core
    from lastword.settings import Settings

    # The expired run is written an hour in the past: its lease has run out when the server starts.
    behind = [0.0]
    async with open_core(Settings(database_url=url), clock=lambda: time.time() - behind[0], background=False) as core:
        return await _fill(core.runs, behind, total, layout)


async def _fill(service: RunService, behind: list[float], total: int, layout: str) -> dict[str, dict[str, Any]]:
    from lastword.rules.records import NewRun

    expected: dict[str, dict[str, Any]] = {}
    if layout == "single":
        plan = [("g-single-open", "deltas", "open", total)]
    else:
        each = total // RUNS
        plan = [(f"g-ended-{i}", "mixed", "ended", each) for i in range(4)]
        plan += [(f"g-open-{i}", "mixed", "open", each) for i in range(4)]
        plan += [("g-open-deltas", "deltas", "open", each), ("g-expired", "mixed", "expired", each)]
    for number, (run_id, kind, fate, count) in enumerate(plan):
        behind[0] = 3600.0 if fate == "expired" else 0.0
        await service.create(NewRun(run_id=run_id, lease_seconds=600 if fate == "expired" else 3600))
        rule = ReferenceTurn()
        if kind == "deltas":
            blocks = delta_blocks(count, seed=100 + number, block=1000)
        else:
            events = mixed_events(count, seed=100 + number)
            blocks = (events[i:i + 1000] for i in range(0, count, 1000))
        for block in blocks:
            for event in block:
                rule.add(event)
            await service.append(run_id, block)
        if fate == "ended":
            await service.end(run_id, "completed", None)
        status, stop = {"ended": ("ended", "completed"), "open": ("running", None),
                        "expired": ("ended", "timeout")}[fate]
        expected[run_id] = {"status": status, "stopReason": stop, "output": rule.output()}
    return expected


async def _read_results(server: Server, expected: dict[str, dict[str, Any]]) -> list[str]:
    """Read every run's result; the list of what was wrong (empty: all right)."""
    conn = await http.connect(server.url)
    wrong = []
    for run_id, want in expected.items():
        got: Any = await conn.get_json(f"/v1/runs/{run_id}/result")
        if got.get("status") != want["status"] or got.get("stopReason") != want["stopReason"]:
            wrong.append(f"{run_id}: status {got.get('status')}/{got.get('stopReason')}, "
                         f"expected {want['status']}/{want['stopReason']}")
        elif got.get("output") != want["output"]:
            wrong.append(f"{run_id}: output differs from the rule applied to the events")
    conn.close()
    return wrong


def _restart(result: Result, ctx: Context, key: str, label: str, total: int, layout: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lastword-bench-g-") as directory:
        workdir = Path(directory)
        url = f"sqlite:///{workdir / 'bench.db'}"
        started = time.perf_counter()
        expected = asyncio.run(_build(url, total, layout))
        built = time.perf_counter() - started
        size = (workdir / "bench.db").stat().st_size + sum(p.stat().st_size for p in workdir.glob("bench.db-*"))
        server = Server(database_url=url, workdir=workdir, launcher=ctx.profiler.launcher(f"g-{key}"))
        server.start()
        try:
            ready = server.ready_seconds
            wrong = http.run(_read_results(server, expected))
            results = time.perf_counter() - server.started_at
        finally:
            server.stop()
    result.add(f"{key}_ready", f"{label}: start to /readyz", ready, "s",
               f"log built in {built:.1f} s through the store, {size / 2**20:.0f} MiB on disk")
    result.add(f"{key}_results", f"{label}: start to every result read", results, "s",
               "results right" if not wrong else "WRONG: " + "; ".join(wrong[:3]))
    if wrong:
        result.note(f"{label}: {len(wrong)} result(s) wrong after the restart: " + "; ".join(wrong))
    return {"ready": ready, "results": results, "right": float(not wrong)}


def run(ctx: Context) -> Result:
    result = Result("g", TITLE)
    with Server() as empty:
        result.add("empty_ready", "empty log: start to /readyz", empty.ready_seconds, "s", "the process start itself")
    sizes = ctx.pick([100_000, 1_000_000], [10_000, 100_000])
    series = {}
    for total in sizes:
        series[f"{total:,} events, 10 runs"] = _restart(result, ctx, f"log_{total}", f"{total:,} events in 10 runs",
                                                       total, "spread")
    if not ctx.quick:
        series["1,000,000 deltas, 1 open turn"] = _restart(
            result, ctx, "single_1000000", "1,000,000 deltas in one open turn", 1_000_000, "single")
    result.series["restart"] = series
    largest = series[f"{sizes[-1]:,} events, 10 runs"]
    result.target(f"{sizes[-1]:,} events: start to ready <= 5 s", largest["ready"], 5.0, "s", higher_is_better=False)
    result.target(f"{sizes[-1]:,} events: start to every result right <= 5 s", largest["results"], 5.0, "s",
                  higher_is_better=False)
    return result
