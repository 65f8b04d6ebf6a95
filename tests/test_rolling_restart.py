"""A rolling restart of two replicas under long-lived children (SPEC §16a, §18).

Two real ``lastword serve`` processes share one PostgreSQL schema behind a TCP forwarder that
stands for a Kubernetes Service (``tests/tcp_balancer.py``). Twenty ``lastword run`` processes
each run a child printing a recorded CLI session (``tests/cli_children/paced.py``): part of it at
once, then, at each of the test's gates, the next part spread over longer than the drain. The
replicas are restarted one after the other (SIGTERM, a 2 s drain, started again) while the
children print, so every child's streamed body is cut by a drain at least once and sent again
to the other replica. Each child's answer, stop reason, usage and error, and ``lastword run``'s
exit status, must equal those of the same children run with no restart.

Order comes from explicit signals: a gate opens when the test writes a line to the children's
standard input, a replica is restarted once the previous one answers ``/readyz`` again, and
the restarts begin once every run has stored its first lines.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import postgres_schema
from tests.polling import wait_until
from tests.servers import ServerProcess, running
from tests.tcp_balancer import Balancer, balancing

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parent.parent
CHILDREN = ROOT / "tests" / "cli_children"
DRAIN_SECONDS = 2.0
#: How long each part of a child's output after a gate takes to print: longer than the drain.
SPAN_SECONDS = 3.0
#: Children streaming at once.
WIDTH = 20
#: Rounds, each of WIDTH fresh children under one restart of A then B (``LASTWORD_ROLLING_ROUNDS``
#: raises it; 3 rounds give every recorded session a turn).
ROUNDS = int(os.environ.get("LASTWORD_ROLLING_ROUNDS", "1"))
WAIT = 120.0
FORMATS = {"claude-code": "claude-code", "claude-code-partial": "claude-code", "codex": "codex",
           "opencode": "opencode", "opencode-anthropic": "opencode"}


@dataclass(frozen=True)
class Case:
    """A recorded session: its stdout, the format ``lastword run`` reads, the CLI's exit status."""

    fixture: Path
    format: str
    exit_status: int

    @property
    def name(self) -> str:
        return f"{self.fixture.parent.name}/{self.fixture.stem}"


def recorded_cases() -> list[Case]:
    """Every single-turn session recorded in tests/cli_children/fixtures, the CLIs taking turns
    and each CLI's longest first (a round of twenty holds every CLI, with the most lines to cut)."""
    by_cli: list[list[Case]] = []
    for directory, format in FORMATS.items():
        cases = []
        for fixture in (CHILDREN / "fixtures" / directory).glob("*.ndjson"):
            if fixture.name.endswith(".turn2.ndjson"):
                continue
            meta = json.loads(fixture.with_name(fixture.name.replace(".ndjson", ".meta.json")).read_text())
            cases.append(Case(fixture, format, int(meta["exit_code"])))
        by_cli.append(sorted(cases, key=lambda case: (-len(case.fixture.read_bytes().splitlines()), case.name)))
    return [case for turn in itertools.zip_longest(*by_cli) for case in turn if case is not None]


def rounds(cases: list[Case], count: int) -> list[list[Case]]:
    """``count`` rounds of WIDTH cases, going round the recorded cases."""
    return [[cases[(number * WIDTH + index) % len(cases)] for index in range(WIDTH)] for number in range(count)]


class Children:
    """``lastword run`` of each case through ``url`` as ``run_ids``, each child gated ``gates``
    times by the test and printing each later part over ``span`` seconds."""

    def __init__(self, url: str, cases: list[Case], run_ids: list[str], gates: int, span: float) -> None:
        self.url = url
        self.run_ids = run_ids
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "lastword.cli", "run", "--url", url, "--json", "--format", case.format,
                 "--run-id", run_id, "--", sys.executable, str(CHILDREN / "paced.py"), str(case.fixture),
                 str(case.exit_status), str(gates), str(span)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
            )
            for case, run_id in zip(cases, run_ids, strict=True)
        ]

    def open_gate(self) -> None:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(b"go\n")
            process.stdin.flush()

    def started(self) -> bool:
        """Whether every run has stored the first part of its child's output."""
        with httpx.Client(base_url=self.url, timeout=10) as client:
            for run_id in self.run_ids:
                try:
                    page = client.get(f"/v1/runs/{run_id}/events", params={"limit": 1})
                except httpx.TransportError:
                    return False
                if page.status_code != 200 or not page.json()["events"]:
                    return False
        return True

    def outcomes(self) -> list[Outcome]:
        found = []
        for process in self.processes:
            out, err = process.communicate(timeout=WAIT)
            result = json.loads(out) if out.strip() else {}
            for key in ("runId", "startedAt", "endedAt"):
                result.pop(key, None)
            found.append(Outcome(process.returncode, result, err.decode(errors="replace")))
        return found

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


@dataclass(frozen=True)
class Outcome:
    """``lastword run``'s exit status, its result less what names the run or its times, its stderr."""

    status: int
    result: dict[str, Any]
    stderr: str


@pytest.fixture
def replicas() -> Iterator[list[ServerProcess]]:
    with postgres_schema() as url:
        servers = [ServerProcess({"LASTWORD_DATABASE_URL": url, "LASTWORD_LOG_LEVEL": "info",
                                  "LASTWORD_DRAIN_SECONDS": str(DRAIN_SECONDS)}, ROOT) for _ in range(2)]
        with running(servers):
            yield servers


def restart(balancer: Balancer, servers: list[ServerProcess], index: int, children: Children) -> None:
    """What a rolling update does to one pod: out of the Service, SIGTERM, drained and gone,
    started again, ready, back in the Service. The children's next gate opens with the signal."""
    server = servers[index]
    assert server.process is not None
    balancer.down(index)
    server.process.send_signal(signal.SIGTERM)
    children.open_gate()
    server.process.wait(timeout=WAIT)
    server.stop()  # gone already: this closes its log
    server.start()
    balancer.up(index)


def still(balancer: Balancer, cases: list[Case], run_ids: list[str]) -> list[Outcome]:
    """The cases as children with no restart: every gate open from the start, no pacing (the
    same lines, printed at once)."""
    children = Children(balancer.url, cases, run_ids, gates=2, span=0.0)
    try:
        children.open_gate()
        children.open_gate()
        return children.outcomes()
    finally:
        children.kill()


def rolled(balancer: Balancer, servers: list[ServerProcess], cases: list[Case], run_ids: list[str]) -> list[Outcome]:
    """The cases as children, the replicas restarted one after the other while they print."""
    children = Children(balancer.url, cases, run_ids, gates=len(servers), span=SPAN_SECONDS)
    try:
        wait_until(children.started, "every child's first lines are stored", within=WAIT, every=0.1)
        for index in range(len(servers)):
            restart(balancer, servers, index, children)
        return children.outcomes()
    finally:
        children.kill()


def cut_by_a_drain(servers: list[ServerProcess]) -> set[str]:
    """The runs whose CLI ingest a replica answered 503 (its drain cut the body)."""
    cut = set()
    for server in servers:
        for line in server.log_path.read_text().splitlines():
            entry = json.loads(line) if line.startswith("{") else {}
            path = str(entry.get("path", ""))
            if entry.get("status") == 503 and "/ingest/" in path:
                cut.add(path.split("/")[3])
    return cut


def test_a_rolling_restart_changes_no_childs_answer(replicas: list[ServerProcess]) -> None:
    """Each child's result and exit status with both replicas restarted while it printed are
    those with none; every child's streamed body was cut by a drain on the way."""
    cases = recorded_cases()
    with balancing([server.port for server in replicas]) as balancer:
        for number, chosen in enumerate(rounds(cases, ROUNDS)):
            tag = uuid.uuid4().hex[:8]
            expected = still(balancer, chosen, [f"still-{tag}-{index}" for index in range(WIDTH)])
            run_ids = [f"rolled-{tag}-{index}" for index in range(WIDTH)]
            found = rolled(balancer, replicas, chosen, run_ids)
            for case, seen, want in zip(chosen, found, expected, strict=True):
                assert want.result, f"round {number}, {case.name}: no result without restarts: {want.stderr}"
                assert (seen.status, seen.result) == (want.status, want.result), f"round {number}, {case.name}: {seen.stderr}"
            assert cut_by_a_drain(replicas) >= set(run_ids)
