"""(v) Instructions per request, counted: the server's CPU cost without the machine's noise.

The server runs under valgrind's callgrind, which counts every instruction the process
executes (all its threads, C extensions and SQLite included). Before each workload the counts
are zeroed (``callgrind_control -z``), after it they are dumped (``-d``): the instructions
that workload cost the server, divided by its requests or events. The workloads are the hot
paths of the other scenarios, small (the server runs some fifty times slower under valgrind):

* ``noop``: ``GET /healthz`` (b's and z's no-op);
* ``single``: one text delta per request, 20 runs at once (b, and the fleet j);
* ``single_ids``: the same with an ``eventId`` (the fleet's lines, ingest with ids);
* ``batch``: JSON arrays of 1,000 mixed events, one producer (a);
* ``end``: ``POST /end`` of a run holding 40 events (d, without subscribers);
* ``adapter`` and ``adapter_events``: an Anthropic SSE body of 1,000 deltas to
  ``/ingest/anthropic`` and the same message as §4 events to ``/events`` (h);
* ``ds``: a ``/ds`` append of one message per request (s).

A rate or a CPU time on this shared two-core machine moves by a tenth to a quarter from one
round to the next (an A/A sitting of ``bench.ab`` shows it); two rounds of these counts on
the same code agree within 1-2 % (the server's timers and SQLite's checkpoints run a little
more or less within a workload), so ``bench.ab OLD NEW --only v`` shows a change of a few per
cent in lastword's own CPU cost that no timed figure can. It counts work, not waiting: a change
that trades instructions for latency (a thread hand-off, a lock) shows only in the timed
scenarios.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import orjson

from bench import http
from bench.adapter import events_body as adapter_events
from bench.adapter import sse_body as adapter_sse
from bench.context import Context, Skip
from bench.report import Result
from bench.server import Server
from bench.workload import batches, create_runs, end_runs, fill_turns, json_array, mixed_events, text_delta

TITLE = "Instructions per request, counted under callgrind"
CONCURRENT = 20

_SUMMARY = re.compile(rb"^summary:\s*(\d+)", re.MULTILINE)


class CountedServer(Server):
    """A server run under callgrind: :meth:`counted` returns the instructions since the last call."""

    def __init__(self) -> None:
        valgrind = shutil.which("valgrind")
        if valgrind is None or shutil.which("callgrind_control") is None:
            raise Skip("valgrind (callgrind) is not installed")
        self._dumps = 0
        super().__init__(launcher=[valgrind, "--tool=callgrind", "--dump-instr=no", "--compress-strings=no"])
        self._out = self.workdir / "callgrind.out"
        self.launcher.insert(2, f"--callgrind-out-file={self._out}")

    def start(self, timeout: float = 600.0) -> Server:
        return super().start(timeout)  # the interpreter's start-up is some fifty times slower

    def _control(self, option: str) -> None:
        subprocess.run(["callgrind_control", option, str(self.pid)], check=True, capture_output=True, timeout=120)

    def zero(self) -> None:
        self._control("-z")

    def counted(self) -> int:
        """Instructions since :meth:`zero` (or the last call), every thread of the server."""
        self._control("-d")
        self._dumps += 1
        dump = Path(f"{self._out}.{self._dumps}")
        deadline = time.monotonic() + 60
        while not (dump.exists() and _SUMMARY.search(dump.read_bytes())):
            if time.monotonic() > deadline:
                raise RuntimeError(f"callgrind wrote no dump {dump}: {self.log_tail()}")
            time.sleep(0.05)
        found = _SUMMARY.search(dump.read_bytes())
        assert found is not None
        dump.unlink()
        self.zero()
        return int(found[1])


async def _concurrently(server: Server, requests: list[list[bytes]]) -> None:
    """Each list of requests on a connection of its own, the lists at once."""
    connections = [await http.connect(server.url) for _ in requests]

    async def send(conn: http.Connection, raws: list[bytes]) -> None:
        for raw in raws:
            status, answer = await conn.send(raw)
            if status not in (200, 201, 204):
                raise http.HttpError(f"answered {status}: {answer[:300]!r}")

    await asyncio.gather(*(send(conn, raws) for conn, raws in zip(connections, requests)))
    for conn in connections:
        conn.close()


async def _measure(ctx: Context, result: Result, server: CountedServer) -> None:
    rounds = ctx.pick(10, 3)
    conn = await http.connect(server.url)
    counts: dict[str, tuple[int, int, str]] = {}  # key -> (instructions, operations, label)

    async def count(key: str, label: str, operations: int) -> None:
        counts[key] = (server.counted(), operations, label)

    # Warm-up: the first request of each kind imports and builds what later ones reuse.
    warm = await create_runs(conn, "v-warm", 1)
    await conn.request("POST", f"/v1/runs/{warm[0]}/events", orjson.dumps(text_delta("warm")), "application/json",
                       expect=200)
    await conn.request("GET", "/healthz", expect=200)
    server.zero()

    requests = CONCURRENT * rounds
    await _concurrently(server, [[http.request_bytes("GET", "/healthz")] * rounds] * CONCURRENT)
    await count("noop", "GET /healthz", requests)

    runs = await create_runs(conn, "v-single", CONCURRENT)
    server.zero()
    await _concurrently(server, [
        [http.request_bytes("POST", f"/v1/runs/{run_id}/events", orjson.dumps(text_delta(f"delta {n}")),
                            "application/json") for n in range(rounds)]
        for run_id in runs])
    await count("single", f"one delta per request, {CONCURRENT} runs at once", requests)

    # The same with an eventId: a fleet child's lines, and ingest with ids, carry one.
    runs = await create_runs(conn, "v-single-id", CONCURRENT)
    server.zero()
    await _concurrently(server, [
        [http.request_bytes("POST", f"/v1/runs/{run_id}/events",
                            orjson.dumps({**text_delta(f"delta {n}"), "eventId": f"{run_id}-{n}"}), "application/json")
         for n in range(rounds)]
        for run_id in runs])
    await count("single_ids", f"one delta with an eventId per request, {CONCURRENT} runs at once", requests)

    (batch_run,) = await create_runs(conn, "v-batch", 1)
    bodies = [json_array(events) for events in batches(mixed_events(1000 * rounds, seed=1), 1000)]
    server.zero()
    for body in bodies:
        await conn.request("POST", f"/v1/runs/{batch_run}/events", body, "application/json", expect=200)
    await count("batch", "JSON array of 1,000 events (per 1,000 events)", len(bodies))

    ended = await create_runs(conn, "v-end", rounds)
    await fill_turns(conn, ended)
    server.zero()
    await end_runs(conn, ended)
    await count("end", "POST /end of a run of 40 events", len(ended))

    bodies_of = {"adapter": ("/ingest/anthropic", "text/event-stream", adapter_sse),
                 "adapter_events": ("/events", "application/json", adapter_events)}
    for key, (path, content_type, make) in bodies_of.items():
        (run_id,) = await create_runs(conn, "v-" + key.replace("_", "-"), 1)
        messages = [make(f"msg_{secrets.token_hex(8)}") for _ in range(rounds)]
        server.zero()
        for message in messages:
            await conn.request("POST", f"/v1/runs/{run_id}{path}", message, content_type, expect=200)
        label = ("Anthropic SSE body of 1,000 deltas → /ingest/anthropic" if key == "adapter"
                 else "the same message as 1,001 §4 events → /events")
        await count(key, label, len(messages))

    stream = f"/ds/v1/stream/bench-v-{secrets.token_hex(4)}"
    await conn.request("PUT", stream, b"", "text/plain", expect=201)
    server.zero()
    await _concurrently(server, [[http.request_bytes("POST", stream, b"a short message", "text/plain")] * rounds]
                        * CONCURRENT)
    await count("ds", "/ds append, one message per request", requests)
    conn.close()

    for key, (instructions, operations, label) in counts.items():
        result.add(key, f"{label}: instructions", instructions / operations, "instructions",
                   f"{instructions:,} over {operations}")
    if "adapter" in counts and "adapter_events" in counts:
        adapter, events = counts["adapter"], counts["adapter_events"]
        result.ratio("adapter_vs_events", "adapter / §4 events, by instructions per message (h's goal)",
                     (events[0] / events[1]) / (adapter[0] / adapter[1]))
    result.note(f"SQLite, normal durability, under valgrind --tool=callgrind; {rounds} rounds; every thread "
                "of the server counted, background timers included")


def run(ctx: Context) -> Result:
    result = Result("v", TITLE)
    server = CountedServer()
    with server:
        http.run(_measure(ctx, result, server))
    return result
