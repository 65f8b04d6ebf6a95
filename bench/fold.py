"""(f) Fold scaling: 10k, 100k and 1M text deltas in one turn — time and memory grow linearly.

Two measurements at each size:

* ``lastword.rules.fold.TurnFold`` in this process (pure): the time to push every delta and to collect
  the output once, and the memory the fold holds after the pushes (tracemalloc, a separate
  pass so that tracing does not slow the timed one). A control pushes the same 10,000 events
  again and again: its cost per delta is the fold's own, without reaching fresh memory. Deltas are made 10,000 at a time and
  dropped after they are pushed, as the service drops a request's events, so what stays is
  what the fold keeps.
* Ingest into one run of a real server: JSON arrays of 1,000 deltas, one producer, until the
  run holds the largest size; the time to reach each size and the server's resident memory
  growth. Every fourth batch is also posted to a small run (a "probe" run, replaced once it
  holds 10,000 deltas), so that the cost of a batch into a run that already holds a million
  deltas is compared with the cost of the same batch into a small run *in the same seconds*:
  the machine's load drifts, the ratio does not. The same again with a producer ``eventId`` on
  every delta (to 200,000 deltas: the idempotent path looks the batch's ids up in the log).

Linear means the cost per delta stays flat from the smallest size to the largest; the
``growth exponent`` is the slope of log(time) against log(size) (1.0 is linear, 2.0 quadratic).
Every size is pushed from blocks of the same 10,000 events, so that a small size does not
enjoy a cache-resident working set the larger ones cannot have.
"""

from __future__ import annotations

import gc
import math
import secrets
import statistics
import time
import tracemalloc

from lastword.rules.fold import TurnFold

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server
from bench.workload import delta_blocks, json_array

TITLE = "Fold scaling (text deltas in one turn)"
BATCH = 1000


def _fold_time(count: int, reuse: bool = False) -> tuple[float, float, int]:
    """Seconds to push ``count`` deltas, seconds to collect, and the output's length.

    ``reuse`` pushes the same 10,000 events over and over: the fold's own work without the
    cost of reaching fresh memory, to tell an algorithm's growth from the memory hierarchy's.
    """
    fold = TurnFold()
    pushing = 0.0
    first = next(delta_blocks(10_000, seed=6)) if reuse else []
    blocks = (first for _ in range(count // len(first))) if reuse else delta_blocks(count, seed=6)
    for block in blocks:
        started = time.perf_counter()
        for event in block:
            fold.push(event)
        pushing += time.perf_counter() - started
    started = time.perf_counter()
    output = fold.collect()
    collecting = time.perf_counter() - started
    return pushing, collecting, len(output[0]["text"])


def _fold_memory(count: int) -> tuple[int, int]:
    """Bytes the fold holds after the pushes, and the peak while it collects."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fold = TurnFold()
        for block in delta_blocks(count, seed=6):
            for event in block:
                fold.push(event)
            del block
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.reset_peak()
        fold.collect()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return held, peak


def _exponent(sizes: list[int], values: list[float]) -> float:
    """The least-squares slope of log(value) against log(size)."""
    xs = [math.log(size) for size in sizes]
    ys = [math.log(value) for value in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


PROBE_EVERY = 4  # batches into the big run between two probes into a small run
PROBE_RUN_BATCHES = 10  # a probe run is replaced once it holds this many batches


class Ingested:
    """Batch times into one growing run, and into fresh runs probed in the same seconds."""

    def __init__(self) -> None:
        self.batch_times: list[float] = []  # the big run's, in order
        self.probe_times: list[tuple[int, float]] = []  # (big run's batch count then, seconds)
        self.probe_path = ""
        self.probe_batches = PROBE_RUN_BATCHES
        self.rss: dict[int, int] = {}  # deltas in the run -> server RSS growth since it began

    def elapsed(self, deltas: int) -> float:
        return sum(self.batch_times[: deltas // BATCH])

    def window(self, deltas: int) -> tuple[float, float]:
        """Median batch time (seconds per delta) of the big run and of the probes, over the
        last tenth of the batches that brought the run to ``deltas`` (at least 20)."""
        end = deltas // BATCH
        start = max(0, end - max(20, end // 10))
        big = statistics.median(self.batch_times[start:end]) / BATCH
        probes = [t for at, t in self.probe_times if start <= at < end] or [t for _, t in self.probe_times]
        return big, statistics.median(probes) / BATCH


async def _new_run(conn: http.Connection) -> str:
    run_id = f"bench-f-{secrets.token_hex(6)}"
    await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    return run_id


async def _ingest(server: Server, sizes: list[int], event_ids: bool = False) -> Ingested:
    """Grow one run to ``sizes[-1]`` deltas, noting the server's RSS as it passes each size.

    ``event_ids`` gives every delta a producer ``eventId`` (the idempotent path, which looks
    up a batch's ids in the run's log before it stores them).
    """
    conn = await http.connect(server.url)
    path = f"/v1/runs/{await _new_run(conn)}/events"
    seen = Ingested()
    before = server.rss()
    count = 0

    async def timed(raw: bytes) -> float:
        started = time.perf_counter()
        status, answer = await conn.send(raw)
        if status != 200:
            raise http.HttpError(f"ingest answered {status}: {answer[:300]!r}")
        return time.perf_counter() - started

    for number, block in enumerate(delta_blocks(sizes[-1], seed=7, block=100_000)):
        if event_ids:
            for index, event in enumerate(block):
                event["eventId"] = f"d-{number}-{index}"
        bodies = [json_array(block[i:i + BATCH]) for i in range(0, len(block), BATCH)]
        for body in bodies:
            if len(seen.batch_times) % PROBE_EVERY == 0:
                if seen.probe_batches == PROBE_RUN_BATCHES:
                    seen.probe_path, seen.probe_batches = f"/v1/runs/{await _new_run(conn)}/events", 0
                seen.probe_batches += 1
                raw = http.request_bytes("POST", seen.probe_path, body, "application/json")
                seen.probe_times.append((len(seen.batch_times), await timed(raw)))
            seen.batch_times.append(await timed(http.request_bytes("POST", path, body, "application/json")))
            count += BATCH
            if count in sizes:
                seen.rss[count] = server.rss() - before
    result = await conn.get_json(f"{path.removesuffix('/events')}/result")
    assert result["output"] and result["output"][0]["type"] == "text"  # type: ignore[index]
    conn.close()
    return seen


def run(ctx: Context) -> Result:
    result = Result("f", TITLE)
    sizes = ctx.pick([10_000, 100_000, 1_000_000], [10_000, 30_000, 100_000])
    _fold_time(sizes[0])  # warm-up
    push_times, totals = [], []
    # Best of three, sizes interleaved: the pure fold has no noise of its own, the neighbours do.
    tries: dict[int, list[tuple[float, float, int]]] = {size: [] for size in sizes}
    for _ in range(3):
        for size in sizes:
            tries[size].append(_fold_time(size))
    for size in sizes:
        pushing, collecting, length = min(tries[size], key=lambda t: t[0] + t[1])
        held, peak = _fold_memory(size)
        push_times.append(pushing)
        totals.append(pushing + collecting)
        result.add(f"fold_{size}", f"TurnFold, {size:,} deltas: push + collect", pushing + collecting, "s",
                   f"{pushing / size * 1e9:,.0f} ns/delta push, collect {collecting * 1000:.1f} ms "
                   f"({length / 2**20:.1f} MiB of text)")
        result.add(f"fold_mem_{size}", f"TurnFold, {size:,} deltas: memory held", held / size, "B/delta",
                   f"{held / 2**20:.1f} MiB held, {peak / 2**20:.1f} MiB peak while collecting")
    result.add("fold_exponent", "TurnFold growth exponent (push + collect)", _exponent(sizes, totals), "",
               "1.0 is linear")
    control = {size: min(_fold_time(size, reuse=True)[0] for _ in range(3)) for size in sizes}
    result.add("fold_control_exponent", "TurnFold growth exponent, the same 10k events pushed again",
               _exponent(sizes, [control[size] for size in sizes]), "",
               "push only; " + ", ".join(f"{control[size] / size * 1e9:.0f}" for size in sizes) + " ns/delta")
    with Server() as server:
        http.run(_ingest(server, [5 * BATCH]))  # warm-up
        with ctx.profiler.attach(server, "f-ingest"):
            ingested: Ingested = http.run(_ingest(server, sizes))  # type: ignore[assignment]
    if ctx.quick:
        id_sizes = [10_000, 50_000]
    else:
        id_sizes = [10_000, 100_000, 200_000]
    with Server() as server:
        with_ids: Ingested = http.run(_ingest(server, id_sizes, event_ids=True))  # type: ignore[assignment]
    for size in id_sizes:
        big, fresh = with_ids.window(size)
        result.add(f"ingest_ids_{size}", f"ingest with eventIds into one run, first {size:,} deltas",
                   with_ids.elapsed(size), "s",
                   f"{big * 1e6:.1f} us/delta near {size:,} vs {fresh * 1e6:.1f} into a small run")
    ids_big, ids_fresh = with_ids.window(id_sizes[-1])
    result.ratio("ingest_ids_late_vs_fresh",
                 f"with eventIds: batch cost at {id_sizes[-1]:,} deltas / into a small run (same seconds)",
                 ids_big / ids_fresh)
    ratios = []
    for size in sizes:
        big, fresh = ingested.window(size)
        ratios.append(big / fresh)
        grown = ingested.rss[size]
        result.add(f"ingest_{size}", f"ingest into one run, first {size:,} deltas", ingested.elapsed(size), "s",
                   f"{big * 1e6:.1f} us/delta near {size:,} vs {fresh * 1e6:.1f} into a small run; "
                   f"server RSS +{grown / 2**20:.0f} MiB ({grown / size:.0f} B/delta)")
    ingest_exponent = _exponent(sizes, [ingested.elapsed(size) for size in sizes])
    result.add("ingest_exponent", "ingest growth exponent (time to reach each size)", ingest_exponent, "",
               "1.0 is linear; drifts with the neighbours' load")
    result.ratio("ingest_late_vs_fresh", f"batch cost at {sizes[-1]:,} deltas / into a small run (same seconds)",
                 ratios[-1])
    fold_exponent = _exponent(sizes, totals)
    result.target("linear: TurnFold growth exponent <= 1.1", fold_exponent, 1.1, "", higher_is_better=False)
    result.target(f"linear: ingest batch cost at {sizes[-1]:,} deltas <= 1.2x a small run's", ratios[-1], 1.2, "x",
                  higher_is_better=False)
    result.target(f"linear: with eventIds, batch cost at {id_sizes[-1]:,} deltas <= 1.2x a small run's",
                  ids_big / ids_fresh, 1.2, "x", higher_is_better=False)
    result.series["fold"] = {
        "sizes": sizes,
        "fold_ns_per_delta": [t / n * 1e9 for t, n in zip(totals, sizes)],
        "ingest_vs_fresh": ratios,
    }
    return result
