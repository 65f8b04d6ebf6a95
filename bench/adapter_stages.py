"""``python -m bench.adapter_stages``: instructions per provider event (h) and per CLI line (k),
each stage of the adapters' ingest apart, in process, under callgrind.

The bodies are scenario (h)'s (:func:`bench.adapter.sse_body`, an Anthropic SSE message of 1,000
text deltas) and scenario (k)'s (:func:`bench.cli_stream._lines`, a Claude Code run of 1,000
partial-message deltas), and their §4 equivalents (:func:`bench.adapter.events_body`,
:func:`bench.cli_stream._events`). They go through a real core (:func:`lastword.core.open_core`,
SQLite in a temporary directory, nobody subscribed), without HTTP, after ``gc.freeze()`` as
``lastword serve`` does, in 64 KiB pieces:

* ``route``: the whole endpoint as the route calls it (``ingest_provider_stream``,
  ``ingest_cli_stream``), and ``events`` the same messages through ``/events``'s
  (``ingest_json``, ``ingest_ndjson`` with the route's appender): the ratio of the two is the
  goal's, by instructions, without the HTTP layer both share;
* then the route's stages one after the other over the same bodies, each the input of the next:
  ``parse`` (the body read into provider events or lines), ``adapter`` (``feed_many`` a batch
  at a time, as the routes feed them, and ``finish``), for (h) ``staging``
  (:class:`lastword.ingest.provider.Staging`'s ``add``) and ``read back`` (its ``batches``),
  for (k) ``encode`` (``encode_made``), and ``store`` (the append, its writer thread included).

A marker call between stages (libc's ``getpgrp`` through ctypes, as :mod:`bench.stages` does)
makes callgrind dump its counters there; each figure is a stretch's instructions divided by the
provider events (h: 1,007 a body, the ``ping`` included) or the lines (k: 1,008 a body).
``--plain`` runs the same once without callgrind and prints CPU µs instead.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bench.adapter import DELTAS, events_body, sse_body
from bench.cli_stream import _events as cli_events
from bench.cli_stream import _lines as cli_lines
from bench.stages import callgrind_counts, marker

#: Bodies a stage is counted over.
BODIES = 4
PIECE = 65536
H_EVENTS = DELTAS + 7  # message_start, ping, block start, the deltas, block stop, message_delta, message_stop
K_LINES = DELTAS + 8  # system/init, message_start, block start, the deltas, assistant, block stop, delta, stop, result
STRETCHES = ("h route", "h events", "h parse", "h adapter", "h staging", "h read back", "h store",
             "k route", "k events", "k parse", "k adapter", "k encode", "k store")


async def _pieces(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), PIECE):
        yield body[start : start + PIECE]


async def measure(bodies: int, mark: Callable[[], None]) -> list[float]:
    """Each stretch of :data:`STRETCHES`, a marker before it and one after the last; their
    thread-and-process CPU seconds (for ``--plain``)."""
    from lastword.adapters import ADAPTERS, CLI_ADAPTERS
    from lastword.adapters.framing import json_lines
    from lastword.core import open_core
    from lastword.ingest.body import Body
    from lastword.ingest.checks import encode_events, encode_made
    from lastword.ingest.cli import ingest_cli_stream
    from lastword.ingest.events import ingest_json, ingest_ndjson
    from lastword.ingest.provider import FEED_STEP, STORE_BATCH, Staging, _provider_events, ingest_provider_stream
    from lastword.rules.records import NewRun
    from lastword.settings import Settings

    seconds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lastword-adapter-stages-") as directory:
        settings = Settings(database_url=f"sqlite:///{Path(directory) / 'stages.db'}")
        limit = settings.max_body_bytes
        async with open_core(settings, background=False) as core:
            runs = core.runs

            async def run(prefix: str) -> str:
                run_id = f"{prefix}-{secrets.token_hex(4)}"
                await runs.create(NewRun(run_id=run_id, lease_seconds=0))
                return run_id

            def appender(run_id: str) -> Callable[[list[dict[str, Any]]], Any]:
                async def append(events: list[dict[str, Any]]) -> Any:  # as the route's _appender
                    return await runs.append(run_id, events, await encode_events(events, settings.max_event_bytes))
                return append

            def message_id() -> str:
                return f"msg_{secrets.token_hex(8)}"

            # Warm-up: the first body of each kind imports and builds what later ones reuse.
            warm = await run("warm")
            await ingest_provider_stream(Body(_pieces(sse_body(message_id())), "text/event-stream"), runs, settings,
                                         warm, "anthropic", False)
            await ingest_json(Body(_pieces(events_body(message_id())), "application/json"), limit,
                              settings.max_batch_events, appender(warm))
            await ingest_cli_stream(Body(_pieces(cli_lines(message_id())), "application/x-ndjson"), runs, settings,
                                    await run("warm-k"), "claude-code")
            await ingest_ndjson(Body(_pieces(cli_events(message_id())), "application/x-ndjson"), limit,
                                appender(await run("warm-k")))

            h_bodies = [sse_body(message_id()) for _ in range(bodies)]
            h_events = [events_body(message_id()) for _ in range(bodies)]
            k_bodies = [cli_lines(message_id()) for _ in range(bodies)]
            k_events = [cli_events(message_id()) for _ in range(bodies)]
            h_run, h_events_run, h_stages_run = await run("h"), await run("h-events"), await run("h-stages")
            k_runs = [await run("k") for _ in range(bodies)]
            k_event_runs = [await run("k-events") for _ in range(bodies)]
            k_stage_runs = [await run("k-stages") for _ in range(bodies)]
            gc.collect()
            gc.freeze()  # as lastword serve does

            def stretch() -> None:
                mark()
                seconds.append(time.process_time())

            stretch()
            for body in h_bodies:
                await ingest_provider_stream(Body(_pieces(body), "text/event-stream"), runs, settings, h_run,
                                             "anthropic", False)
            stretch()
            for body in h_events:
                await ingest_json(Body(_pieces(body), "application/json"), limit, settings.max_batch_events,
                                  appender(h_events_run))
            stretch()
            parsed = [[batch async for batch in _provider_events(Body(_pieces(body), "text/event-stream"), "sse", limit)]
                      for body in h_bodies]
            stretch()
            made: list[list[tuple[list[dict[str, Any]], list[int], Any]]] = []
            for batches in parsed:  # as ingest_provider_stream feeds them
                adapter = ADAPTERS["anthropic"](None)
                made.append([])
                for batch in batches:
                    for start in range(0, len(batch), FEED_STEP):
                        step: list[dict[str, Any]] = []
                        origins: list[int] = []
                        adapter.feed_many(batch[start : start + FEED_STEP], step, origins)
                        made[-1].append((step, origins, adapter.take_unnamed()))
                last = adapter.finish(end=False)
                made[-1].append((last, [batches[-1][-1][0]] * len(last), adapter.take_unnamed()))
            stretch()
            stagings = []
            for body_made in made:
                staging = Staging(limit).__enter__()
                for events, origins, unnamed in body_made:
                    staging.add(events, origins, unnamed)
                stagings.append(staging)
            stretch()
            read = [list(staging.batches("unused", STORE_BATCH)) for staging in stagings]
            stretch()
            for staged in read:
                await runs.append_batches(h_stages_run, iter(staged))
            stretch()

            for body, run_id in zip(k_bodies, k_runs, strict=True):
                await ingest_cli_stream(Body(_pieces(body), "application/x-ndjson"), runs, settings, run_id,
                                        "claude-code")
            stretch()
            for body, run_id in zip(k_events, k_event_runs, strict=True):
                await ingest_ndjson(Body(_pieces(body), "application/x-ndjson"), limit, appender(run_id))
            stretch()
            lines = [[batch async for batch in json_lines(_pieces(body), noun="line", max_line=settings.max_line_bytes)]
                     for body in k_bodies]
            stretch()
            cli_made = []
            for line_batches in lines:  # as ingest_cli_stream feeds them: a piece's lines at a time
                cli_adapter = CLI_ADAPTERS["claude-code"].for_request(1)
                items: list[Any] = []
                line_of: list[int] = []
                for batch in line_batches:
                    cli_adapter.feed_many(batch, items, line_of)
                lines_made = list(zip(line_of, items))
                lines_made += [(cli_adapter.lines_read - 1, item) for item in cli_adapter.finish()]
                cli_made.append(lines_made)
            stretch()
            encoded = []
            for lines_made in cli_made:
                events = [item.event for _, item in lines_made]
                encoded.append((events, encode_made(events, [index for index, _ in lines_made], limit)))
            stretch()
            for (events, texts), run_id in zip(encoded, k_stage_runs, strict=True):
                await runs.append(run_id, events, texts)
            stretch()
            for staging in stagings:
                staging.__exit__()
    return [after - before for before, after in zip(seconds, seconds[1:])]


def per_item(stretch: str) -> int:
    return H_EVENTS if stretch.startswith("h") else K_LINES


def report(figures: list[float], bodies: int, unit: str) -> str:
    lines = []
    for name, value in zip(STRETCHES, figures, strict=True):
        lines.append(f"{name:<14} {value / (bodies * per_item(name)):10,.0f} {unit}/event")
        if name == "h store" or name == "k store":
            kind = name[0]
            stages = sum(figures[at] for at, other in enumerate(STRETCHES) if other.startswith(kind)
                         and other not in (f"{kind} route", f"{kind} events"))
            lines.append(f"{kind + ' stages, sum':<14} {stages / (bodies * per_item(name)):10,.0f} {unit}/event")
            route, events = figures[STRETCHES.index(f"{kind} route")], figures[STRETCHES.index(f"{kind} events")]
            lines.append(f"{kind + ' ratio':<14} {events / route:10.3f} events / route (the goal: >= 0.8)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.adapter_stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=BODIES, help=f"bodies a stage counts (default {BODIES})")
    parser.add_argument("--plain", action="store_true", help="CPU µs, without callgrind")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # the run callgrind counts
    args = parser.parse_args(argv)
    if args.inside or args.plain:
        figures = drive_loop(measure(args.bodies, marker()))
        if args.plain:
            print(report([1e6 * value for value in figures], args.bodies, "µs"))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    counts = callgrind_counts("bench.adapter_stages", ["--inside", "--bodies", str(args.bodies)])
    # Dump 1 is everything before the first marker; dumps 2.. the stretches.
    print(report([float(count) for count in counts[1 : 1 + len(STRETCHES)]], args.bodies, "instr"))


def drive_loop(coroutine: Any) -> list[float]:
    """The measure on an event loop (the store's writer thread hands results back through it)."""
    result: list[float] = asyncio.run(coroutine)
    return result

if __name__ == "__main__":
    main()
