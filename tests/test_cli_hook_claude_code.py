"""``lastword hook claude-code`` (SPEC §19): run by the real Claude Code from its hooks settings,
and never in the CLI's way when lastword is not there."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import ingested, result, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run
from tests.cli_children.record import BIN, run_cli

LASTWORD = str(Path(sys.executable).with_name("lastword"))
FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures" / "claude-code-transcript"
#: A Python exception's class name as a message would print it ("FileNotFoundError: …").
PYTHON_CLASS = re.compile(r"\b[A-Z]\w*(Error|Exception|Expired)\b")
SPLIT_WHOLE = "Report part one: the first half of the findings, cut and report part two, which completes the findings."
SPLIT_TAIL = " and report part two, which completes the findings."


def texts(output: list[dict[str, Any]]) -> str:
    return "".join(block["text"] for block in output if block["type"] == "text")


def hooks_settings(command: str) -> dict[str, Any]:
    """The settings the README gives to paste, with ``command`` for ``lastword hook claude-code``."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("<!-- hooks-settings -->\n```json\n", 1)[1].split("```", 1)[0]
    return dict(json.loads(block.replace("lastword hook claude-code", command)))


@pytest.mark.slow
@pytest.mark.skipif(not (BIN / "claude").exists(), reason=f"Claude Code not installed ({BIN}): npm install there")
@pytest.mark.parametrize("join", [True, False])
def test_the_real_claude_code_fills_the_child_runs_through_the_hook(
        shared_api: httpx.Client, shared_base_url: str, tmp_path: Path, join: bool) -> None:  # noqa: F811
    run_id = create_run(shared_api, selection={"joinContinuations": join})

    def settings(tmp: Path) -> None:
        config = tmp / "home" / ".claude"
        config.mkdir(parents=True, exist_ok=True)
        (config / "settings.json").write_text(json.dumps(hooks_settings(f"{LASTWORD} hook claude-code")))

    details: dict[str, Any] = {}
    stdout, status = run_cli("claude-code", "subagent_split", details=details, setup=settings, env_extra={
        "LASTWORD_URL": shared_base_url, "LASTWORD_RUN_ID": run_id, "LASTWORD_HOOK_STATE_DIR": str(tmp_path)})
    assert status == 0, details["stderr"]
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    call = next(line["tool_use_id"] for line in lines if line.get("subtype") == "task_started")
    tool_result = next(line for line in lines if line["type"] == "user" and line.get("tool_use_result"))
    assert texts(tool_result["tool_use_result"]["content"]) == SPLIT_TAIL  # what the parent was handed
    child = result(shared_api, f"{run_id}.{call}")
    assert child["stopReason"] == "completed"
    assert texts(child["output"]) == (SPLIT_WHOLE if join else SPLIT_TAIL)
    assert len([event for event in ingested(shared_api, f"{run_id}.{call}") if event["type"] == "assistant/message"]) == 2
    # the Stop hook sent the session's transcript: the parent's replies and the tool result
    parent = ingested(shared_api, run_id)
    assert [event["type"] for event in parent if event["type"] in ("assistant/message", "tool/result")] == [
        "assistant/message", "tool/result", "assistant/message"]
    assert len(list(tmp_path.iterdir())) == 2  # one state file a transcript


def hook(stdin: dict[str, Any], env: dict[str, str], timeout: float = 5) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run([LASTWORD, "hook", "claude-code"], input=json.dumps(stdin).encode(), capture_output=True,
                          env={**os.environ, **env}, timeout=timeout)
    return done.returncode, done.stderr.decode(), time.monotonic() - started


def transcript_copy(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "session"
    shutil.copytree(FIXTURES / "subagent_split", target)
    (agent,) = (target / "subagents").glob("agent-*.jsonl")
    return target / "session.jsonl", agent


@pytest.mark.server
def test_the_hook_exits_0_in_time_with_lastword_down(tmp_path: Path) -> None:
    session, agent = transcript_copy(tmp_path)
    stdin = {"hook_event_name": "SubagentStop", "session_id": "s-1", "transcript_path": str(session),
             "agent_transcript_path": str(agent)}
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    status, stderr, _ = hook(stdin, {"LASTWORD_URL": f"http://127.0.0.1:{port}", "LASTWORD_HOOK_STATE_DIR": str(tmp_path / "s")})
    assert status == 0 and "Connection refused" in stderr
    # a service that takes the connection and never answers: the hook gives up in time
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        status, stderr, elapsed = hook(stdin, {"LASTWORD_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
                                               "LASTWORD_HOOK_STATE_DIR": str(tmp_path / "s")})
    assert status == 0 and "nothing more sent: timed out" in stderr
    assert not PYTHON_CLASS.search(stderr), stderr
    assert not (tmp_path / "s").exists()  # nothing was accepted, so nothing is marked sent
    # a transcript that cannot be read: the file and what is wrong with it, in words
    status, stderr, _ = hook({**stdin, "agent_transcript_path": str(tmp_path)},
                             {"LASTWORD_URL": f"http://127.0.0.1:{port}", "LASTWORD_RUN_ID": "named"})
    assert status == 0 and f"{tmp_path}: is a directory" in stderr and not PYTHON_CLASS.search(stderr), stderr
    # input that is not a hook's
    status, stderr, _ = hook({"session_id": 5}, {"LASTWORD_URL": f"http://127.0.0.1:{port}"})
    assert status == 0 and "session_id" in stderr


@pytest.mark.server
def test_the_hook_sends_only_new_lines_and_derives_the_run(shared_api: httpx.Client, shared_base_url: str,  # noqa: F811
                                                           tmp_path: Path) -> None:
    session, agent = transcript_copy(tmp_path)
    session_id = f"s-{time.monotonic_ns()}"
    env = {"LASTWORD_URL": shared_base_url, "LASTWORD_HOOK_STATE_DIR": str(tmp_path / "state"), "LASTWORD_RUN_ID": ""}
    whole = session.read_bytes().splitlines(keepends=True)
    cut = next(index for index, line in enumerate(whole) if b'"toolUseResult"' in line)
    # the session up to its tool result, that line still being written
    session.write_bytes(b"".join(whole[:cut]) + whole[cut][:30])
    stop = {"hook_event_name": "Stop", "session_id": session_id, "transcript_path": str(session)}
    status, stderr, _ = hook(stop, env)
    assert status == 0, stderr
    run_id = f"claude-code-{session_id}"
    first = ingested(shared_api, run_id)
    assert [event["type"] for event in first] == ["user/message", "assistant/message"]
    session.write_bytes(b"".join(whole))
    status, stderr, _ = hook(stop, env)
    assert status == 0 and "0 duplicates" in stderr, stderr
    assert ingested(shared_api, run_id)[:2] == first
    status, stderr, _ = hook(stop, env)
    assert "nothing new" in stderr
    meta = json.loads(next((agent.parent).glob("*.meta.json")).read_text())
    status, stderr, _ = hook({**stop, "hook_event_name": "SubagentStop", "agent_transcript_path": str(agent)}, env)
    assert status == 0 and "accepted" in stderr, stderr
    assert texts(result(shared_api, f"{run_id}.{meta['toolUseId']}")["output"]) == SPLIT_TAIL


@pytest.mark.server
def test_a_hook_whose_transcripts_are_missing_changes_nothing(shared_api: httpx.Client, shared_base_url: str,  # noqa: F811
                                                               tmp_path: Path) -> None:
    """Bad input changes nothing: a hook naming no transcript that exists makes no run (one made
    would stay running for its whole lease), says which file is missing, and still exits 0."""
    session_id = f"s-{time.monotonic_ns()}"
    stop = {"hook_event_name": "Stop", "session_id": session_id, "transcript_path": str(tmp_path / "gone.jsonl")}
    status, stderr, _ = hook(stop, {"LASTWORD_URL": shared_base_url, "LASTWORD_RUN_ID": "",
                                    "LASTWORD_HOOK_STATE_DIR": str(tmp_path / "state")})
    assert status == 0 and "gone.jsonl" in stderr, stderr
    assert shared_api.get(f"/v1/runs/claude-code-{session_id}").status_code == 404
