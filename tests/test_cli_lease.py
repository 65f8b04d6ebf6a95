"""A child that is alive keeps its turn (SPEC §16a): while ``lastword run``'s body is open, its
keep-alive lines renew the run's lease, so a child silent for longer than the lease (a long
build, a subagent whose lines the CLI does not print) is not ended ``timeout``.

The server runs in the test process on a clock the test moves (``tests/clock.py``); the child
is the echoing script of ``tests/test_cli_run.py`` (it prints what the test writes, when the
test writes it), and ``lastword run`` a real process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clock import ManualClock
from tests.polling import wait_until
from tests.servers import threaded_server
from tests.test_cli_run import COMPLETED, ECHO_CHILD, THREAD, TURN, WAIT, feed, lastword_run, message, wait_for_streamed

LEASE = 3.0


@pytest.fixture
def served(make_settings: Any) -> Iterator[tuple[str, ManualClock]]:
    clock = ManualClock()
    with threaded_server(make_settings(sweep_interval_seconds=0.01), clock) as url:
        yield url, clock


def lease_expires_at(url: str, run_id: str) -> float:
    return datetime.fromisoformat(httpx.get(f"{url}/v1/runs/{run_id}").json()["leaseExpiresAt"]).timestamp()


def test_a_silent_child_keeps_its_turn_past_its_lease(served: tuple[str, ManualClock], tmp_path: Path) -> None:
    """The child prints, then is silent for twice its lease while the service's clock moves on:
    each keep-alive line renews the lease, no sweep ends the turn, and the child's last line
    ends it completed with its reply."""
    url, clock = served
    script = tmp_path / "child.py"
    script.write_text(ECHO_CHILD)
    run_id = "silent"
    process = lastword_run(url, "--format", "codex", "--run-id", run_id, "--lease", str(LEASE),
                           command=[sys.executable, str(script)])
    try:
        feed(process, THREAD, TURN, message(0, "thinking"))
        wait_for_streamed(url, run_id, "thinking")  # Codex's message is stored at the next line
        assert httpx.get(f"{url}/v1/runs/{run_id}").json()["leaseSeconds"] == LEASE
        for _ in range(4):  # 4 × 2 s of silence: more than twice the lease
            clock.advance(2.0)
            now = clock()
            # A keep-alive line written after the move renews the lease from the new time.
            renewed_after = now + LEASE - 0.01
            wait_until(lambda: lease_expires_at(url, run_id) >= renewed_after,
                       "a keep-alive line renews the lease", within=WAIT)
            clock.wait_for_reads(2, by="lease sweep")  # a whole sweep ran at the new time
            assert httpx.get(f"{url}/v1/runs/{run_id}").json()["status"] == "running"
        feed(process, message(1, "the reply"), COMPLETED, "exit 0\n")
        out, err = process.communicate(timeout=WAIT)
    finally:
        process.kill()
        process.communicate()
    assert process.returncode == 0, err
    assert out.decode() == "the reply\n"
