"""(q) SQLite statements per write, counted: what each kind of request asks of the database.

The server runs under :mod:`bench.sql_trace`, which counts every statement SQLite runs, by its
first word and by the thread that ran it. Each workload is counted on its own (the counts are
taken and reset between workloads) over HTTP against the real server:

* ``create``: runs created one after another;
* ``single``: one text delta per request, to 50 runs at once (the fleet's shape: the writer
  commits what is pending together), without and with a producer ``eventId``;
* ``batch``: JSON arrays of 1,000 mixed events (scenario a's), one producer;
* ``end``: ``POST /end`` of a run holding 40 events;
* ``idle``: a few seconds of nothing: what the service's own timers cost.

A statement is counted each time SQLite starts running it: an ``executemany`` of 1,000 rows
counts 1,000 (one statement prepared, run 1,000 times). A statement count does not drift
with the machine's load, so a change that adds statements to a hot path shows here exactly,
where a rate would hide it in noise. ``BEGIN``/``COMMIT`` are counted apart: how many writes
share a commit depends on timing, the rest does not.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import orjson

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server, code_under_test
from bench.sql_trace import OUTPUT
from bench.workload import batches, create_runs, end_runs, fill_turns, json_array, mixed_events, text_delta

TITLE = "SQLite statements per write, counted"
RUNS = 50
#: The statements of a transaction's frame, counted apart (see the module's docstring).
FRAME = {"BEGIN", "COMMIT", "ROLLBACK"}

Counts = Counter[tuple[str, str]]  # (thread role, first word) -> statements


class TracedServer(Server):
    """A server run under :mod:`bench.sql_trace`: :meth:`take` returns the counts so far."""

    def __init__(self) -> None:
        code = code_under_test()
        trace = Path(__file__).with_name("sql_trace.py")
        super().__init__(launcher=[code.python, str(trace)])
        self.counts_file = self.workdir / "sql-trace.json"
        self.env[OUTPUT] = str(self.counts_file)

    def take(self) -> Counts:
        """The statements counted since the last call (the server starts counting again)."""
        self.counts_file.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not self.counts_file.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the traced server wrote no counts: {self.log_tail()}")
            time.sleep(0.005)
        return Counter({(thread, word): n for thread, word, n in json.loads(self.counts_file.read_text())})


def _writer(counts: Counts) -> tuple[int, int, Counter[str]]:
    """The writer's statements outside the frame, its commits, and the former by first word."""
    words: Counter[str] = Counter()
    commits = 0
    for (thread, word), n in counts.items():
        if thread != "sqlite-writer":
            continue
        if word == "COMMIT":
            commits += n
        if word not in FRAME:
            words[word] += n
    return sum(words.values()), commits, words


def _readers(counts: Counts) -> int:
    return sum(n for (thread, _), n in counts.items() if thread.startswith("sqlite-reader"))


def _detail(words: Counter[str], per: int) -> str:
    return ", ".join(f"{word} {n / per:.2f}" for word, n in words.most_common())


async def _singles(server: Server, runs: list[str], rounds: int, event_ids: bool) -> None:
    connections = [await http.connect(server.url) for _ in runs]

    async def one(conn: http.Connection, run_id: str, number: int) -> None:
        event = text_delta(f"delta {number} of {run_id}")
        if event_ids:
            event["eventId"] = f"{run_id}:{number}"
        raw = http.request_bytes("POST", f"/v1/runs/{run_id}/events", orjson.dumps(event), "application/json")
        status, answer = await conn.send(raw)
        if status != 200:
            raise http.HttpError(f"append answered {status}: {answer[:300]!r}")

    for number in range(rounds):
        await asyncio.gather(*(one(conn, run_id, number) for conn, run_id in zip(connections, runs)))
    for conn in connections:
        conn.close()


async def _measure(ctx: Context, result: Result) -> None:
    rounds = ctx.pick(20, 4)
    server = TracedServer()
    with server:
        conn = await http.connect(server.url)
        server.take()  # start-up's statements are not a workload's

        runs = await create_runs(conn, "q-plain", RUNS)
        counts = server.take()
        writer, commits, words = _writer(counts)
        result.add("create", "create a run: writer statements (BEGIN/COMMIT apart)", writer / RUNS, "statements",
                   _detail(words, RUNS))

        for key, ids, label in (("single", False, "one delta per request, 50 runs at once"),
                                ("single_ids", True, "the same with an eventId")):
            if ids:
                runs = await create_runs(conn, "q-ids", RUNS)
                server.take()
            await _singles(server, runs, rounds, ids)
            counts = server.take()
            writer, commits, words = _writer(counts)
            appends = RUNS * rounds
            result.add(key, f"{label}: writer statements per append", writer / appends, "statements",
                       _detail(words, appends))
            result.add(f"{key}_commits", f"{label}: commits per append", commits / appends, "commits",
                       f"{appends / max(commits, 1):.1f} appends per commit (timing decides)")
            result.add(f"{key}_reads", f"{label}: reader statements per append", _readers(counts) / appends,
                       "statements")

        (batch_run,) = await create_runs(conn, "q-batch", 1)
        bodies = [json_array(events) for events in batches(mixed_events(1000 * rounds, seed=1), 1000)]
        server.take()
        for body in bodies:
            await conn.request("POST", f"/v1/runs/{batch_run}/events", body, "application/json", expect=200)
        writer, commits, words = _writer(server.take())
        result.add("batch", "JSON array of 1,000 events: writer statements per request", writer / len(bodies),
                   "statements", _detail(words, len(bodies)))

        ended = await create_runs(conn, "q-end", rounds)
        await fill_turns(conn, ended)
        server.take()
        await end_runs(conn, ended)
        writer, commits, words = _writer(server.take())
        result.add("end", "POST /end of a run of 40 events: writer statements", writer / len(ended), "statements",
                   _detail(words, len(ended)))

        conn.close()
        seconds = ctx.pick(5.0, 2.0)
        server.take()
        await asyncio.sleep(seconds)
        counts = server.take()
        each = ", ".join(f"{thread} {word} {n / seconds:.1f}" for (thread, word), n in sorted(counts.items()))
        result.add("idle", "idle: statements per second, every thread", sum(counts.values()) / seconds, "statements",
                   each)
        writes = sum(n for (thread, _), n in counts.items() if thread == "sqlite-writer")
        result.add("idle_writes", "idle: the writer's statements per second (write transactions)", writes / seconds,
                   "statements")
    result.note(f"SQLite, normal durability; {rounds} rounds of {RUNS} concurrent appends; "
                f"statements of the writer thread unless named")


def run(ctx: Context) -> Result:
    result = Result("q", TITLE)
    http.run(_measure(ctx, result))
    return result
