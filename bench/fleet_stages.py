"""``python -m bench.fleet_stages``: the instructions a fleet's delta costs the server, per thread.

The fleet (scenario j) is bound by one process's CPU: at 200 children the server uses a whole
core. This counts where that CPU goes, without the machine's noise: a real ``lastword serve``
(SQLite, as j runs it) under valgrind's callgrind with ``--separate-threads=yes``, fed as j feeds
it (one long ``application/x-ndjson`` request per child, each delta a line with an ``eventId``
in a chunk of its own, :class:`bench.fleet.NdjsonPusher`), each child watched by a
``?include=chunks`` subscriber. The deltas go in ticks, one to every child, and the next tick
waits until every subscriber has the last one, so the server meets the same shape of work as
in j: each piece of body one line, each group commit a few children's lines.

It prints the instructions per delta of the server's every thread together, of the event loop's
thread (the first), and of each other thread that ran (the SQLite writer is the largest of
them), counted from zero after a warm-up tick.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from bench.fleet import ChunkSubscriber, NdjsonPusher
from bench.server import Server

_SUMMARY = re.compile(rb"^summary:\s*(\d+)", re.MULTILINE)
_THREAD = re.compile(r"-(\d+)$")


class ThreadCountedServer(Server):
    """A server under callgrind, its threads counted apart: :meth:`counted` returns the
    instructions of each thread since :meth:`zero`, by callgrind's thread number (1: main)."""

    def __init__(self) -> None:
        valgrind = shutil.which("valgrind")
        if valgrind is None or shutil.which("callgrind_control") is None:
            raise SystemExit("valgrind (callgrind) is not installed")
        super().__init__(launcher=[valgrind, "--tool=callgrind", "--dump-instr=no", "--separate-threads=yes"])
        self._out = self.workdir / "callgrind.out"
        self.launcher.insert(2, f"--callgrind-out-file={self._out}")
        self._dumps = 0

    def start(self, timeout: float = 600.0) -> Server:
        return super().start(timeout)  # the interpreter starts some fifty times slower

    def zero(self) -> None:
        subprocess.run(["callgrind_control", "-z", str(self.pid)], check=True, capture_output=True, timeout=120)

    def counted(self) -> dict[int, int]:
        subprocess.run(["callgrind_control", "-d", str(self.pid)], check=True, capture_output=True, timeout=120)
        self._dumps += 1
        deadline = time.monotonic() + 60
        while True:
            dumps = list(self.workdir.glob(f"callgrind.out.{self._dumps}-*"))
            if dumps and all(_SUMMARY.search(dump.read_bytes()) for dump in dumps):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"callgrind wrote no dump: {self.log_tail()}")
            time.sleep(0.1)
        time.sleep(0.5)  # every thread's file written, not only the first ones
        counts = {}
        for dump in self.workdir.glob(f"callgrind.out.{self._dumps}-*"):
            found = _SUMMARY.search(dump.read_bytes())
            thread = _THREAD.search(dump.name)
            if found and thread:
                counts[int(thread[1])] = int(found[1])
        return counts


async def _fleet(server: ThreadCountedServer, children: int, ticks: int) -> tuple[dict[int, int], int]:
    host, _, port = server.url.removeprefix("http://").partition(":")
    loop = asyncio.get_running_loop()
    prefix = secrets.token_hex(3)
    runs = [f"fs-{prefix}-{n}" for n in range(children)]
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        for run_id in runs:
            answer = await client.post("/v1/runs", json={"runId": run_id, "leaseSeconds": 0})
            answer.raise_for_status()
    arrivals: list[dict[str, float]] = [{} for _ in runs]
    subscribers = [protocol for _, protocol in await asyncio.gather(*(
        loop.create_connection(functools.partial(
            ChunkSubscriber, f"GET /v1/runs/{run_id}/stream?include=chunks HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            arrivals[n]), host, int(port))
        for n, run_id in enumerate(runs)))]
    pushers = [protocol for _, protocol in await asyncio.gather(*(
        loop.create_connection(functools.partial(NdjsonPusher, run_id), host, int(port)) for run_id in runs))]

    async def tick(code: str) -> None:
        for pusher in pushers:
            pusher.push_text(code)
        async with asyncio.timeout(600):
            while not all(code in arrived for arrived in arrivals):
                await asyncio.sleep(0.02)

    await tick("warm")
    server.zero()
    for n in range(ticks):
        await tick(f"t{n:04d}")
    counts = server.counted()
    statuses = await asyncio.gather(*(pusher.end() for pusher in pushers))
    for subscriber in subscribers:
        subscriber.close()
    if any(status != 200 for status in statuses):
        raise RuntimeError(f"a child's request was answered {statuses}")
    return counts, children * ticks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="copy the per-thread dumps here (for callgrind_annotate)")
    args = parser.parse_args(argv)
    server = ThreadCountedServer()
    server.start()
    try:
        counts, deltas = asyncio.run(_fleet(server, args.children, args.ticks))
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for dump in server.workdir.glob("callgrind.out.1-*"):
                shutil.copy(dump, args.keep / dump.name)
    finally:
        server.stop()
    print(f"{deltas:,} deltas ({args.children} children x {args.ticks} ticks), instructions per delta:")
    print(f"  every thread      {sum(counts.values()) / deltas:>12,.0f}")
    for thread, count in sorted(counts.items(), key=lambda item: (item[0] != 1, -item[1])):
        if count / deltas >= 100:
            name = "the event loop" if thread == 1 else f"thread {thread}"
            print(f"  {name:<17} {count / deltas:>12,.0f}")


if __name__ == "__main__":
    main()
