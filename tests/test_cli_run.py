"""``lastword run -- COMMAND`` against a real server process and a real child process.

The child is a small script that echoes what the test writes to its standard input (``lastword
run`` passes its own standard input through) and exits with status N at a line ``exit N``: it
prints Codex lines when the test says so, never on a timer, so nothing here races a sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lastword.cli.run import format_of
from tests.servers import ServerProcess
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[1]
WAIT = 30.0

ECHO_CHILD = """\
import sys

for line in sys.stdin:
    if line.startswith("exit "):
        sys.exit(int(line.split()[1]))
    sys.stdout.write(line)
    sys.stdout.flush()
"""


def codex(line: dict[str, Any]) -> str:
    return json.dumps(line) + "\n"


THREAD = codex({"type": "thread.started", "thread_id": "t1"})
TURN = codex({"type": "turn.started"})
COMPLETED = codex({"type": "turn.completed", "usage": {"input_tokens": 5, "cached_input_tokens": 0, "output_tokens": 2}})


def message(number: int, text: str) -> str:
    return codex({"type": "item.completed", "item": {"id": f"item_{number}", "type": "agent_message", "text": text}})


def failed(text: str) -> str:
    return codex({"type": "turn.failed", "error": {"message": text}})


def server_env(database: Path) -> dict[str, str]:
    return {"LASTWORD_DATABASE_URL": f"sqlite:///{database}", "LASTWORD_LOG_LEVEL": "error"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(server_env(tmp_path_factory.mktemp("run") / "lastword.db"), cwd=REPO).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def child(tmp_path: Path) -> list[str]:
    """The echoing child's command line."""
    script = tmp_path / "child.py"
    script.write_text(ECHO_CHILD)
    return [sys.executable, str(script)]


def lastword_run(url: str, *options: str, command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "lastword.cli", "run", "--url", url, *options, "--", *command],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_through(url: str, child: list[str], lines: str, *options: str) -> subprocess.CompletedProcess[bytes]:
    """``lastword run`` with the whole input at once; its status, output and error."""
    process = lastword_run(url, "--format", "codex", *options, command=child)
    out, err = process.communicate(lines.encode(), timeout=WAIT)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def feed(process: subprocess.Popen[bytes], *lines: str) -> None:
    assert process.stdin is not None
    process.stdin.write("".join(lines).encode())
    process.stdin.flush()


def logged(url: str, run_id: str) -> list[dict[str, Any]]:
    """Every event of the run's log."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = httpx.get(f"{url}/v1/runs/{run_id}/events", params={"after": after, "limit": 1000}, timeout=10)
        if page.status_code == 404:
            return []
        page.raise_for_status()
        body = page.json()
        events.extend(entry["event"] for entry in body["events"])
        if not body["events"]:
            return events
        after = body["nextAfter"]


def messages(url: str, run_id: str) -> list[str]:
    """The text of every stored assistant message with content, in log order (Codex's usage is
    stored as a message without content of its own)."""
    return ["".join(block.get("text", "") for block in event["message"]["content"])
            for event in logged(url, run_id) if event["type"] == "assistant/message" and event["message"]["content"]]


def wait_for_streamed(url: str, run_id: str, text: str) -> None:
    """Until ``text`` is stored as a chunk: Codex's agent message is streamed when printed and
    stored as a message at the next line (a call starting there is the same response's)."""
    def streamed() -> list[str]:
        return [event["delta"]["text"] for event in logged(url, run_id) if event["type"] == "assistant/chunk"]
    wait_until(lambda: text in streamed(), lambda: f"{text!r} is streamed (found {streamed()})", within=WAIT,
               every=0.02)


def wait_for_messages(url: str, run_id: str, count: int) -> None:
    wait_until(lambda: len(messages(url, run_id)) >= count,
               lambda: f"{count} messages are stored (found {messages(url, run_id)})", within=WAIT, every=0.02)


def test_prints_the_selected_output_and_exits_0(server: ServerProcess, child: list[str]) -> None:
    """The child's last message is printed once its turn.completed ends the turn; exit status 0."""
    done = run_through(server.url, child, THREAD + TURN + message(0, "draft") + message(1, "the answer") + COMPLETED
                       + "exit 0\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "the answer\n"


def test_json_prints_the_subagent_result_of_the_run_it_created(server: ServerProcess, child: list[str]) -> None:
    """--json prints the SubagentResult; the run has the given id, parent and the command's name as agent."""
    parent = httpx.post(f"{server.url}/v1/runs", json={"agent": "orchestrator"}).json()["runId"]
    run_id = f"{parent}-child"
    done = run_through(server.url, child, THREAD + TURN + message(0, "the answer") + COMPLETED + "exit 0\n",
                       "--json", "--run-id", run_id, "--parent", parent)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["runId"] == run_id
    assert result["stopReason"] == "completed" and result["isError"] is False
    assert result["output"] == [{"type": "text", "text": "the answer"}]
    assert result["usage"]["outputTokens"] == 2
    run = httpx.get(f"{server.url}/v1/runs/{run_id}").json()
    assert run["parentRunId"] == parent
    assert run["agent"] == os.path.basename(sys.executable)


@pytest.mark.parametrize(("lines", "status", "stop_reason", "error"), [
    pytest.param(failed("the model is overloaded") + "exit 0\n", 1, "error", "the model is overloaded",
                 id="turn.failed"),
    pytest.param(failed("response cut at max_output_tokens") + "exit 0\n", 3, "max_tokens", None,
                 id="turn.failed-max_output_tokens"),
])
def test_the_exit_status_is_the_stop_reasons(
    server: ServerProcess, child: list[str], lines: str, status: int, stop_reason: str, error: str | None,
) -> None:
    """A terminal line ends the turn with its stop reason; without one, the child's exit status decides."""
    done = run_through(server.url, child, THREAD + TURN + message(0, "partial") + lines, "--json")
    assert done.returncode == status, done.stderr
    result = json.loads(done.stdout)
    assert result["stopReason"] == stop_reason
    assert result["output"] == [{"type": "text", "text": "partial"}]
    if error is not None:
        assert error in result["error"]["message"]
        assert f"ended {stop_reason}" in done.stderr.decode()


@pytest.mark.parametrize("status", [0, 3])
def test_a_child_that_exits_without_a_terminal_line_ends_the_turn_error(
    server: ServerProcess, child: list[str], status: int,
) -> None:
    """Whatever its exit status, 0 included, a child whose output never said the turn ended ends
    it error (no_terminal_event), the output selected so far kept; exit status 1."""
    done = run_through(server.url, child, THREAD + TURN + message(0, "partial") + f"exit {status}\n", "--json")
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["stopReason"] == "error"
    assert result["error"]["type"] == "no_terminal_event"
    assert f"exited with status {status}" in result["error"]["message"]
    assert result["output"] == [{"type": "text", "text": "partial"}]
    assert "ended error" in done.stderr.decode()


def test_format_auto_goes_by_the_commands_name(server: ServerProcess, tmp_path: Path) -> None:
    """--format auto reads a command named codex as Codex; a command it does not know is a usage error (2)."""
    named = tmp_path / "codex"
    named.write_text(f"#!{sys.executable}\n" + ECHO_CHILD)
    named.chmod(0o755)
    process = lastword_run(server.url, "--json", command=[str(named), "exec", "--json"])
    out, err = process.communicate((THREAD + TURN + message(0, "by name") + COMPLETED + "exit 0\n").encode(),
                                   timeout=WAIT)
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["output"] == [{"type": "text", "text": "by name"}]
    assert httpx.get(f"{server.url}/v1/runs/{result['runId']}").json()["agent"] == "codex"

    unknown = lastword_run(server.url, command=[sys.executable, "-c", "pass"])
    _, err = unknown.communicate(timeout=WAIT)
    assert unknown.returncode == 2
    assert b"--format" in err


def test_a_command_that_cannot_be_run_is_126_and_one_not_found_127(server: ServerProcess, tmp_path: Path) -> None:
    """As a shell says it: a file that exists but is not executable is 126 ("cannot be run", its
    run ended error naming why), a path to nothing is 127 ("not found", no run made)."""
    script = tmp_path / "codex"
    script.write_text(f"#!{sys.executable}\n" + ECHO_CHILD)
    script.chmod(0o644)
    process = lastword_run(server.url, "--format", "codex", "--run-id", "not-executable", command=[str(script)])
    _, err = process.communicate(timeout=WAIT)
    assert process.returncode == 126, err
    assert b"command not found" not in err and b"Permission denied" in err
    result = httpx.get(f"{server.url}/v1/runs/not-executable/result").json()
    assert result["stopReason"] == "error" and "could not be started" in result["error"]["message"]

    missing = lastword_run(server.url, "--format", "codex", "--run-id", "not-found", command=[str(tmp_path / "none")])
    _, err = missing.communicate(timeout=WAIT)
    assert missing.returncode == 127, err
    assert b"command not found" in err
    assert httpx.get(f"{server.url}/v1/runs/not-found").status_code == 404


@pytest.mark.parametrize(("path", "fmt"), [("/usr/local/bin/claude", "claude-code"), ("codex", "codex"),
                                           ("/opt/bin/opencode", "opencode")])
def test_format_auto_knows_each_cli_by_its_command_name(path: str, fmt: str) -> None:
    """Each CLI ingest format is picked by its command's file name; one asked for is kept."""
    assert format_of([path, "run"], "auto") == fmt
    assert format_of([path, "run"], "codex") == "codex"


def test_a_child_killed_mid_line_keeps_the_reply_it_was_giving(server: ServerProcess, tmp_path: Path) -> None:
    """Claude Code killed while printing a line (a recorded session cut inside its third line):
    the reply its earlier lines assembled is the turn's output, the turn ends error (SPEC §16a)."""
    recorded = (REPO / "tests" / "cli_children" / "fixtures" / "claude-code" / "tool_then_empty_end_turn.ndjson")
    lines = recorded.read_bytes().splitlines(keepends=True)
    printed = tmp_path / "printed"
    printed.write_bytes(b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    killed = [sys.executable, "-c", f"import os, sys; sys.stdout.buffer.write(open({str(printed)!r}, 'rb').read()); "
                                     "sys.stdout.flush(); os.kill(os.getpid(), 9)"]
    process = lastword_run(server.url, "--format", "claude-code", "--json", command=killed)
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 1, err
    answer = json.loads(out)
    assert answer["stopReason"] == "error"
    assert answer["output"] == [{"type": "text", "text": json.loads(lines[1])["message"]["content"][0]["text"]}]


def test_sigterm_is_passed_to_the_child_and_ends_the_turn_cancelled(server: ServerProcess, child: list[str]) -> None:
    """SIGTERM reaches the child (which waits on its input and would never exit by itself); the
    turn ends cancelled with what it printed before; exit status 130."""
    run_id = f"sigterm-{time.time_ns()}"
    process = lastword_run(server.url, "--format", "codex", "--run-id", run_id, command=child)
    try:
        feed(process, THREAD, TURN, message(0, "before the signal"))
        wait_for_streamed(server.url, run_id, "before the signal")
        process.send_signal(signal.SIGTERM)
        # Its standard input stays open: the child can only end by the signal passed on to it.
        assert process.wait(timeout=WAIT) == 130
        assert process.stdout is not None
        assert process.stdout.read().decode() == "before the signal\n"
    finally:
        process.kill()
        process.communicate()
    result = httpx.get(f"{server.url}/v1/runs/{run_id}/result").json()
    assert result["stopReason"] == "cancelled"


#: A child that notes each SIGINT/SIGTERM it is sent (its pid and the signal, in the file named by
#: its argument) and goes on: the CLIs that finish their turn whatever they are sent.
STUBBORN_CHILD = """\
import os
import signal
import sys


def note(signum, frame):
    with open(sys.argv[1], "a") as marker:
        marker.write(f"{os.getpid()} {signum}\\n")


signal.signal(signal.SIGTERM, note)
signal.signal(signal.SIGINT, note)
with open(sys.argv[1] + ".pid", "w") as started:
    started.write(str(os.getpid()))
""" + ECHO_CHILD


@pytest.fixture
def stubborn(tmp_path: Path) -> tuple[list[str], Path]:
    """The stubborn child's command line and the file it notes its signals in."""
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN_CHILD)
    marker = tmp_path / "signals"
    return [sys.executable, str(script), str(marker)], marker


def signals_noted(marker: Path) -> list[tuple[int, int]]:
    """The (pid, signal) pairs the stubborn child noted, once it noted one."""
    if not marker.exists():
        return []
    return [(int(pid), int(signum)) for pid, signum in (line.split() for line in marker.read_text().splitlines())]


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_child_that_finishes_after_the_signal_still_ends_the_turn_cancelled(
    server: ServerProcess, stubborn: tuple[list[str], Path], signum: signal.Signals,
) -> None:
    """The child is sent the signal, ignores it and prints a completed turn: the turn ends
    cancelled all the same, with what it printed before the signal; exit status 130."""
    command, marker = stubborn
    run_id = f"stubborn-{signum.name}-{time.time_ns()}"
    process = lastword_run(server.url, "--format", "codex", "--run-id", run_id, "--json", command=command)
    try:
        feed(process, THREAD, TURN, message(0, "before the signal"))
        wait_for_streamed(server.url, run_id, "before the signal")
        process.send_signal(signum)
        wait_until(lambda: signals_noted(marker), "the child is sent the signal", within=WAIT)
        assert signals_noted(marker)[0][1] == signum
        feed(process, message(1, "after the signal"), COMPLETED, "exit 0\n")
        out, err = process.communicate(timeout=WAIT)
    finally:
        process.kill()
    assert process.returncode == 130, err
    result = json.loads(out)
    assert result["stopReason"] == "cancelled"
    assert result["output"] == [{"type": "text", "text": "before the signal"}]


def test_a_child_that_outlives_the_signal_is_killed_after_kill_after(
    server: ServerProcess, stubborn: tuple[list[str], Path],
) -> None:
    """A child that ignores SIGTERM and would never exit is sent SIGKILL once --kill-after ran
    out; the turn ends cancelled, exit status 130."""
    command, marker = stubborn
    run_id = f"kill-after-{time.time_ns()}"
    process = lastword_run(server.url, "--format", "codex", "--run-id", run_id, "--kill-after", "0.2",
                           command=command)
    try:
        feed(process, THREAD, TURN, message(0, "before the signal"))
        wait_for_streamed(server.url, run_id, "before the signal")
        process.send_signal(signal.SIGTERM)
        # Its standard input stays open: only SIGKILL ends it.
        assert process.wait(timeout=WAIT) == 130
        assert process.stdout is not None
        assert process.stdout.read().decode() == "before the signal\n"
    finally:
        process.kill()
        process.communicate()
    assert not is_alive(int(Path(f"{marker}.pid").read_text()))
    assert httpx.get(f"{server.url}/v1/runs/{run_id}/result").json()["stopReason"] == "cancelled"


def test_a_server_restart_while_the_child_runs_loses_and_repeats_no_line(tmp_path: Path, child: list[str]) -> None:
    """The server is killed after some lines and started again while the child prints more: every
    line's event is stored exactly once, in the order printed."""
    server = ServerProcess(server_env(tmp_path / "lastword.db"), cwd=REPO).start()
    try:
        run_id = f"restart-{time.time_ns()}"
        process = lastword_run(server.url, "--format", "codex", "--run-id", run_id, command=child)
        feed(process, THREAD, TURN, message(0, "zero"), message(1, "one"))
        wait_for_streamed(server.url, run_id, "one")
        wait_for_streamed(server.url, run_id, "one")
        server.kill()
        feed(process, message(2, "two"), message(3, "three"))  # printed while the server is down
        server.start()
        feed(process, message(4, "four"), COMPLETED, "exit 0\n")
        out, err = process.communicate(timeout=WAIT)
        assert process.returncode == 0, err
        assert out.decode() == "four\n"
        assert messages(server.url, run_id) == ["zero", "one", "two", "three", "four"]
        ids = [event["eventId"] for event in logged(server.url, run_id) if "eventId" in event]
        assert len(ids) == len(set(ids))
    finally:
        server.stop()


def test_the_output_of_an_exited_child_is_offered_for_retry_seconds(tmp_path: Path, child: list[str]) -> None:
    """The service goes away for good while the child runs: once the child exited, its output is
    sent again for --retry-seconds, then lastword run gives up with 8 (unreachable)."""
    server = ServerProcess(server_env(tmp_path / "lastword.db"), cwd=REPO).start()
    try:
        run_id = f"gone-{time.time_ns()}"
        process = lastword_run(server.url, "--format", "codex", "--run-id", run_id, "--retry-seconds", "0.5",
                               command=child)
        feed(process, THREAD, TURN, message(0, "zero"))
        wait_for_streamed(server.url, run_id, "zero")
        server.kill()
        feed(process, message(1, "one"), COMPLETED, "exit 0\n")
        _, err = process.communicate(timeout=WAIT)  # the default, 120 s, would outlast this
        assert process.returncode == 8, err
        assert b"cannot reach the service" in err
    finally:
        server.stop()


def test_a_subagent_line_after_its_child_ended_never_ends_the_parents_delivery(server: ServerProcess,
                                                                               child: list[str]) -> None:
    """Issue 39: a subagent's line printed after its child run ended is refused for the child
    (409 ``run_ended`` naming ``{runId}.{id}``); that is not the parent's end. The parent's turn
    goes on to the CLI's own end, and ``lastword run`` answers it (was: exit 7, nothing on
    stderr, the parent left running)."""
    recorded = (REPO / "tests/cli_children/fixtures/claude-code-transcript/subagent_split/stdout.ndjson").read_text()
    lines = [json.loads(line) for line in recorded.splitlines()]
    at = next(index for index, line in enumerate(lines) if line["type"] == "user" and line.get("tool_use_result"))
    late = {**next(line for line in lines if line.get("parent_tool_use_id")), "uuid": "late-subagent-line"}
    lines.insert(at + 1, late)  # after the tool result that ended the child
    stdin = "".join(json.dumps(line) + "\n" for line in lines) + "exit 0\n"
    done = run_through(server.url, child, stdin, "--format", "claude-code", "--run-id", "issue-39-late")
    assert done.returncode == 0 and b"ended" not in done.stderr, done.stderr
    assert done.stdout == b"The subagent's report is in.\n"
    kept = [event for event in logged(server.url, "issue-39-late") if event["type"] == "x-claude-code-late-subagent"]
    assert len(kept) == 1 and "late-subagent-line" in kept[0]["eventId"], kept
    (subagent,) = httpx.get(f"{server.url}/v1/runs/issue-39-late/children", timeout=10).json()["children"]
    assert (subagent["status"], subagent["stopReason"]) == ("ended", "completed"), subagent
