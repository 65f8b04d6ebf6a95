"""Claude Code's transcript files (SPEC §19): where they are, and which tool call a subagent's serves.

Claude Code writes a session to ``<config>/projects/<cwd slug>/<session>.jsonl`` and each
subagent it runs to ``<session>/subagents/agent-<agentId>.jsonl``, with an
``agent-<agentId>.meta.json`` beside it naming the ``toolUseId`` of the call that ran it. The
config dir is ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``; the slug is the working directory with
every character that is not an ASCII letter or digit turned into ``-`` (as recorded from the real
CLI, ``tests/cli_children/record_transcripts.py``).

Both ``lastword hook claude-code`` (which is handed the paths) and ``lastword run`` (which finds
them from the ``init`` line's ``session_id`` and ``cwd``) read them through this module. It uses
the standard library only: the hook imports it under a deadline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def config_dir() -> Path:
    """Claude Code's config dir, as the CLI itself picks it."""
    named = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(named) if named else Path.home() / ".claude"


def project_slug(cwd: str) -> str:
    """The name of a working directory's folder under ``<config>/projects``."""
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in cwd)


def session_transcript(session_id: str, cwd: str, config: Path | None = None) -> Path | None:
    """The session's transcript, or None when Claude Code wrote none (yet) where it should be.

    Looked for first in the working directory's folder, then in any project folder (a slug
    rule this module does not know yet, a very long path Claude Code shortens): the session id
    is a UUID, so the file it names is the session's wherever it is."""
    projects = (config or config_dir()) / "projects"
    name = f"{session_id}.jsonl"
    if not session_id or "/" in session_id or session_id.startswith("."):
        return None
    expected = projects / project_slug(cwd) / name
    if expected.is_file():
        return expected
    return next((found for found in sorted(projects.glob(f"*/{name}")) if found.is_file()), None)


def subagent_transcript(session: Path, agent_id: str) -> Path | None:
    """The transcript of the subagent ``agent_id`` of the session whose transcript is ``session``."""
    if not agent_id or "/" in agent_id or agent_id.startswith("."):
        return None
    found = session.with_suffix("") / "subagents" / f"agent-{agent_id}.jsonl"
    return found if found.is_file() else None


def subagent_transcripts(session: Path) -> list[Path]:
    """Every subagent transcript of the session, in name order."""
    return sorted((session.with_suffix("") / "subagents").glob("agent-*.jsonl"))


def _meta(transcript: Path) -> dict[str, Any]:
    """The ``agent-<agentId>.meta.json`` Claude Code writes beside a subagent's transcript."""
    try:
        meta = json.loads(transcript.with_name(transcript.stem + ".meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def tool_use_id(transcript: Path) -> str | None:
    """The tool call that ran the subagent, from the ``.meta.json`` Claude Code writes beside it."""
    found = _meta(transcript).get("toolUseId")
    return found if isinstance(found, str) and found else None


#: A reply after which Claude Code goes on (a tool call, a cut it asks the model to resume).
_GOES_ON = frozenset({"tool_use", "max_tokens", "pause_turn"})


def finished(transcript: Path) -> bool:
    """The subagent's transcript holds its last reply.

    Claude Code writes transcripts through a queue it flushes on a timer: when it prints a
    subagent's end on stdout, and even when its ``.meta.json`` already says ``"finished": true``,
    the last reply may not be in the file yet (seen with 2.1.332: ~0.1 s later). So the file is
    whole when it is marked finished **and** its last reply is one the CLI does not go on
    from: a stop other than a tool call or a cut, or a message the CLI made itself (its error).
    """
    if _meta(transcript).get("finished") is not True:
        return False
    try:
        lines = whole_lines(transcript.read_bytes()).splitlines()
    except OSError:
        return False
    for raw in reversed(lines):
        try:
            line = json.loads(raw)
        except ValueError:
            return False
        message = line.get("message") if isinstance(line, dict) else None
        if line.get("type") != "assistant" or not isinstance(message, dict):
            continue
        if message.get("model") == "<synthetic>" or line.get("error") is not None:
            return True
        return isinstance(message.get("stop_reason"), str) and message["stop_reason"] not in _GOES_ON
    return False


def whole_lines(data: bytes) -> bytes:
    """``data`` up to its last newline: a line Claude Code is still writing waits for later."""
    return data[: data.rfind(b"\n") + 1]


__all__ = ["config_dir", "finished", "project_slug", "session_transcript", "subagent_transcript", "subagent_transcripts",
           "tool_use_id", "whole_lines"]
