"""``lastword run -- COMMAND``: an agent CLI run as a child, its standard output kept as it is printed.

The command creates the run, starts COMMAND with its standard output piped (standard input and
error are the command's own), and streams every line the child prints into
``POST /v1/runs/{runId}/ingest/{format}`` (SPEC §16) as one long-lived request: a line is written
the moment it is read, so subscribers see the child's progress live.

**Nothing printed is lost.** Every line read is kept in memory (by the client,
:mod:`lastword.client.replay`) until the request is answered. If the request fails (the service
restarted, the network dropped), a new one sends the child's whole output so far again from its
first line, then goes on with the new lines: the service
derives ``eventId``s from the CLI's own ids and from each line's position in the body, so the
lines sent twice are counted as duplicates, not stored twice. This is also why the output is not
cut into several requests the way :mod:`lastword.client.stream_pusher` rolls its requests over:
the positions are counted per body, so every body must start at the first line. While the child
is silent, a blank line is written every ``KEEPALIVE`` seconds, or every third of the run's lease
when that is shorter (``--lease`` sets it): the service renews the lease while a body's bytes keep
arriving, so a child silent for longer than its lease (a long build, a subagent whose lines the
CLI does not print) keeps its turn. A failed request (a lost connection, or a 502, 503 or 504
from a replica that is restarting or draining) is sent again with growing pauses for
``--retry-seconds`` of failures in a row; a rolling restart of the service thus never changes
the child's answer. A service still gone after that is given up (exit status 8): the child
runs on, its output unsent.

**The end.** When the child has exited and the request is answered, a turn the output did not end
itself (no terminal line) is ended ``error`` with ``error.type: "no_terminal_event"``, whatever
the child's exit status (a turn that never said it ended is not known to be complete), keeping
the output selected so far. A body the service refused (a line it cannot read) ends it
``error`` with the service's words.

**The CLI's own record** (SPEC §19, :mod:`lastword.cli.reconcile`). For Claude Code, the
transcripts it writes are sent too, found from the ``init`` line's ``session_id`` and ``cwd``
under ``$CLAUDE_CONFIG_DIR`` (else ``~/.claude``): a subagent's own transcript as soon as its
end is printed, before that line goes on (so its child run ``{runId}.{tool_use_id}`` holds the
subagent's own messages, not the cut tool result its parent got), and the session's when the
child has exited, before the output ends. No hook is needed. A transcript that cannot be found or
stored is named on standard error and changes nothing else. For opencode, when no text followed
the last step it printed (it may exit 0 with its final text unprinted, opencode#50514), the parts
``opencode export SESSION`` holds that stdout did not are added to the output at the exit.

**Signals.** SIGINT and SIGTERM are passed on to the child and end the turn ``cancelled``: the
body ends with the lines read before the signal (what the child prints after it is read and
dropped, so a child that ignores the signal and finishes cannot end the turn ``completed``), and
a child still running ``--kill-after`` seconds later is sent SIGKILL. Then the turn's result is printed: the selected output's text blocks, joined by
a blank line, or with ``--json`` the whole ``SubagentResult``.

**Exit statuses** (the one table of every ``lastword`` command, :mod:`lastword.cli.exits`): the
turn's stop reason, as SPEC §16 maps it, once the turn ended; 2 for a bad command line; and, when
there is no turn to report, statuses that no stop reason uses: 7 when the service refused a
request, 8 when it cannot be reached, 126 and 127 (as shells and ``timeout(1)`` use them) when
COMMAND cannot be run or is not found.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any

from lastword.adapters import CLI_FORMATS, FORMATS_BY_COMMAND
from lastword.cli.exits import EXIT_BY_STOP_REASON, NOT_EXECUTABLE, NOT_FOUND, REFUSED  # every command's table
from lastword.cli.reconcile import reconciler_for
from lastword.client import retry
from lastword.client.core import LastwordAPIError, LastwordClient
from lastword.schemas import IngestResult, SubagentResult


#: Seconds of silence after which a blank line is written (the service's body time-out is 30 s);
#: shorter for a run whose lease is shorter than three times this.
KEEPALIVE = 10.0
#: Seconds of failures in a row for which the output is sent again (``--retry-seconds``).
RETRY_SECONDS = retry.RETRY_SECONDS
#: Seconds a child is given to exit after the signal passed on to it, before SIGKILL (``--kill-after``).
KILL_AFTER = 10.0


class UsageError(Exception):
    """The command line cannot be run as given (exit status 2)."""


class CommandNotRun(Exception):
    """COMMAND could not be started; ``status`` is 126 or 127."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def format_of(command: Sequence[str], requested: str) -> str:
    """The ingest format: the one asked for, or with ``auto`` the one of the command's name."""
    if requested != "auto":
        return requested
    name = os.path.basename(command[0])
    if name not in FORMATS_BY_COMMAND:
        known = ", ".join(f"{command} ({fmt})" for command, fmt in FORMATS_BY_COMMAND.items())
        raise UsageError(f"cannot tell the output format of {name!r} (known: {known}); give --format")
    return FORMATS_BY_COMMAND[name]


def keepalive_every(keepalive: float, lease_seconds: float) -> float:
    """Seconds of silence after which a blank line is written: ``keepalive``, or a third of the
    run's lease when that is shorter (a lease of 0 is none)."""
    return min(keepalive, lease_seconds / 3) if lease_seconds > 0 else keepalive


class ChildOutput:
    """The lines a child prints, handed to the request as they are read (the client keeps them
    for a request sent again); a blank line after ``keepalive`` seconds of silence."""

    def __init__(self, keepalive: float = KEEPALIVE) -> None:
        self._keepalive = keepalive
        self._pending: list[bytes] = []
        # Reentrant: ``end`` is called from a signal handler, which runs in the thread that may
        # be inside ``append``.
        self._changed = threading.Condition(threading.RLock())
        self._ended = False

    def append(self, line: bytes) -> None:
        """A line read; after :meth:`end` (a signal cut the output short, or the service is given
        up) it is dropped."""
        if not line.endswith(b"\n"):
            line += b"\n"  # the last line of an output that does not end with a newline
        with self._changed:
            if not self._ended:
                self._pending.append(line)
                self._changed.notify_all()

    def end(self) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def lines(self) -> Iterator[bytes]:
        """The lines as they are read, until the output ends."""
        while True:
            with self._changed:
                if not self._pending and not self._ended:
                    self._changed.wait(self._keepalive)
                taken, self._pending = self._pending, []
                ended = self._ended
            if taken:
                yield b"".join(taken)
            elif ended:
                return
            else:
                yield b"\n"


@dataclass
class Delivery:
    """How the child's output fared: the service's answer, or why there is none."""

    answer: IngestResult | None = None
    refusal: LastwordAPIError | None = None
    failure: BaseException | None = None


def deliver(client: LastwordClient, run_id: str, format: str, output: ChildOutput, delivery: Delivery) -> None:
    """Send the output; the client sends it again from the first line after a failure, for its
    ``retry_seconds`` of failures in a row."""
    try:
        delivery.answer = client.ingest_cli_stream(run_id, format, output.lines())
    except LastwordAPIError as error:
        if retry.is_retried(error):
            delivery.failure = error
        else:
            delivery.refusal = error
    except Exception as error:  # a lost connection, or anything else that ended the tries
        delivery.failure = error
    finally:
        output.end()  # what the child prints from now on has nowhere to go


def _exit_words(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


@dataclass(frozen=True)
class Outcome:
    """The turn's result and the exit status it maps to."""

    result: SubagentResult
    status: int


def run_child(
    client: LastwordClient, command: Sequence[str], *, format: str, run_id: str | None = None,
    parent_run_id: str | None = None, agent: str | None = None, lease_seconds: float | None = None,
    keepalive: float = KEEPALIVE, kill_after: float = KILL_AFTER,
) -> Outcome:
    """Create the run, run ``command`` with its output streamed into it, end the turn if the
    output did not, and return the turn's result (see the module's docstring)."""
    executable = shutil.which(command[0])
    if executable is None and os.sep in command[0] and os.path.exists(command[0]):
        # A path that exists but is not executable: ``which`` skips it, but it is there, so it
        # is the shell's 126 ("cannot be run", from Popen below), not 127 ("not found").
        executable = command[0]
    if executable is None:
        raise CommandNotRun(NOT_FOUND, f"{command[0]}: command not found")
    name = os.path.basename(command[0])
    run = client.create_run(run_id, parent_run_id=parent_run_id, agent=agent or name, lease_seconds=lease_seconds)
    started_ms = int(time.time() * 1000)  # opencode's session list stamps sessions so
    try:
        child = subprocess.Popen([executable, *command[1:]], stdout=subprocess.PIPE)
    except OSError as error:
        client.end(run.runId, "error", error={"message": f"{name} could not be started: {error}"})
        raise CommandNotRun(NOT_EXECUTABLE, f"{command[0]}: {error.strerror or error}") from error
    output = ChildOutput(keepalive_every(keepalive, run.leaseSeconds))
    delivery = Delivery()
    sender = threading.Thread(target=deliver, args=(client, run.runId, format, output, delivery),
                              name="lastword-run-sender", daemon=True)
    sender.start()
    # Set by the first signal, or once the child has exited (the escalation then has nothing to do).
    signalled, over = threading.Event(), threading.Event()
    threading.Thread(target=_escalate, args=(child, signalled, over, kill_after), name="lastword-run-kill-after",
                     daemon=True).start()

    def pass_on(signum: int, frame: FrameType | None) -> None:
        # Only flags and the signal itself here: the handler runs between two bytecodes of the
        # main thread, whatever lock that holds.
        output.end()  # the turn is cancelled: nothing printed from now on is part of it
        signalled.set()
        over.set()
        child.send_signal(signum)

    previous = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGINT, signal.SIGTERM)}
    reconciler = reconciler_for(format, client, run.runId, executable=executable, started_ms=started_ms,
                                feed=output.append)
    try:
        _read_lines(child.stdout, output, None if reconciler is None else reconciler.before)
        exit_status = child.wait()
        if reconciler is not None and not signalled.is_set():
            # Before the output ends: the stdout body's end ends the turn (SPEC §19).
            reconciler.at_exit(exit_status)
        output.end()
    finally:
        # Once the child is gone, a signal stops lastword itself (say, while it waits for a
        # service that is down): the first one, passed on, already asked for the end.
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        over.set()  # after the handlers are gone: the main thread never holds its lock in one
    sender.join()
    if delivery.failure is not None:
        raise delivery.failure
    if delivery.answer is None or delivery.answer.stopReason is None:
        _end_turn(client, run.runId, name, exit_status, signalled.is_set(), delivery.refusal)
    result = client.result(run.runId)
    return Outcome(result, EXIT_BY_STOP_REASON.get(result.stopReason or "", REFUSED))


def _escalate(child: subprocess.Popen[bytes], signalled: threading.Event, over: threading.Event,
              kill_after: float) -> None:
    """SIGKILL for a child still running ``kill_after`` seconds after a signal was passed on to it."""
    over.wait()
    if signalled.is_set():
        try:
            child.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            child.kill()


def _read_lines(stdout: IO[bytes] | None, output: ChildOutput, before: Callable[[bytes], None] | None) -> None:
    """Every line the child prints into ``output``; ``before`` sees each first (see
    :mod:`lastword.cli.reconcile`: a transcript may have to be stored before a line is)."""
    assert stdout is not None
    with stdout:
        for line in stdout:  # a line as soon as it is complete (the pipe's reads return what is there)
            if before is not None:
                before(line)
            output.append(line)


def _end_turn(client: LastwordClient, run_id: str, name: str, exit_status: int, signalled: bool,
              refusal: LastwordAPIError | None) -> None:
    """End a turn that the child's output left open; a turn ended meanwhile (its parent
    cancelled it, its lease ran out) keeps the stop reason it ended with."""
    if refusal is not None and refusal.code == "run_ended" and refusal.problem.get("runId", run_id) == run_id:
        return  # ours ended; a child's end (a subagent's run ``{runId}.{id}``) says nothing of ours
    error: dict[str, Any] | None = None
    if signalled:
        stop_reason = "cancelled"
    elif refusal is not None:
        stop_reason = "error"
        detail = refusal.problem.get("detail") or refusal.problem.get("title") or refusal.code
        error = {"message": f"the service could not store {name}'s output: {detail}", "type": refusal.code}
    else:
        stop_reason = "error"
        error = {"type": "no_terminal_event", "exitStatus": exit_status,
                 "message": f"{name} {_exit_words(exit_status)} without a line that ends its turn"}
    try:
        client.end(run_id, stop_reason, error=error)
    except LastwordAPIError as ended:
        if ended.status != 409:
            raise


def text_of(result: SubagentResult) -> str:
    """The selected output's text blocks, joined by a blank line."""
    return "\n\n".join(block["text"] for block in result.output if block.get("type") == "text" and block.get("text"))


def headline(result: SubagentResult) -> str | None:
    """One line for standard error about a turn that did not complete."""
    if not result.isError:
        return None
    message = result.error.get("message") if isinstance(result.error, dict) else result.error
    return f"run {result.runId} ended {result.stopReason}" + (f": {message}" if message else "")


def print_outcome(outcome: Outcome, as_json: bool, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> None:
    if as_json:
        print(outcome.result.model_dump_json(indent=2, exclude_none=True), file=out)
    else:
        text = text_of(outcome.result)
        if text:
            print(text, file=out)
    line = headline(outcome.result)
    if line is not None:
        print(f"lastword run: {line}", file=err)
