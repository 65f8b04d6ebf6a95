"""A real agent CLI under ``lastword run`` while lastword itself goes away (SPEC §16a, §18).

The CLI runs against the scripted model server; its first reply calls a shell command that
waits for the test (it creates ``waiting`` in the CLI's working directory, then waits for
``go``). While it waits, lastword is restarted (SIGTERM, a 2 s drain, started again on the same
port and database) or killed with SIGKILL and started again; then the command is let go. The
child's answer, stop reason and usage, and ``lastword run``'s output and exit status, must be
those of the same child run with lastword left alone.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import accepted
from tests.cli_children.record import BIN, run_cli
from tests.polling import wait_until
from tests.servers import ServerProcess

pytestmark = [pytest.mark.slow]

SCENARIO = "waits_for_the_test"
COMMANDS = {"claude-code": "claude", "codex": "codex", "opencode": "opencode"}
TIMEOUT = 120.0


def child_under_run(server: ServerProcess, cli: str, run_id: str,
                    disturb: Callable[[Path], None]) -> tuple[bytes, int, dict[str, Any]]:
    """The CLI under ``lastword run --run-id run_id``; ``disturb(work)`` runs once its command
    waits, and lets the command go when it returns."""
    workdir: list[Path] = []
    started = threading.Event()

    def setup(tmp: Path) -> None:
        workdir.append(tmp / "work")
        started.set()

    def wrap(argv: list[str]) -> list[str]:
        return [sys.executable, "-m", "lastword.cli", "run", "--url", server.url, "--run-id", run_id,
                "--retry-seconds", "60", "--", *argv]

    details: dict[str, Any] = {}
    answer: list[tuple[bytes, int]] = []
    child = threading.Thread(target=lambda: answer.append(
        run_cli(cli, SCENARIO, timeout=TIMEOUT, details=details, setup=setup, wrap=wrap)))
    child.start()
    try:
        assert started.wait(TIMEOUT)
        work = workdir[0]
        wait_until(lambda: (work / "waiting").exists(), "the child's command is waiting", within=TIMEOUT)
        disturb(work)
    finally:
        if workdir:
            (workdir[0] / "go").touch()
        child.join(TIMEOUT + 30)
    assert answer, "the child never finished"
    return answer[0][0], answer[0][1], details


def turn(server: ServerProcess, run_id: str) -> dict[str, Any]:
    result = accepted(httpx.get(f"{server.url}/v1/runs/{run_id}/result", timeout=30))
    return {key: result.get(key) for key in ("status", "stopReason", "output", "usage", "error")}


def leave_alone(_work: Path) -> None:
    pass


@pytest.mark.parametrize("cli", ["codex", "claude-code"])
def test_a_real_cli_keeps_its_answer_across_a_restart_and_a_kill_of_lastword(tmp_path: Path, cli: str) -> None:
    if not (BIN / COMMANDS[cli]).exists():
        pytest.skip(f"{COMMANDS[cli]} not installed ({BIN})")
    server = ServerProcess({"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path}/lastword.db",
                            "LASTWORD_DRAIN_SECONDS": "2"}, tmp_path).start()

    def restart(_work: Path) -> None:
        server.stop()  # SIGTERM: the drain cuts the child's streamed body with 503 draining
        server.start()

    def crash(_work: Path) -> None:
        server.kill()
        server.start()

    try:
        seen: dict[str, tuple[bytes, int, dict[str, Any]]] = {}
        for name, disturb in (("undisturbed", leave_alone), ("restarted", restart), ("killed", crash)):
            run_id = f"{cli}-{name}"
            out, status, details = child_under_run(server, cli, run_id, disturb)
            seen[name] = (out, status, turn(server, run_id))
            assert status == 0, (name, details.get("stderr", b"")[-2000:])
        undisturbed = seen["undisturbed"]
        assert undisturbed[2]["stopReason"] == "completed" and undisturbed[0].strip()
        assert seen["restarted"] == undisturbed
        assert seen["killed"] == undisturbed
    finally:
        server.stop()
