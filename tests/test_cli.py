"""The lastword command against a real server: push, result, tail and --help."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

COMMANDS = ["serve", "demo", "tail", "result", "push", "audit"]


def lastword(*args: str, stdin: bytes = b"", timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "lastword.cli", *args], input=stdin, capture_output=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_what_it_does_with_an_example(command: str) -> None:
    """Every subcommand's --help describes it and shows an example."""
    shown = lastword(command, "--help")
    assert shown.returncode == 0
    assert "example" in shown.stdout.decode()


def test_push_events_then_result(api: httpx.Client, base_url: str) -> None:
    """push reads NDJSON events from stdin; result prints the selected output as JSON."""
    run = api.post("/v1/runs", json={"agent": "cli"}).json()["runId"]
    events = [
        {"type": "assistant/chunk", "delta": {"type": "text", "text": "x"}},
        {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "answer"}]}},
        {"type": "turn/end", "stopReason": "stop"},
    ]
    pushed = lastword("push", run, "--url", base_url, "--batch", "2",
                      stdin="\n".join(json.dumps(e) for e in events).encode())
    assert pushed.returncode == 0, pushed.stderr
    assert b"accepted 3" in pushed.stdout
    shown = lastword("result", run, "--url", base_url, "--wait", "5")
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    assert result["output"] == [{"type": "text", "text": "answer"}] and result["stopReason"] == "completed"
    tool = json.loads(lastword("result", run, "--url", base_url, "--tool").stdout)
    assert tool == {"content": [{"type": "text", "text": "answer"}], "isError": False}


def test_push_text_keeps_characters_split_across_reads(api: httpx.Client, base_url: str) -> None:
    """push --text sends stdin as chunk text, whole multi-byte characters included."""
    run = api.post("/v1/runs", json={}).json()["runId"]
    text = "prix: 5 € — " * 7000  # longer than one 64 KiB read, so a '€' straddles reads
    pushed = lastword("push", run, "--text", "--url", base_url, stdin=text.encode())
    assert pushed.returncode == 0, pushed.stderr
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "cancelled"}).raise_for_status()
    assert api.get(f"/v1/runs/{run}/result").json()["output"] == [{"type": "text", "text": text}]


def test_tail_follows_a_run_to_its_end(api: httpx.Client, base_url: str) -> None:
    """tail RUN prints the live text and the end with its stop reason, then exits."""
    run = api.post("/v1/runs", json={"agent": "tailed"}).json()["runId"]
    process = subprocess.Popen([sys.executable, "-m", "lastword.cli", "tail", run, "--url", base_url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    first = process.stdout.readline().decode()  # the snapshot line: the stream is open
    assert run in first
    for piece in ("Hello, ", "world"):
        api.post(f"/v1/runs/{run}/chunks", json={"text": piece}).raise_for_status()
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "max_tokens"}).raise_for_status()
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "Hello, world" in out.decode()
    assert f"[{run}] end turn 1: max_tokens" in out.decode()
