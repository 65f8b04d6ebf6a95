"""``lastword run`` adds a known CLI's JSON-output flags when they are missing (issue 42 item 2).

Without them ``claude -p``, ``codex exec`` and ``opencode run`` print prose, and ``lastword run``
lost the whole answer ("line 0 is not valid JSON", exit 1, no word of the flags). The real CLIs
run here against the scripted model server, their recorded command lines stripped of the flags.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from lastword.adapters import FORMATS_BY_COMMAND
from lastword.cli.json_flags import JSON_FLAGS, with_json_flags
from tests.api_helpers import shared_base_url  # noqa: F401
from tests.cli_children.record import BIN, run_cli

ANSWER = b"Hello from the fake model. The answer is 42.\n"
#: The flags each recorded command line carries, as (flag, its value or None).
FLAGS: dict[str, list[tuple[str, str | None]]] = {"claude-code": [("--output-format", "stream-json"), ("--verbose", None)], "codex": [("--json", None)],
         "opencode": [("--format", "json")]}
COMMANDS = {"claude-code": "claude", "codex": "codex", "opencode": "opencode"}


def without(argv: list[str], flags: list[tuple[str, str | None]]) -> list[str]:
    kept: list[str] = []
    skip = False
    for index, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        match = next(((flag, value) for flag, value in flags if arg == flag), None)
        if match is not None:
            skip = match[1] is not None and argv[index + 1] == match[1]
            continue
        kept.append(arg)
    return kept


def test_every_cli_format_has_its_flags() -> None:
    assert set(JSON_FLAGS) == set(FORMATS_BY_COMMAND.values())


@pytest.mark.parametrize(("command", "format", "expected", "said"), [
    (["claude", "-p", "hi"], "claude-code", ["claude", "--output-format", "stream-json", "--verbose", "-p", "hi"],
     "added --output-format stream-json --verbose"),
    (["claude", "-p", "hi", "--output-format", "text"], "claude-code",
     ["claude", "--verbose", "-p", "hi", "--output-format", "stream-json"],
     "added --verbose; replaced --output-format text by --output-format stream-json"),
    (["claude", "--print", "--output-format=json", "--verbose", "hi"], "claude-code",
     ["claude", "--print", "--output-format=stream-json", "--verbose", "hi"],
     "replaced --output-format json by --output-format stream-json"),
    (["codex", "-m", "m", "exec", "hi"], "codex", ["codex", "-m", "m", "exec", "--json", "hi"], "added --json"),
    (["opencode", "run", "--format", "default", "hi"], "opencode", ["opencode", "run", "--format", "json", "hi"],
     "replaced --format default by --format json"),
    (["opencode", "run", "--", "--format"], "opencode", ["opencode", "run", "--format", "json", "--", "--format"],
     "added --format json"),
])
def test_missing_flags_are_added_and_said(command: list[str], format: str, expected: list[str], said: str) -> None:
    changed, line = with_json_flags(command, format)
    assert changed == expected
    assert line is not None and said in line and line.startswith(f"{command[0]}'s command line: ")


@pytest.mark.parametrize(("command", "format"), [
    (["claude", "-p", "hi", "--output-format", "stream-json", "--verbose"], "claude-code"),
    (["claude", "hi"], "claude-code"),  # interactive: it prints no lines to read anyway
    (["codex", "exec", "--json", "hi"], "codex"),
    (["codex", "login"], "codex"),
    (["opencode", "run", "--format=json", "hi"], "opencode"),
    (["python3", "fake_codex.py", "exec"], "codex"),  # not the CLI itself: its lines are its own
])
def test_a_command_line_that_has_them_or_is_not_the_cli_is_left_alone(command: list[str], format: str) -> None:
    assert with_json_flags(command, format) == (command, None)


@pytest.mark.slow
@pytest.mark.parametrize("cli", ["claude-code", "codex", "opencode"])
def test_the_real_cli_without_its_json_flags_answers(shared_base_url: str, cli: str) -> None:  # noqa: F811
    if not (BIN / COMMANDS[cli]).exists():
        pytest.skip(f"{COMMANDS[cli]} not installed ({BIN})")

    def wrap(argv: list[str]) -> list[str]:
        return [sys.executable, "-m", "lastword.cli", "run", "--url", shared_base_url, "--", *without(argv, FLAGS[cli])]

    details: dict[str, Any] = {}
    out, status = run_cli(cli, "completion", details=details, wrap=wrap)
    assert (status, out) == (0, ANSWER), details["stderr"]
    said = [line for line in details["stderr"].decode().splitlines() if line.startswith("lastword run:")]
    assert len(said) == 1 and "added" in said[0], details["stderr"]
    assert not any(flag in details["argv"] for flag, _ in FLAGS[cli])  # lastword run was given none of them
    assert all(flag in said[0] for flag, _ in FLAGS[cli])
