"""``python -m bench.stages``: the CPU each stage of a batched ingest costs per event, in process.

Scenario (a)'s bodies (JSON arrays of 1,000 mixed events, :func:`bench.workload.mixed_events`)
go through the stages ``POST /v1/runs/{id}/events`` runs, without HTTP: ``parse``
(:func:`lastword.ingest.json_input.loads_events`), ``validate``
(:func:`lastword.ingest.checks.check_pushed`), ``encode``
(:func:`lastword.ingest.checks.encode_events`) and the store's ``append`` (a real SQLite store
in a temporary directory, its writer thread included, nobody subscribed). The append is split
further by timing, on the writer thread, the steps it sequences (each called once a batch, so
the timer costs nothing per event): reading the run, the duplicates, the fold's lock, the numbering,
the insert, the fold (``runstate.append``), the rest of the change (``persist``).

Figures are CPU microseconds per event (the first three stages ``time.thread_time``, the append
``time.process_time``: every thread, the writer's included), the median of
``--rounds`` rounds, each over ``--batches`` batches. ``--callgrind`` runs the same once under
valgrind's callgrind and reports instructions per event instead: a marker call between stages
(libc's ``getpgrp`` through ctypes: nothing else on this path calls ctypes) makes callgrind dump
its counters there, so each dump holds one stage. Two runs of those counts agree within a few
instructions an event, however busy the machine. It also counts the ingest side alone (the
body read, parsed, checked and encoded as the route does it, the store left out) for the same
events as JSON arrays and as NDJSON, whose lines are checked one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from bench.workload import batches, json_array, mixed_events, ndjson

T = TypeVar("T")
BATCH = 1000
STAGES = ("parse", "validate", "encode", "append")
#: The steps of the store's append timed on the writer thread: (module, attribute).
APPEND_STEPS = (
    ("lastword.store.sql.reads", None, "run"),
    ("lastword.rules.runstate", None, "without_duplicates"),
    ("lastword.store.sql.folds", "FoldCache", "held"),
    ("lastword.rules.runstate", None, "numbered"),
    ("lastword.store.sql.dialect", "SqliteDialect", "insert_events"),
    ("lastword.rules.runstate", None, "append"),
    ("lastword.store.sql.store", "SqlStore", "_persist"),
)


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that only ever yields to the loop (``asyncio.sleep(0)``), without one."""
    try:
        while True:
            coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class StepTimes:
    """CPU seconds of each append step, measured on the thread that runs it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self) -> None:
        import importlib

        for module, owner, name in APPEND_STEPS:
            target: Any = importlib.import_module(module)
            if owner is not None:
                target = getattr(target, owner)
            setattr(target, name, self._timed(name, getattr(target, name)))

    def _timed(self, name: str, fn: Callable[..., T]) -> Callable[..., T]:
        seconds = self.seconds
        seconds.setdefault(name, 0.0)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> T:
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] += time.thread_time() - started

        return timed


def marker() -> Callable[[], None]:
    """A call callgrind dumps its counters before (``--dump-before=ffi_call``: libc's own symbols
    are stripped, so callgrind cannot name ``getpgrp``; ctypes' ``ffi_call`` it can)."""
    libc = ctypes.CDLL(None)
    return lambda: libc.getpgrp()


async def measure(bodies: list[bytes], rounds: int, steps: StepTimes | None,
                  mark: Callable[[], None]) -> dict[str, list[float]]:
    from lastword.ingest.checks import check_pushed, encode_events
    from lastword.ingest.json_input import loads_events
    from lastword.rules.records import RunSpec
    from lastword.store.sqlite.store import SqliteStore

    figures: dict[str, list[float]] = {stage: [] for stage in STAGES}
    events_per_round = len(bodies) * BATCH
    with tempfile.TemporaryDirectory(prefix="lastword-stages-") as directory:
        # Nobody subscribes (as in scenario a): the append makes no live chunk events.
        store = SqliteStore(f"sqlite:///{Path(directory) / 'stages.db'}", default_lease_seconds=0,
                            chunk_listeners=lambda run_id: False)
        await store.open()
        try:
            for round_number in range(rounds):
                run_id = f"stages-{round_number}"
                await store.create_run(RunSpec(run_id=run_id, parent_run_id=None, agent=None, mode="oneshot",
                                               metadata={}, lease_seconds=0, canonical="{}"), time.time())
                if steps is not None:
                    for name in steps.seconds:
                        steps.seconds[name] = 0.0
                mark()
                started = time.thread_time()
                parsed = [loads_events(body) for body in bodies]
                figures["parse"].append(time.thread_time() - started)
                mark()
                started = time.thread_time()
                for events in parsed:
                    check_pushed(events)
                figures["validate"].append(time.thread_time() - started)
                mark()
                started = time.thread_time()
                encoded = [drive(encode_events(events, 1024 * 1024)) for events in parsed]
                figures["encode"].append(time.thread_time() - started)
                mark()
                started = time.process_time()
                for events, texts in zip(parsed, encoded):
                    await store.append(run_id, events, time.time(), texts)
                figures["append"].append(time.process_time() - started)
                mark()
                if steps is not None:
                    for name, seconds in steps.seconds.items():
                        figures.setdefault(f"  {name}", []).append(seconds)
        finally:
            await store.close()
    return {stage: [1e6 * s / events_per_round for s in values] for stage, values in figures.items()}


def report(figures: dict[str, list[float]], unit: str) -> str:
    lines = []
    for stage, values in figures.items():
        rounds = ", ".join(f"{v:.2f}" for v in values)
        lines.append(f"{stage:<22} {statistics.median(values):8.2f} {unit}/event   (rounds: {rounds})")
    main = sum(statistics.median(figures[stage]) for stage in STAGES if stage in figures)
    lines.append(f"{'total':<22} {main:8.2f} {unit}/event")
    return "\n".join(lines)


_SUMMARY = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


def callgrind_counts(module: str, arguments: list[str]) -> list[int]:
    """``python -m module`` with ``arguments``, under callgrind: the instructions of each
    stretch between two :func:`marker` calls (the first, before the first marker, included)."""
    with tempfile.TemporaryDirectory(prefix="lastword-stages-cg-") as directory:
        out = Path(directory) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-before=ffi_call",
                   "--dump-instr=no", sys.executable, "-m", module, *arguments]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONHASHSEED": "0"})
        dumps = sorted(Path(directory).glob("callgrind.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        counts = []
        for dump in dumps:
            found = _SUMMARY.search(dump.read_bytes())
            counts.append(int(found[1]) if found else 0)
    return counts


def callgrind(args: argparse.Namespace) -> str:
    """One round under callgrind; instructions per event per stage, then the ingest side
    (reading, checking and encoding, no store) of the same events as JSON arrays and as NDJSON."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    events = args.batches * BATCH
    counts = callgrind_counts("bench.stages", ["--rounds", "1", "--batches", str(args.batches), "--no-steps"])
    # Dump 1 is everything before the first marker; dumps 2..5 the four stages.
    figures = {stage: [counts[1 + position] / events] for position, stage in enumerate(STAGES)}
    for kind in ("json", "ndjson"):
        counts = callgrind_counts("bench.stages", ["--ingest-side", kind, "--batches", str(args.batches)])
        figures[f"ingest side, {kind}"] = [counts[1] / events]
    return report(figures, "instr")


async def ingest_side(kind: str, batch_count: int, mark: Callable[[], None]) -> None:
    """Bodies of scenario (a) through the ingest as the route reads them (64 KiB pieces), each
    append only encoding its events: what the event loop's thread does for them before the store."""
    from lastword.ingest.body import Body
    from lastword.ingest.checks import encode_events
    from lastword.ingest.events import ingest_json, ingest_ndjson
    from lastword.rules.records import AppendOutcome

    event_batches = batches(mixed_events(BATCH * batch_count, seed=1), BATCH)
    bodies = [ndjson(batch) if kind == "ndjson" else json_array(batch) for batch in event_batches]
    stored = 0

    async def append(events: list[dict[str, Any]]) -> AppendOutcome:
        nonlocal stored
        await encode_events(events, 1024 * 1024)
        stored += len(events)
        return AppendOutcome(accepted=len(events), duplicates=0, last_seq=stored)

    async def pieces(body: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    mark()
    for body in bodies:
        if kind == "ndjson":
            await ingest_ndjson(Body(pieces(body), content_type="application/x-ndjson"), 1 << 26, append)
        else:
            await ingest_json(Body(pieces(body), content_type="application/json"), 1 << 26, 10_000, append)
    mark()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="batches of 1,000 events a round (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; each figure is their median (default 5)")
    parser.add_argument("--callgrind", action="store_true", help="instructions per event, under callgrind")
    parser.add_argument("--no-steps", action="store_true", help="do not time the append's steps")
    parser.add_argument("--ingest-side", choices=("json", "ndjson"), help=argparse.SUPPRESS)  # for --callgrind
    args = parser.parse_args(argv)
    if args.ingest_side:
        asyncio.run(ingest_side(args.ingest_side, args.batches, marker()))
        return
    if args.callgrind:
        print(callgrind(args))
        return
    bodies = [json_array(batch) for batch in batches(mixed_events(BATCH * args.batches, seed=1), BATCH)]
    steps = None if args.no_steps else StepTimes()
    if steps is not None:
        steps.wrap()
    figures = asyncio.run(measure(bodies, args.rounds, steps, marker()))
    print(f"{args.batches} batches of {BATCH} events a round, {len(bodies[0]) / BATCH:.0f} bytes an event")
    print(report(figures, "µs"))


if __name__ == "__main__":
    main()
