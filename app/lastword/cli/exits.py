"""The exit statuses of every ``lastword`` command: one table, each number with one meaning.

A script that runs ``lastword result`` and one that runs ``lastword run`` read the same number
the same way. ``run`` exits with its child's turn's stop reason (SPEC §16 fixes those: 0, 1 and
3–6, 130), so the statuses that say lastword's own trouble — a refusal by the service, a service
that cannot be reached, a turn still running — take numbers no stop reason uses (7, 8, 9): a
parent reading the status can never take lastword's trouble for the child's. 2 is a bad command
line or input for every command, 126 and 127 are the shells' "cannot be run" and "not found".

Each status lists the commands that can exit with it; every command's ``--help`` shows its own
rows (:func:`epilog`) and docs/CLI.md the whole table (a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXIT_BY_STOP_REASON", "EXIT_STATUSES", "ExitStatus", "TABLE", "epilog"]

#: The exit status for each stop reason of the turn ``run`` ran (SPEC §16).
EXIT_BY_STOP_REASON = {
    "completed": 0, "error": 1, "max_tokens": 3, "max_turns": 4, "refusal": 5, "timeout": 6, "cancelled": 130,
}
OK = 0
USAGE = 2
REFUSED = 7
UNREACHABLE = 8
STILL_RUNNING = 9
NOT_EXECUTABLE = 126
NOT_FOUND = 127
INTERRUPTED = 130

#: The commands that talk to a running service.
_REMOTE = ("demo", "tail", "result", "push", "audit", "run")
_ALL = ("serve", "hook", *_REMOTE)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """One exit status: its number, what it means, and the commands that exit with it."""

    code: int
    meaning: str
    commands: tuple[str, ...]


TABLE = (
    ExitStatus(OK, "done (run: the turn ended completed; hook: always, whatever happened)", _ALL),
    ExitStatus(1, "run: the turn ended error", ("run",)),
    ExitStatus(USAGE, "bad command line or input (serve: the address cannot be listened on)",
               tuple(command for command in _ALL if command != "hook")),
    ExitStatus(3, "run: the turn ended max_tokens", ("run",)),
    ExitStatus(4, "run: the turn ended max_turns", ("run",)),
    ExitStatus(5, "run: the turn ended refusal", ("run",)),
    ExitStatus(6, "run: the turn ended timeout", ("run",)),
    ExitStatus(REFUSED, "the service refused a request (the line says its status and problem code)", _REMOTE),
    ExitStatus(UNREACHABLE, "the service cannot be reached", _REMOTE),
    ExitStatus(STILL_RUNNING, "result --tool: the turn is still running", ("result",)),
    ExitStatus(NOT_EXECUTABLE, "run: COMMAND cannot be run", ("run",)),
    ExitStatus(NOT_FOUND, "run: COMMAND is not found", ("run",)),
    ExitStatus(INTERRUPTED, "interrupted (run: the turn ended cancelled)",
               tuple(command for command in _ALL if command != "hook")),
)
#: Every status and its meaning.
EXIT_STATUSES = {status.code: status.meaning for status in TABLE}


def epilog(command: str | None = None) -> str:
    """The exit statuses ``command`` can end with (every one without a command), one a line,
    for the end of its ``--help``."""
    rows = [status for status in TABLE if command is None or command in status.commands]
    return "exit statuses:" + "".join(f"\n  {status.code:>3}  {status.meaning}" for status in rows)
