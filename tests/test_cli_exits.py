"""One exit-status table for every ``lastword`` command: each number means one thing, whichever
command exits with it, and every ``--help`` and docs/CLI.md show it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx

from tests.servers import free_port
from tests.test_cli import COMMANDS, help_text, lastword, one_line_error

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\s+(\d+)\s{2,}(\S.*)$")


def shown_statuses(command: list[str]) -> dict[int, str]:
    """The exit statuses a command's --help lists after "exit statuses:", number to meaning."""
    shown = help_text(command, "200")
    assert "exit statuses:" in shown, (command, shown)
    rows = shown.split("exit statuses:", 1)[1].splitlines()
    return {int(match[1]): match[2].strip() for match in map(ROW.match, rows) if match}


def test_every_help_shows_the_exit_statuses_and_a_number_means_one_thing() -> None:
    """`lastword CMD --help` ends with the statuses CMD can exit with, and the same number has the
    same meaning in every command's help (4 is never "max_turns" here and "unreachable" there)."""
    meanings: dict[int, set[str]] = {}
    for command in [[], *([name] for name in [*COMMANDS, "hook"])]:
        statuses = shown_statuses(command)
        assert {0, 2}.issubset(statuses) or command == ["hook"], (command, statuses)
        for code, meaning in statuses.items():
            meanings.setdefault(code, set()).add(meaning)
    assert {code: shown for code, shown in meanings.items() if len(shown) > 1} == {}
    assert "cannot be reached" in meanings[8].pop() and "refused" in meanings[7].pop()


def test_the_docs_show_the_same_table() -> None:
    """docs/CLI.md lists every status with the meaning --help gives it."""
    doc = (REPO / "docs" / "CLI.md").read_text()
    for code, meaning in shown_statuses([]).items():
        assert re.search(rf"^\| {code} \| {re.escape(meaning)} \|", doc, re.M), (code, meaning)


def test_unreachable_is_8_and_refused_is_7_for_every_command(base_url: str) -> None:
    """A service not there exits 8 and a refusal 7 for tail, result, push, demo and audit as for run,
    and a tool result still running is 9 (3 is run's max_tokens)."""
    dead = f"http://127.0.0.1:{free_port()}"
    for command in (["result", "r1"], ["tail", "r1"], ["push", "r1", "--text"], ["demo", "completed"], ["audit"],
                    ["run", "--format", "codex", "--", sys.executable, "-c", "pass"]):
        at = command.index("--") if "--" in command else len(command)
        gone = lastword(*command[:at], "--url", dead, *command[at:], stdin=b"x")
        assert gone.returncode == 8, (command, gone.stderr)
        assert "cannot reach the service" in one_line_error(gone)
    refused = lastword("result", "no-such-run", "--url", base_url)
    assert refused.returncode == 7 and "404 run_not_found" in one_line_error(refused)
    run = httpx.post(f"{base_url}/v1/runs", json={}).json()["runId"]
    running = lastword("result", run, "--tool", "--url", base_url)
    assert running.returncode == 9
    assert one_line_error(running) == "lastword result: the turn is still running"
