"""What ``lastword run`` sends besides the child's standard output (SPEC §19): the CLI's own record.

A CLI writes more than it prints. Claude Code keeps the session's transcript and each subagent's
own transcript (a subagent's text is never printed, and the tool result its parent gets may be
cut); so ``lastword run`` sends them into the run, and a wrapped child's subagents are whole with
no hook configured.

**The order is the point.** The service never changes an ended turn (SPEC §7: a turn's end is
final, its ``subagent/end`` and webhooks already out), so a transcript must be stored before the
stdout line that ends the turn it feeds:

- a subagent's transcript is sent when its ``system/task_notification`` line (printed for
  foreground and background subagents alike, naming ``task_id`` = the agentId and the
  ``tool_use_id``), or the parent's tool result naming its ``agentId``, is read, **before** that
  line is passed on: that line (or the tool result after it) ends the child run
  ``{runId}.{tool_use_id}``. The subagent has finished then, but Claude Code may not have
  written its last reply yet: the line is held until the ``.meta.json`` says ``finished``
  (at most ``FINISH_SECONDS``; the child's next lines wait in the pipe; past that, the
  transcript goes at the exit, and what the ended child cannot take is kept on the parent).
  The child run then holds the subagent's own messages; the cut tool result the parent saw stays
  logged on the parent. (This is the moment Claude Code's ``SubagentStop`` hook fires.)
- the session's transcript is sent when the child has exited, **before** the stdout body ends:
  the parent's turn ends with that body (the stdout's ``result`` line takes effect at its end).
  Lines both sent are the same events (eventIds from the lines' ``uuid``s and ``message.id``s):
  nothing is stored twice. Subagent transcripts not sent yet (their end line was never
  printed) go with it, linked by their ``.meta.json``.

A transcript that cannot be found or stored never changes the child's answer: one line on
standard error says which and why, and the stdout goes on as it is.

A child that lastword itself signalled is not reconciled at its exit: its turn is ``cancelled``
with what it printed before the signal (see :mod:`lastword.cli.run`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from lastword.cli import claude_code_files as files
from lastword.cli.reasons import reason
from lastword.client.core import LastwordAPIError, LastwordClient

TRANSCRIPT_FORMAT = "claude-code-transcript"
#: Seconds a subagent's end line is held for Claude Code to mark its transcript finished (the
#: child's next lines wait in the pipe meanwhile), and how often the mark is looked for.
FINISH_SECONDS = 10.0
FINISH_POLL = 0.02


class Reconciler(Protocol):
    """Watches the child's lines and sends the CLI's own record of them."""

    def before(self, line: bytes) -> None:
        """A line is read, not yet passed on to the service."""

    def at_exit(self, exit_status: int) -> None:
        """The child has exited with ``exit_status``; its output is not yet ended."""


Say = Callable[[str], None]


def _stderr(err: IO[str]) -> Say:
    return lambda text: print(f"lastword run: {text}", file=err, flush=True)


class ClaudeCodeTranscripts:
    """Claude Code's session and subagent transcripts, sent as the module's docstring says."""

    def __init__(self, client: LastwordClient, run_id: str, say: Say, finish_seconds: float = FINISH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._finish_seconds = finish_seconds
        self._clock = clock
        self._run_id = run_id
        self._say = say
        self._session_id: str | None = None
        self._cwd: str | None = None
        #: The subagent transcripts sent (by path): each once.
        self._sent: set[Path] = set()
        #: The subagents whose end was read (by agentId).
        self._tried: set[str] = set()

    def before(self, line: bytes) -> None:
        # Only three kinds of line matter; the rest (most of a long session) is not parsed.
        if b'"init"' not in line and b"task_notification" not in line and b'"agentId"' not in line:
            return
        try:
            parsed = json.loads(line)
        except ValueError:
            return  # the service names a line it cannot read
        if not isinstance(parsed, dict):
            return
        if parsed.get("type") == "system" and parsed.get("subtype") == "init":
            session_id, cwd = parsed.get("session_id"), parsed.get("cwd")
            if isinstance(session_id, str) and isinstance(cwd, str):
                self._session_id, self._cwd = session_id, cwd
        for agent_id, call_id in _finished_subagents(parsed):
            self._send_subagent(agent_id, call_id)

    def at_exit(self, exit_status: int) -> None:
        # Whatever the status: a killed child's transcript holds what it did (it never ends the
        # parent's turn, which then ends error, no_terminal_event, with what was selected).
        session = self._session()
        if session is None:
            if self._session_id is not None:
                self._say(f"no transcript of session {self._session_id} under {files.config_dir()}: "
                          "the subagents' own messages are not sent")
            return
        self._send(session, None)
        for transcript in files.subagent_transcripts(session):
            if transcript not in self._sent:
                self._sent.add(transcript)
                self._send(transcript, files.tool_use_id(transcript))

    def _session(self) -> Path | None:
        if self._session_id is None or self._cwd is None:
            return None
        return files.session_transcript(self._session_id, self._cwd)

    def _send_subagent(self, agent_id: str, call_id: str) -> None:
        if agent_id in self._tried:
            return  # its task_notification, then the tool result naming it
        self._tried.add(agent_id)
        if self._session_id is None:
            return  # no init line: said once, at the exit
        transcript = self._whole_subagent(agent_id)
        if transcript is None:
            self._say(f"subagent {agent_id}'s transcript was not whole within {self._finish_seconds:g} s: its child "
                      "run keeps the tool result (the transcript is sent at the exit, kept on the run)")
            return
        if transcript not in self._sent:
            self._sent.add(transcript)
            self._send(transcript, call_id)

    def _whole_subagent(self, agent_id: str) -> Path | None:
        """The subagent's transcript once Claude Code has written it whole, or None when it has
        not within ``finish_seconds``. Claude Code signals nothing, so the files are looked at
        again every ``FINISH_POLL`` seconds (the session's file too: it is written by the same
        queue, and may not be there yet on a busy machine)."""
        deadline = self._clock() + self._finish_seconds
        while True:
            session = self._session()
            transcript = None if session is None else files.subagent_transcript(session, agent_id)
            if transcript is not None and files.finished(transcript):
                return transcript
            if self._clock() >= deadline:
                return None
            time.sleep(FINISH_POLL)

    def _send(self, transcript: Path, tool_use_id: str | None) -> None:
        try:
            body = files.whole_lines(transcript.read_bytes())
            if body.strip():
                self._client.ingest_cli_stream(self._run_id, TRANSCRIPT_FORMAT, [body], tool_use_id=tool_use_id)
        except LastwordAPIError as error:
            self._say(f"{transcript.name} not stored: {error.status} {error.code}: "
                      f"{error.problem.get('detail') or error.problem.get('title') or ''}".rstrip(": "))
        except Exception as error:  # noqa: BLE001 -- the stdout's answer stands whatever happens here
            self._say(f"{transcript.name} not stored: {reason(error)}")


def _finished_subagents(line: dict[str, Any]) -> list[tuple[str, str]]:
    """(agentId, tool_use_id) of each subagent the line says has finished."""
    if line.get("type") == "system" and line.get("subtype") == "task_notification":
        agent_id, call_id = line.get("task_id"), line.get("tool_use_id")
        if isinstance(agent_id, str) and isinstance(call_id, str):
            return [(agent_id, call_id)]
        return []
    result = line.get("tool_use_result")
    if line.get("type") != "user" or not isinstance(result, dict):
        return []
    agent_id = result.get("agentId")
    if not isinstance(agent_id, str) or result.get("status") == "async_launched" or result.get("isAsync") is True:
        return []
    message = line.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    calls = [block.get("tool_use_id") for block in content or [] if isinstance(block, dict)
             and block.get("type") == "tool_result"] if isinstance(content, list) else []
    # The line-level tool_use_result belongs to a line holding one result (SPEC §16a).
    return [(agent_id, calls[0])] if len(calls) == 1 and isinstance(calls[0], str) else []


#: The line ``opencode run --format json`` prints for each part type ``opencode export`` holds.
OPENCODE_LINES = {"step-start": "step_start", "text": "text", "reasoning": "reasoning", "tool": "tool_use",
                  "step-finish": "step_finish"}
#: Seconds ``opencode export`` / ``session list`` may take.
EXPORT_SECONDS = 60.0


class OpencodeExport:
    """opencode's last step from ``opencode export SESSION`` when its text never reached stdout.

    ``opencode run`` may exit 0 with its final text part unprinted (opencode#50514: the part
    races the session's idle event), even with nothing printed at all; the text is in its
    database. So when it exited 0 and no ``text`` line followed the last ``step_start`` printed
    (or nothing was printed), the session is exported (the executable the child ran, ``export SESSION``: one JSON
    object, ``{info, messages: [{info, parts}]}``) and each assistant part stdout did not carry is
    added to the output as the line ``opencode run`` prints for it (``{type, timestamp,
    sessionID, part}``), before the output ends: the adapter of §16 reads them as it reads
    stdout, and a part printed already is not added again. The session is the one stdout names,
    else the newest of ``opencode session list`` in the working directory created since the
    child started."""

    def __init__(self, executable: str, started_ms: int, say: Say, feed: Callable[[bytes], None]) -> None:
        self._executable = executable
        self._started_ms = started_ms
        self._say = say
        self._feed = feed
        self._session: str | None = None
        self._printed: set[str] = set()
        self._text_since_step = False

    def before(self, line: bytes) -> None:
        try:
            parsed = json.loads(line)
        except ValueError:
            return
        if not isinstance(parsed, dict):
            return
        if isinstance(parsed.get("sessionID"), str):
            self._session = self._session or parsed["sessionID"]
        part = parsed.get("part")
        if isinstance(part, dict) and isinstance(part.get("id"), str):
            self._printed.add(part["id"])
        if parsed.get("type") == "step_start":
            self._text_since_step = False
        elif parsed.get("type") == "text":
            self._text_since_step = True

    def at_exit(self, exit_status: int) -> None:
        if exit_status != 0 or self._text_since_step:
            return  # a failed or killed run is not the race: its export may say a step ended that never did
        session = self._session or self._newest_session()
        if session is None:
            self._say("opencode printed no text and no session of it was found: nothing to export")
            return
        exported = self._json([self._executable, "export", session])
        messages = exported.get("messages") if isinstance(exported, dict) else None
        if not isinstance(messages, list):
            self._say(f"opencode export {session} gave no messages: nothing added")
            return
        added = 0
        for message in messages:
            info = message.get("info") if isinstance(message, dict) else None
            if not isinstance(info, dict) or info.get("role") != "assistant":
                continue
            for part in message.get("parts") or []:
                kind = OPENCODE_LINES.get(str(part.get("type"))) if isinstance(part, dict) else None
                if kind is None or not isinstance(part.get("id"), str) or part["id"] in self._printed:
                    continue
                self._printed.add(part["id"])
                stamp = (part.get("time") or {}).get("end") or (info.get("time") or {}).get("created")
                self._feed(json.dumps({"type": kind, "timestamp": stamp, "sessionID": session, "part": part}).encode() + b"\n")
                added += 1
        if added:
            self._say(f"opencode's last text never reached stdout: {added} part(s) taken from opencode export {session}")

    def _newest_session(self) -> str | None:
        listed = self._json([self._executable, "session", "list", "--format", "json"])
        here = os.getcwd()
        found = [item for item in listed if isinstance(item, dict) and item.get("directory") == here
                 and isinstance(item.get("id"), str) and _created(item) >= self._started_ms] if isinstance(listed, list) else []
        return str(max(found, key=_created)["id"]) if found else None

    def _json(self, argv: list[str]) -> Any:
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=EXPORT_SECONDS)
            return json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError) as error:
            self._say(f"{' '.join(argv[1:3])} failed: {reason(error)}")
            return None


def _created(item: dict[str, Any]) -> int:
    time_ = item.get("time")
    created = time_.get("created") if isinstance(time_, dict) else item.get("created")
    return created if isinstance(created, int) else 0


def reconciler_for(format: str, client: LastwordClient, run_id: str, *, executable: str, started_ms: int,
                   feed: Callable[[bytes], None], err: IO[str] | None = None) -> Reconciler | None:
    """The reconciler of an ingest format, or None for a CLI whose record is not read.
    ``executable``: the child's; ``feed`` adds a line to its output."""
    say = _stderr(err or sys.stderr)
    if format == "claude-code":
        return ClaudeCodeTranscripts(client, run_id, say)
    if format == "opencode" and os.path.basename(executable) == "opencode":
        return OpencodeExport(executable, started_ms, say, feed)
    return None


__all__ = ["ClaudeCodeTranscripts", "OpencodeExport", "Reconciler", "reconciler_for"]
