"""No traceback anywhere: every ``lastword`` command, fed a bad flag, bad standard input or a
service that is not there (a port nothing listens on), says so in one line on stderr that names
the fix, and exits with the status the table gives it (:mod:`lastword.cli.exits`)."""

from __future__ import annotations

import sys

import pytest

from lastword.cli import exits
from tests.servers import free_port
from tests.test_cli import lastword, one_line_error

#: Stands for the address of a port nothing listens on (one per test: the ids stay the same
#: in every xdist worker).
DEAD = "DEAD"
#: Every command, with what it needs to get past its own arguments.
COMMANDS = {
    "serve": [], "demo": ["completed"], "tail": ["r1"], "result": ["r1"], "push": ["r1"], "audit": [],
    "hook": ["claude-code"], "run": ["--format", "codex", "--", sys.executable, "-c", "pass"],
}


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def with_options(command: str, *options: str) -> list[str]:
    """``lastword COMMAND ARGS`` with ``options`` before a child's ``--``."""
    args = COMMANDS[command]
    at = args.index("--") if "--" in args else len(args)
    return [command, *args[:at], *options, *args[at:]]


@pytest.mark.parametrize("argv", [
    *(with_options(command, "--no-such-flag") for command in COMMANDS),
    ["no-such-command"], [], ["result"], ["push", "r1", "--batch", "many"], ["result", "r1", "--wait", "soon"],
    ["serve", "--port", "eighty"], ["demo", "no-such-scenario"], ["hook", "codex"],
], ids=" ".join)
def test_a_bad_command_line_is_one_line_pointing_at_help(argv: list[str]) -> None:
    """A flag a command does not have, a missing or malformed argument: one line naming the
    command and where its usage is, exit 2 (a hook: 0, it must never stop the agent CLI)."""
    done = lastword(*argv, stdin=b"{}")
    line = one_line_error(done)
    assert done.returncode == (exits.OK if argv[:1] == ["hook"] else exits.USAGE), line
    assert line.startswith("lastword"), line
    assert "--help" in line or "choose one of" in line, line


@pytest.mark.parametrize(("argv", "stdin", "fix"), [
    (["push", "r1"], b"not json\n", "JSON"),
    (["push", "r1"], b'"a string"\n', "JSON object"),
    (["push", "r1"], b"\xff\xfe{}\n", "JSON"),
    (["push", "r1", "--text"], b"caf\xe9\n", "UTF-8"),
    (["hook", "claude-code"], b"not json", "hook's JSON"),
    (["hook", "claude-code"], b"[]", "hook's JSON"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_bad_standard_input_is_one_line_naming_what_is_expected(argv: list[str], stdin: bytes, fix: str) -> None:
    """Standard input a command cannot read: one line saying what it takes, exit 2 (hook: 0)."""
    done = lastword(*argv, "--url", dead_url(), stdin=stdin) if argv[0] != "hook" else lastword(*argv, stdin=stdin)
    line = one_line_error(done)
    assert done.returncode == (exits.OK if argv[0] == "hook" else exits.USAGE), line
    assert fix in line, line


@pytest.mark.parametrize("argv", [
    *(with_options(command, "--url", DEAD) for command in COMMANDS if command not in ("serve", "hook")),
    ["tail", "--url", DEAD], ["result", "r1", "--tool", "--url", DEAD], ["result", "r1", "--wait", "1", "--url", DEAD],
    ["push", "r1", "--text", "--url", DEAD],
], ids=lambda argv: " ".join(arg for arg in argv if not arg.startswith("/")))
def test_a_service_that_is_not_there_is_one_line_saying_where_to_point(argv: list[str]) -> None:
    """Nothing listens at --url: one line naming the address and how to give another, exit 8."""
    url = dead_url()
    argv = [url if arg == DEAD else arg for arg in argv]
    done = lastword(*argv, stdin=b'{"type": "assistant/chunk", "delta": {"type": "text", "text": "x"}}\n')
    line = one_line_error(done)
    assert done.returncode == exits.UNREACHABLE, line
    assert f"cannot reach the service at {url}" in line and "--url" in line and "LASTWORD_URL" in line, line


def test_the_hook_with_no_service_says_where_it_looked() -> None:
    """The hook (its address only from $LASTWORD_URL) says it could not reach it, exits 0."""
    done = lastword("hook", "claude-code", env={"LASTWORD_URL": dead_url()},
                    stdin=b'{"session_id": "s1", "hook_event_name": "Stop", "transcript_path": "/dev/null"}')
    line = one_line_error(done)
    assert done.returncode == exits.OK, line
    assert "cannot reach the service at" in line and "LASTWORD_URL" in line, line
