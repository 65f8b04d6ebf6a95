"""``lastword hook claude-code``: the command for Claude Code's hooks (``SubagentStop``, ``Stop``).

Claude Code runs it with the hook's JSON on standard input (``hook_event_name``,
``session_id``, ``transcript_path``, and for ``SubagentStop`` ``agent_id`` and
``agent_transcript_path``). It posts the transcripts named there to
``POST /v1/runs/{runId}/ingest/claude-code-transcript`` (SPEC §19): at ``SubagentStop`` the
subagent's own transcript (with ``toolUseId`` from the ``agent-<agentId>.meta.json`` beside it,
so its child run ``{runId}.{toolUseId}`` holds the subagent's own messages before the CLI writes
the cut tool result its parent gets); at ``Stop`` the session's transcript.

The run is ``$LASTWORD_RUN_ID``, else ``claude-code-<session_id>`` (created when missing, so an
interactive session needs nothing but the hooks settings). The service is ``$LASTWORD_URL``
(default ``http://127.0.0.1:8000``), its token ``$LASTWORD_TOKEN``.

**Only the lines not yet sent.** Transcripts only grow, and a session's grows at every turn;
sending it whole at each ``Stop`` would cost the whole session each turn (eventIds would make
it store nothing twice, but the bytes and the reading are the session's size every time). So a
small state file per transcript and run keeps the byte offset after the last whole line the
service accepted, and the next call sends from there. Where: ``$LASTWORD_HOOK_STATE_DIR``, else
``$XDG_STATE_HOME/lastword/claude-code-hook`` (``~/.local/state/...``), one file named by a
digest of the run id and the transcript's path. Not beside the transcript: that directory is
Claude Code's, and the same transcript may feed different runs. The offset moves only after a
200, so a call that failed sends the same lines again (a duplicate costs nothing); a lost state
file sends the whole transcript again, which stores nothing twice.

**Never in the CLI's way.** Whatever happens (lastword down, a refusal, bad input) it exits 0
within 5 s and says why on standard error: a hook's failure must not block or fail the session.
The deadline is an alarm set first thing; the module uses only the standard library (``urllib``)
and ``lastword hook`` is dispatched before the rest of the command line is imported, because on a
busy machine importing httpx and the client alone took seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from lastword.cli.claude_code_files import tool_use_id, whole_lines
from lastword.cli.reasons import reason

#: The whole command's budget, under Claude Code's patience and the 5 s promised.
DEADLINE_SECONDS = 3.0
#: One request's timeout (connect, read, write each).
REQUEST_SECONDS = 2.0
DEFAULT_URL = "http://127.0.0.1:8000"


class _OutOfTime(Exception):
    pass


class _Unreachable(Exception):
    """The service did not answer at ``$LASTWORD_URL``."""


def _out_of_time(signum: int, frame: object) -> None:
    raise _OutOfTime(f"gave up after {DEADLINE_SECONDS:g} s")


def main(stdin: Any = None) -> int:
    """Run the hook; always 0. Problems are reported on standard error."""
    previous = signal.signal(signal.SIGALRM, _out_of_time)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE_SECONDS)
    try:
        try:
            hook = json.load(stdin or sys.stdin)
        except ValueError as error:
            raise ValueError(f"standard input is not the hook's JSON object ({error}): "
                             f"run this as the command of a Claude Code hook") from None
        for line in _hook(hook):
            print(f"lastword hook: {line}", file=sys.stderr)
    except _Unreachable as error:
        print(f"lastword hook: nothing sent: {error}", file=sys.stderr)
    except (_OutOfTime, Exception) as error:  # noqa: BLE001 -- never fail the CLI
        print(f"lastword hook: nothing more sent: {reason(error)}", file=sys.stderr)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return 0


def run_id_of(hook: dict[str, Any]) -> str:
    """``$LASTWORD_RUN_ID``, else the run derived from the session's id."""
    named = os.environ.get("LASTWORD_RUN_ID")
    if named:
        return named
    session = hook.get("session_id")
    if not isinstance(session, str) or not session:
        raise ValueError("the hook's input names no session_id and LASTWORD_RUN_ID is not set")
    return f"claude-code-{session}"


class _Service:
    """The few requests the hook makes, over the standard library."""

    def __init__(self) -> None:
        self.url = os.environ.get("LASTWORD_URL", DEFAULT_URL).rstrip("/")
        token = os.environ.get("LASTWORD_TOKEN")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, path: str, body: bytes, content_type: str, params: dict[str, str] | None = None) -> tuple[int, bytes]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(f"{self.url}{path}{query}", data=body, method="POST",
                                         headers={**self.headers, "content-type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as answer:
                return int(answer.status), bytes(answer.read())
        except urllib.error.HTTPError as refused:
            return int(refused.code), bytes(refused.read())
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise  # it was reached and did not answer: said as any other failure
            raise _Unreachable(f"cannot reach the service at {self.url}: {error.reason} (start it with "
                               f"`lastword serve`, or set LASTWORD_URL in the hook's environment)") from None


def _hook(hook: Any) -> list[str]:
    if not isinstance(hook, dict):
        raise ValueError("standard input is not the hook's JSON object: run this as the command of a Claude Code hook")
    run_id = run_id_of(hook)
    # Each named transcript, and whether it is a subagent's own (sent under its tool_use_id).
    named: list[tuple[Path, bool]] = []
    agent = hook.get("agent_transcript_path")
    if isinstance(agent, str) and agent:
        named.append((Path(agent), True))
    session = hook.get("transcript_path")
    if hook.get("hook_event_name") != "SubagentStop" and isinstance(session, str) and session:
        named.append((Path(session), False))
    said = [f"{path}: no such transcript" for path, _ in named if not path.exists()]
    sends = [(path, tool_use_id(path) if is_agent else None) for path, is_agent in named if path.exists()]
    if not sends:
        # Nothing to send: no run is made (one made would stay running for its whole lease).
        return said
    service = _Service()
    if not os.environ.get("LASTWORD_RUN_ID"):
        status, body = service.post("/v1/runs", json.dumps({"runId": run_id, "agent": "claude-code"}).encode(),
                                    "application/json")
        if status not in (200, 201, 409):
            raise ValueError(f"creating the run {run_id!r}: {status} {body.decode(errors='replace')[:300]}")
    for path, tool_use in sends:
        said.append(_send(service, run_id, path, tool_use))
    return said


def state_file(run_id: str, transcript: Path) -> Path:
    base = os.environ.get("LASTWORD_HOOK_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "lastword", "claude-code-hook")
    digest = hashlib.sha256(f"{run_id}\n{transcript.resolve()}".encode()).hexdigest()[:32]
    return Path(base) / f"{digest}.json"


def _send(service: _Service, run_id: str, transcript: Path, tool_use_id: str | None) -> str:
    state = state_file(run_id, transcript)
    try:
        offset = int(json.loads(state.read_text())["offset"])
    except (OSError, ValueError, KeyError, TypeError):
        offset = 0
    with transcript.open("rb") as file:
        if offset > transcript.stat().st_size:
            offset = 0  # not the file the state was kept for: send it whole
        file.seek(offset)
        data = file.read()
    whole = whole_lines(data)  # a line still being written waits for the next call
    if not whole.strip():
        return f"{transcript.name}: nothing new"
    params = {"toolUseId": tool_use_id} if tool_use_id else {}
    status, answer = service.post(f"/v1/runs/{urllib.parse.quote(run_id)}/ingest/claude-code-transcript", whole,
                                  "application/x-ndjson", params)
    if status != 200:
        return f"{transcript.name}: {status} {answer.decode(errors='replace').strip()[:300]}"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"offset": offset + len(whole), "transcript": str(transcript)}))
    body = json.loads(answer)
    return f"{transcript.name}: {body.get('accepted')} accepted, {body.get('duplicates')} duplicates"
