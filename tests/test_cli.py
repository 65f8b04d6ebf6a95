"""The lastword command against a real server: push, result, tail, --help, errors, restarts."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword import __version__
from lastword.cli.commands import main as cli_main

from tests.servers import ServerProcess, free_port, threaded_server

REPO = Path(__file__).resolve().parents[1]

COMMANDS = ["serve", "demo", "tail", "result", "push", "audit", "run"]


def lastword(*args: str, stdin: bytes = b"", timeout: float = 30,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``lastword ARGS`` in a process of its own; ``env``: variables added to this one's."""
    return subprocess.run([sys.executable, "-m", "lastword.cli", *args], input=stdin, capture_output=True,
                          timeout=timeout, check=False, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_what_it_does_with_an_example(command: str) -> None:
    """Every subcommand's --help describes it and shows an example."""
    assert "example" in help_text([command])


def help_text(command: list[str], columns: str | None = None) -> str:
    """What ``lastword COMMAND --help`` prints, in a terminal ``columns`` wide.

    In this process: argparse prints the same text there as in a process of its own (it reads the
    width from ``COLUMNS``), and two dozen interpreters started only to print help cost the suite
    half a minute. ``test_version`` runs the real entry point."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        if columns is not None:
            patch.setenv("COLUMNS", columns)
        with pytest.raises(SystemExit) as exited:
            cli_main([*command, "--help"])
    assert exited.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("columns", ["60", "100"])
def test_help_wraps_at_spaces_and_shows_each_example_on_a_line(columns: str) -> None:
    """--help never splits a word at its hyphen (scenario names, options stay whole) and shows each
    example on a line of its own, never two joined by ` | ` as if piped."""
    from lastword.cli.demo import SCENARIOS

    for command in [[], *([name] for name in COMMANDS)]:
        shown = help_text(command, columns)
        joined = [line for line in shown.splitlines() if line.count("lastword ") > 1]
        assert joined == [], command
        broken = [line for line in shown.splitlines() if re.search(r"\w-$", line)]
        assert broken == [], command
        if command == ["demo"]:
            assert all(name in shown for name in SCENARIOS), shown
    examples = {"tail": ["lastword tail 01J9Z3...", "lastword tail --parent parent-run-id"],
                "push": ["lastword push RUN < events.ndjson", "echo hello | lastword push RUN --text"]}
    for name, lines in examples.items():
        shown = help_text([name], columns)
        assert all(line in [row.strip() for row in shown.splitlines()] for line in lines), shown


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
    assert "texts" not in result
    texts = json.loads(lastword("result", run, "--url", base_url, "--texts").stdout)
    assert texts["texts"] == ["answer"] and texts["output"] == result["output"]


def test_push_text_keeps_characters_split_across_reads(api: httpx.Client, base_url: str) -> None:
    """push --text sends stdin as chunk text, whole multi-byte characters included."""
    run = api.post("/v1/runs", json={}).json()["runId"]
    text = "prix: 5 € — " * 7000  # longer than one 64 KiB read, so a '€' straddles reads
    pushed = lastword("push", run, "--text", "--url", base_url, stdin=text.encode())
    assert pushed.returncode == 0, pushed.stderr
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "cancelled"}).raise_for_status()
    assert api.get(f"/v1/runs/{run}/result").json()["output"] == [{"type": "text", "text": text}]


def test_push_takes_a_line_holding_an_array_of_events(api: httpx.Client, base_url: str) -> None:
    """A line may be what POST /events takes: one event, or an array of them."""
    run = api.post("/v1/runs", json={}).json()["runId"]
    line = json.dumps([{"type": "assistant/chunk", "delta": {"type": "text", "text": "x"}},
                       {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "both"}]}}])
    pushed = lastword("push", run, "--url", base_url, stdin=line.encode())
    assert pushed.returncode == 0, pushed.stderr
    assert b"accepted 2" in pushed.stdout


@pytest.mark.parametrize(("line", "said"), [("\"text\"", "a string"), ("3", "a number"), ("null", "null"),
                                            ("[1, 2]", "an array holding something other than objects")])
def test_push_refuses_a_line_that_is_no_event_in_one_line(api: httpx.Client, base_url: str, line: str,
                                                           said: str) -> None:
    run = api.post("/v1/runs", json={}).json()["runId"]
    pushed = lastword("push", run, "--url", base_url, stdin=line.encode())
    assert pushed.returncode == 2
    assert pushed.stderr.decode().strip() == (
        f"lastword push: line 1: a line is one event (a JSON object) or an array of them, not {said}")
    assert api.get(f"/v1/runs/{run}/result").json()["output"] == []


def test_push_text_refuses_what_is_not_utf8_in_one_line(api: httpx.Client, base_url: str) -> None:
    run = api.post("/v1/runs", json={}).json()["runId"]
    pushed = lastword("push", run, "--text", "--url", base_url, stdin="ok ".encode() + b"\xff\xfe tail")
    assert pushed.returncode == 2
    error = pushed.stderr.decode().strip()
    assert error.startswith("lastword push: standard input is not UTF-8 text (byte 3)") and "\n" not in error


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


def test_tail_waits_for_a_run_that_does_not_exist_yet(api: httpx.Client, base_url: str) -> None:
    """tail of a run not created yet waits for it (saying so on stderr), then prints the run
    from its start: the text pushed before it looked again, and the end."""
    run = f"later-{time.monotonic_ns()}"
    process = subprocess.Popen([sys.executable, "-m", "lastword.cli", "tail", run, "--url", base_url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stderr is not None
    assert process.stderr.readline().decode() == f"lastword tail: waiting for run {run} to be created\n"
    api.post("/v1/runs", json={"runId": run, "agent": "late"}).raise_for_status()
    for piece in ("Hello, ", "world"):
        api.post(f"/v1/runs/{run}/chunks", json={"text": piece}).raise_for_status()
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "max_tokens"}).raise_for_status()
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert f"[{run}] start turn 1 agent=late" in out.decode()
    assert "Hello, world" in out.decode()
    assert f"[{run}] end turn 1: max_tokens" in out.decode()


def test_tail_of_an_ended_run_prints_it_from_its_start(api: httpx.Client, base_url: str) -> None:
    """tail of a run that has already ended prints its text and its end, not only that it ended."""
    run = api.post("/v1/runs", json={"agent": "done"}).json()["runId"]
    api.post(f"/v1/runs/{run}/chunks", json={"text": "Hello, world"}).raise_for_status()
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "completed"}).raise_for_status()
    shown = lastword("tail", run, "--url", base_url)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode() == f"[{run}] start turn 1 agent=done\nHello, world\n[{run}] end turn 1: completed\n"


def test_tail_of_a_running_turn_prints_what_it_said_so_far(api: httpx.Client, base_url: str) -> None:
    """tail of a run whose second turn is under way prints that turn from its start (its text
    so far, then live), not the first turn's and not only a status line."""
    run = api.post("/v1/runs", json={"agent": "again", "mode": "continuable"}).json()["runId"]
    api.post(f"/v1/runs/{run}/chunks", json={"text": "first turn"}).raise_for_status()
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "completed"}).raise_for_status()
    api.post(f"/v1/runs/{run}/turns", json={}).raise_for_status()
    api.post(f"/v1/runs/{run}/chunks", json={"text": "so far, "}).raise_for_status()
    process = subprocess.Popen([sys.executable, "-m", "lastword.cli", "tail", run, "--url", base_url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline().decode() == f"[{run}] start turn 2 agent=again\n"
    assert process.stdout.read(len("so far, ")) == b"so far, "
    api.post(f"/v1/runs/{run}/chunks", json={"text": "then live"}).raise_for_status()
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "completed"}).raise_for_status()
    api.post(f"/v1/runs/{run}/close").raise_for_status()
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.decode() == f"then live\n[{run}] end turn 2: completed\n[{run}] closed\n", out


def test_version() -> None:
    """--version prints the package version."""
    shown = lastword("--version")
    assert shown.returncode == 0
    assert shown.stdout.decode().strip() == f"lastword {__version__}"


def one_line_error(process: subprocess.CompletedProcess[bytes]) -> str:
    """The command's stderr, checked to be one line and no traceback."""
    err = process.stderr.decode()
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_refusals_are_one_line_and_exit_7(api: httpx.Client, base_url: str) -> None:
    """A 404 (result of an unknown run) or a 409 (push into an ended turn) is one line on
    stderr naming the status and code, and exit status 7 (the table of lastword.cli.exits)."""
    for command in (["result", "no-such-run"], ["result", "no-such-run", "--tool"], ["push", "no-such-run", "--text"]):
        refused = lastword(*command, "--url", base_url, stdin=b"x")
        assert refused.returncode == 7, command
        assert one_line_error(refused).startswith(f"lastword {command[0]}: 404 run_not_found"), command
    run = api.post("/v1/runs", json={}).json()["runId"]
    api.post(f"/v1/runs/{run}/end", json={"stopReason": "cancelled"}).raise_for_status()
    event = json.dumps({"type": "assistant/chunk", "delta": {"type": "text", "text": "late"}}).encode()
    for command, stdin in ((["push", run], event), (["push", run, "--text"], b"late")):
        refused = lastword(*command, "--url", base_url, stdin=stdin)
        assert refused.returncode == 7, command
        assert one_line_error(refused).startswith(f"lastword push: 409 run_ended"), command


@pytest.mark.parametrize("command", [["result", "r1"], ["result", "r1", "--wait", "5"], ["tail"], ["tail", "r1"],
                                     ["push", "r1"], ["push", "r1", "--text"]])
def test_a_service_that_is_not_there_is_one_line_and_exit_8(command: list[str]) -> None:
    """Connection refused: one line saying the service cannot be reached, exit status 8."""
    url = f"http://127.0.0.1:{free_port()}"
    refused = lastword(*command, "--url", url, stdin=b"{}")
    assert refused.returncode == 8
    assert one_line_error(refused).startswith(f"lastword {command[0]}: cannot reach the service at {url}")


@pytest.fixture
def guarded_url(make_settings: Any) -> Iterator[str]:
    with threaded_server(make_settings(ingest_token="in-secret", read_token="read-secret")) as url:
        yield url


#: Every command that talks to a service, with what it needs besides --url and --token.
REMOTE = [["demo", "completed"], ["audit"], ["result", "r1"], ["tail", "r1"], ["push", "r1", "--text"],
          ["run", "--format", "claude-code", "--", sys.executable, "-c", "pass"]]


def remote(command: list[str], *options: str) -> list[str]:
    """``command`` with ``options`` added, before the ``--`` that starts a child's command line."""
    at = command.index("--") if "--" in command else len(command)
    return [*command[:at], *options, *command[at:]]


@pytest.mark.parametrize("command", REMOTE, ids=lambda command: command[0])
def test_every_command_says_a_refusal_in_one_style(guarded_url: str, command: list[str]) -> None:
    """A refusal is `lastword <cmd>: <status> <code>: <detail>` on one line, whichever command met
    it (demo and audit too), and exit status 7, lastword run's as every other command's."""
    refused = lastword(*remote(command, "--url", guarded_url, "--token", "wrong"), stdin=b"x")
    assert refused.returncode == 7, refused.stderr
    line = one_line_error(refused)
    assert re.fullmatch(rf"lastword {command[0]}: 401 invalid_token: \S.*", line), line
    assert "--token" in line, line  # the one thing the user can do about it


@pytest.mark.parametrize("command", REMOTE, ids=lambda command: command[0])
def test_a_url_without_scheme_is_a_usage_error(command: list[str]) -> None:
    """--url 127.0.0.1:8000 (no scheme) is a bad command line (exit 2) naming the form to use, not
    a service that cannot be reached."""
    refused = lastword(*remote(command, "--url", "127.0.0.1:8000"), stdin=b"x")
    assert refused.returncode == 2, refused.stderr
    err = refused.stderr.decode()
    assert "Traceback" not in err
    assert "http://127.0.0.1:8000" in err, err


def test_the_other_failures_name_their_command(api: httpx.Client, base_url: str) -> None:
    """A line of push's input that is not JSON (exit 2) and a tool result still running (exit 9)
    are one line that starts `lastword <cmd>:` too."""
    run = api.post("/v1/runs", json={}).json()["runId"]
    bad = lastword("push", run, "--url", base_url, stdin=b"{}\nnot json\n")
    assert bad.returncode == 2
    assert one_line_error(bad).startswith("lastword push: line 2: not JSON"), bad.stderr
    running = lastword("result", run, "--tool", "--url", base_url)
    assert running.returncode == 9
    assert one_line_error(running) == "lastword result: the turn is still running"


@pytest.mark.parametrize("mode", [[], ["--text"]])
def test_push_with_nothing_on_stdin_says_nothing_was_sent(mode: list[str]) -> None:
    """`lastword push RUN </dev/null` sends nothing (the service is not even asked) and says so on
    stderr instead of a bare "accepted 0" that reads as if the run had taken it."""
    quiet = lastword("push", "r1", *mode, "--url", f"http://127.0.0.1:{free_port()}", stdin=b"")
    assert quiet.returncode == 0, quiet.stderr
    assert "nothing read from standard input, nothing sent" in one_line_error(quiet)


def test_serve_on_a_port_in_use_says_to_choose_another(tmp_path: Path) -> None:
    """A port another process listens on: one line naming the port and --port, exit 2, and the
    store is not opened (no database file appears)."""
    database = tmp_path / "lastword.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = subprocess.run([sys.executable, "-m", "lastword.cli", "serve", "--port", str(port)],
                                 capture_output=True, timeout=60,
                                 env={**os.environ, "LASTWORD_DATABASE_URL": f"sqlite:///{database}"})
    assert refused.returncode == 2, refused.stderr
    line = one_line_error(refused)
    assert line == (f"lastword serve: port {port} on 127.0.0.1 is already in use (another lastword?): "
                    "choose another with --port or LASTWORD_PORT"), line
    assert not database.exists()


def test_a_url_ending_in_v1_says_to_leave_it_out(base_url: str) -> None:
    """--url http://…/v1 is a usage error that says to give the service's base URL, without /v1."""
    refused = lastword("result", "r1", "--url", f"{base_url}/v1")
    assert refused.returncode == 2, refused.stderr
    assert f"without /v1 ({base_url})" in refused.stderr.decode(), refused.stderr


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}", "LASTWORD_LOG_LEVEL": "warning",
           "LASTWORD_KEEPALIVE_SECONDS": "1"}
    process = ServerProcess(env, cwd=REPO).start()
    try:
        yield process
    finally:
        process.kill()


#: Longer than a client's default reconnect budget (5 retries, at most about 11 s of pauses):
#: a tail must wait out a restart however long it takes.
LONG_OUTAGE_SECONDS = 12.0


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "kill", "kill-long"])
def test_tail_resumes_across_a_server_restart(server_process: ServerProcess, how: str) -> None:
    """tail RUN keeps following when the server is stopped (SIGTERM, or kill -9, briefly or for
    longer than a client's retries last) and started again: what follows is printed once, then
    the end."""
    with httpx.Client(base_url=server_process.url, timeout=30) as api:
        run = api.post("/v1/runs", json={"agent": "restarted"}).json()["runId"]
        api.post(f"/v1/runs/{run}/chunks", json={"text": "before "}).raise_for_status()
    process = subprocess.Popen([sys.executable, "-m", "lastword.cli", "tail", run, "--url", server_process.url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        assert run in process.stdout.readline().decode()  # the turn's start line: the stream is open
        with httpx.Client(base_url=server_process.url, timeout=30) as api:
            api.post(f"/v1/runs/{run}/chunks", json={"text": "during "}).raise_for_status()
        # What the turn said before the tail began, then live: all had before the stop.
        assert process.stdout.read(len("before during ")) == b"before during "
        server_process.stop() if how == "stop" else server_process.kill()
        if how == "kill-long":
            time.sleep(LONG_OUTAGE_SECONDS)  # the outage's length is the point, not a synchronisation
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        server_process.start()
        with httpx.Client(base_url=server_process.url, timeout=30) as api:
            api.post(f"/v1/runs/{run}/chunks", json={"text": "after"}).raise_for_status()
            api.post(f"/v1/runs/{run}/end", json={"stopReason": "completed"}).raise_for_status()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "Traceback" not in err.decode()
    assert out.decode() == f"after\n[{run}] end turn 1: completed\n"


def sse_subscribers(url: str) -> float:
    metrics = httpx.get(url + "/metrics", timeout=10).text
    return float(re.search(r"^lastword_sse_subscribers (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]


@pytest.mark.slow
def test_firehose_tail_hears_an_end_said_while_the_server_restarted(server_process: ServerProcess) -> None:
    """`lastword tail` (every run, no id) that has heard nothing yet when the server drains
    resumes where the server said the stream stood (its server/reconnect's lastEventId), not
    from whatever is new when it comes back: a run that starts and ends while the server is away
    (here through another server on the same database) is printed, then what follows."""
    process = subprocess.Popen([sys.executable, "-m", "lastword.cli", "tail", "--url", server_process.url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(120, process.kill)  # a missed line must fail the test, not hang it
    watchdog.start()
    try:
        deadline = time.monotonic() + 60
        while sse_subscribers(server_process.url) < 1:  # the tail's stream is open
            assert time.monotonic() < deadline and process.poll() is None, "tail did not connect"
            time.sleep(0.05)
        server_process.stop()
        other = ServerProcess({"LASTWORD_DATABASE_URL": server_process.env["LASTWORD_DATABASE_URL"],
                               "LASTWORD_LOG_LEVEL": "warning"}, cwd=REPO).start()
        with httpx.Client(base_url=other.url, timeout=30) as api:
            away = api.post("/v1/runs", json={"agent": "away"}).json()["runId"]
            api.post(f"/v1/runs/{away}/end", json={"stopReason": "completed"}).raise_for_status()
        other.stop()
        server_process.start()
        with httpx.Client(base_url=server_process.url, timeout=30) as api:
            marker = api.post("/v1/runs", json={"agent": "back"}).json()["runId"]
            api.post(f"/v1/runs/{marker}/end", json={"stopReason": "completed"}).raise_for_status()
        assert process.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith(f"[{marker}] end"):
            line = process.stdout.readline().decode()
            assert line, f"tail ended ({process.wait()}): {lines}"
            if line.strip():
                lines.append(line.strip())
    finally:
        watchdog.cancel()
        process.kill()
        process.communicate()
    assert lines == [f"[{away}] start turn 1 agent=away", f"[{away}] end turn 1: completed",
                     f"[{marker}] start turn 1 agent=back", f"[{marker}] end turn 1: completed"], lines


def test_a_reader_that_goes_away_ends_the_command_quietly(base_url: str) -> None:
    """`lastword audit | head -1`: the pipe closes under the command; no traceback, status 0."""
    for _ in range(3):
        httpx.post(base_url + "/v1/runs", json={}).raise_for_status()
    # `true` has exited long before the command writes: its first write meets a closed pipe.
    done = subprocess.run(f"{sys.executable} -m lastword.cli audit --url {base_url} | true",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr[-2000:]
