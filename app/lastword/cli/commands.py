"""The ``lastword`` command.

``serve`` runs the service; ``tail``, ``result`` and ``push`` talk to a running one through the
client library (``--url``, or ``LASTWORD_URL``; ``--token``, or ``LASTWORD_TOKEN``); ``audit``
reports what its runs' transcripts had to repair; ``demo`` plays a scripted child; ``run``
runs an agent CLI as a child and keeps its output (:mod:`lastword.cli.run`).

A refusal by the service, a service that cannot be reached, a bad command line or bad input is
one line on stderr that says what to do, and an exit status from the one table every command
shares (:mod:`lastword.cli.exits`, shown at the end of each ``--help``), never a traceback: the
command is used from scripts. Every command says a refusal the same way,
``lastword <cmd>: <status> <code>: <detail>``, whether it met it through the client or, as
``demo`` and ``audit`` do, through plain httpx. A ``--url`` without its scheme, or one that ends
in the API's ``/v1``, is a bad command line (2), said before anything is sent.
"""

from __future__ import annotations

import argparse
import codecs
import errno
import gc
import io
import json
import logging
import os
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any, NoReturn, cast
from urllib.parse import urlsplit, urlunsplit

import httpx

from lastword import __version__
from lastword.cli import exits
from lastword.client.core import LastwordAPIError, LastwordClient, StreamMessage
from lastword.client.retry import RETRY_SECONDS
from lastword.schemas import Run
from lastword.settings import Settings

REFUSED, USAGE, UNREACHABLE, INTERRUPTED = exits.REFUSED, exits.USAGE, exits.UNREACHABLE, exits.INTERRUPTED
#: Requests are retried a few times only: a command says soon that the service is not there.
CLI_RETRIES = 2
#: A ``tail`` that was following a stream waits out a server restart of any length.
TAIL_RECONNECTS = 1_000_000
#: How often ``tail`` looks again for a run that does not exist yet.
TAIL_POLL_SECONDS = 0.25


def _url_host(host: str) -> str:
    """``host`` as it goes in a URL a person opens: an IPv6 address in brackets, and a wildcard
    address as the loopback one, which a browser on this machine reaches."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _serve(args: argparse.Namespace) -> int:
    from lastword.http.logs import configure_logging
    from lastword.server import LastwordServer, give_big_blocks_back, uvicorn_config

    give_big_blocks_back()
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("workers", args.workers))
                 if v is not None}
    try:
        settings = Settings(**overrides)  # validated, as the variables are ('auto' workers)
    except ValueError as error:
        print(f"lastword serve: {error}", file=sys.stderr)
        return USAGE
    refusal = _unbindable(settings.host, settings.port)
    if refusal:
        print(f"lastword serve: {refusal}", file=sys.stderr)
        return USAGE
    configure_logging(settings.log_level)
    if settings.workers > 1:
        from lastword.cli.workers import serve_workers

        _say_where(settings, f" ({settings.workers} workers)")
        return serve_workers(settings)
    server = LastwordServer(uvicorn_config(settings))
    _say_where(settings)
    # Everything imported and built so far lives as long as the process: moving it out of the
    # collector's sight makes each collection (frequent under ingest) scan only new objects.
    gc.collect()
    gc.freeze()
    # uvicorn handles SIGTERM (drains, then closes the store) and afterwards raises the signal
    # again with the handler it found in place. With the default one the process would die of
    # it (status 143 in a container, "exited with an error" to an orchestrator); with this one
    # a shutdown that went well ends with status 0. A SIGTERM before uvicorn took over also
    # ends the process cleanly: nothing has been served yet.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    server.run()
    return 0


def _say_where(settings: Settings, how: str = "") -> None:
    """Where the service, its dashboard and its docs are: one line of the log (every line of
    which is JSON, for a log collector), at info, the default level."""
    base = f"http://{_url_host(settings.host)}:{settings.port}"
    logging.getLogger("lastword").info("serving %s%s (dashboard %s/dashboard, API docs %s/docs)",
                                       base, how, base, base)


def _unbindable(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, as a line that says what to do, or None.

    Tried before the app starts (uvicorn would open the store, then log a bare errno and exit);
    the probe socket is closed at once, with the same SO_REUSEADDR uvicorn sets, so a port left
    in TIME_WAIT by a server that just stopped is not mistaken for a port in use."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as error:
        return f"cannot listen on {host!r}: {error.strerror or error} (set --host or LASTWORD_HOST)"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return (f"port {port} on {host} is already in use (another lastword?): "
                        f"choose another with --port or LASTWORD_PORT")
            if error.errno == errno.EACCES:
                return f"not allowed to listen on port {port}: choose one above 1023 with --port or LASTWORD_PORT"
            return f"cannot listen on {host}:{port}: {error.strerror or error} (set --host/--port)"
    return None


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _demo(args: argparse.Namespace) -> int:
    from lastword.cli.demo import SCENARIOS, run_scenario

    if args.scenario not in SCENARIOS:
        print(f"lastword demo: unknown scenario {args.scenario!r}; choose one of: {', '.join(SCENARIOS)}", file=sys.stderr)
        return USAGE
    run_id = run_scenario(args.scenario, args.url, run_id=args.run_id, token=args.token)
    print(run_id)
    return 0


def _audit(args: argparse.Namespace) -> int:

    from lastword.cli.audit import audit_runs, report_lines

    with LastwordClient(args.url, token=args.token, retries=CLI_RETRIES, timeout=60) as client:
        audits = audit_runs(client, since_hours=args.since, now=time.time())
    if args.json:
        print(json.dumps([
            {"runId": a.run_id, "agent": a.agent, "status": a.status,
             "formats": {name: {"omitted": dict(t.omitted), "inserted": dict(t.inserted)}
                         for name, t in a.formats.items()}}
            for a in audits
        ], indent=2))
        return 0
    for line in report_lines(audits, args.since):
        print(line)
    return 0


def _client(args: argparse.Namespace, reconnects: int | None = None) -> LastwordClient:
    retry_seconds = getattr(args, "retry_seconds", RETRY_SECONDS)  # ``run``'s --retry-seconds
    return LastwordClient(args.url, token=args.token, retries=CLI_RETRIES, reconnects=reconnects,
                          retry_seconds=retry_seconds)


def _tail(args: argparse.Namespace) -> int:
    out = sys.stdout
    with _client(args, reconnects=TAIL_RECONNECTS) as client:
        if args.run is None:
            messages = client.stream_all(parent_run_id=args.parent)
        else:
            # A run that was not there at first, or that has already ended, is printed from its
            # start: nothing it said before this tail saw it is missed. A running one from its
            # open turn's start (what it has said so far, then live); an idle one: its snapshot,
            # then live.
            found = _wait_for_run(client, args.run)
            after = None if found is not None and found.status == "idle" else 0
            from_turn = found.turn if found is not None and found.status == "running" else 0
            messages = _from_turn(client.stream(args.run, include_chunks=True, after=after), from_turn)
        try:
            for message in messages:
                data = message.data
                if message.event == "assistant/chunk":
                    delta = data.get("delta", {})
                    if delta.get("type") == "text":
                        out.write(delta.get("text", ""))
                        out.flush()
                elif message.event == "run/snapshot":
                    result = data["result"]
                    out.write(f"[{data['run']['runId']}] turn {result['turn']} {result['status']}\n")
                elif message.event == "subagent/start":
                    out.write(f"[{data['runId']}] start turn {data['turn']} agent={data.get('agent', '-')}\n")
                elif message.event == "subagent/end":
                    out.write(f"\n[{data['runId']}] end turn {data['turn']}: {data['stopReason']}\n")
                elif message.event == "run/closed":
                    out.write(f"[{data['runId']}] closed\n")
                out.flush()
        except KeyboardInterrupt:
            return INTERRUPTED
    return 0


def _from_turn(messages: Iterator[StreamMessage], turn: int) -> Iterator[StreamMessage]:
    """``messages`` from the ``subagent/start`` of ``turn`` on (replayed from the run's start:
    the earlier turns are passed over, not printed)."""
    started = turn <= 1
    for message in messages:
        started = started or (message.event == "subagent/start" and message.data.get("turn", 0) >= turn)
        if started:
            yield message


def _wait_for_run(client: LastwordClient, run_id: str) -> Run | None:
    """Return once the run exists: the run if it did at the first look, None if it had to be
    waited for (a tail may start before the run is created, as in docs/RUNNING.md's two-replica block)."""
    waited = False
    while True:
        try:
            run = client.get_run(run_id)
            return None if waited else run
        except LastwordAPIError as error:
            if error.code != "run_not_found":
                raise
        if not waited:
            print(f"lastword tail: waiting for run {run_id} to be created", file=sys.stderr, flush=True)
            waited = True
        time.sleep(TAIL_POLL_SECONDS)


def _result(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.tool:
            tool = client.tool_result(args.run, wait=args.wait or 0.0)
            if tool is None:
                print("lastword result: the turn is still running", file=sys.stderr)
                return exits.STILL_RUNNING
            print(tool.model_dump_json(indent=2))
            return 0
        if args.wait is not None:
            result = client.wait_result(args.run, timeout=args.wait, texts=args.texts)
        else:
            result = client.result(args.run, texts=args.texts)
        print(result.model_dump_json(indent=2, exclude_none=True))
    return 0


def _push(args: argparse.Namespace) -> int:
    stdin = cast(io.BufferedReader, sys.stdin.buffer)  # read1: whatever has arrived, up to the size
    with _client(args) as client:
        if args.text:
            # A character split between two reads is completed by the next one.
            decoder = codecs.getincrementaldecoder("utf-8")()
            total, sent, read = 0, False, 0
            try:
                while piece := stdin.read1(65536):
                    text = decoder.decode(piece)
                    read += len(piece)
                    if text:
                        total, sent = total + client.push_text(args.run, text).accepted, True
                tail = decoder.decode(b"", final=True)
            except UnicodeDecodeError as error:
                at = read + error.start  # within the piece that failed; ``read`` counts the pieces before it
                print(f"lastword push: standard input is not UTF-8 text (byte {at}); --text takes UTF-8. "
                      f"What came before it was sent (accepted {total}).", file=sys.stderr)
                return USAGE
            if tail:
                total, sent = total + client.push_text(args.run, tail).accepted, True
            if not sent:
                _nothing_read()
            print(f"accepted {total}")
            return 0
        batch: list[dict[str, Any]] = []
        accepted = duplicates = 0
        sent = False
        for number, line in enumerate(stdin, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as error:
                print(f"lastword push: line {number}: not JSON: {error}", file=sys.stderr)
                return USAGE
            events = value if isinstance(value, list) else [value]
            if not all(isinstance(event, dict) for event in events):
                print(f"lastword push: line {number}: a line is one event (a JSON object) or an array of them, "
                      f"not {_json_kind(value)}", file=sys.stderr)
                return USAGE
            batch.extend(events)
            if len(batch) >= args.batch:
                answer, sent = client.push_events(args.run, batch), True
                accepted, duplicates, batch = accepted + answer.accepted, duplicates + answer.duplicates, []
        if batch:
            answer, sent = client.push_events(args.run, batch), True
            accepted, duplicates = accepted + answer.accepted, duplicates + answer.duplicates
        if not sent:
            _nothing_read()
        print(f"accepted {accepted}, duplicates {duplicates}")
    return 0


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array holding something other than objects"
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "null")


def _nothing_read() -> None:
    # Nothing was sent, so the service was not asked: the run may not even exist.
    print("lastword push: nothing read from standard input, nothing sent "
          "(pipe in §4 events one JSON object a line, or text with --text)", file=sys.stderr)


def _hook(args: argparse.Namespace) -> int:
    from lastword.cli import hook

    return hook.main()


def _run(args: argparse.Namespace) -> int:
    from lastword.cli import run
    from lastword.cli.json_flags import with_json_flags

    command = args.child[1:] if args.child[:1] == ["--"] else args.child
    try:
        if not command:
            raise run.UsageError("give the command to run after --")
        format = run.format_of(command, args.format)
        command, changed = with_json_flags(command, format)
        if changed is not None:
            print(f"lastword run: {changed}", file=sys.stderr, flush=True)
        with _client(args) as client:
            outcome = run.run_child(client, command, format=format, run_id=args.run_id,
                                    parent_run_id=args.parent, agent=args.agent, lease_seconds=args.lease,
                                    kill_after=args.kill_after)
    except run.UsageError as error:
        print(f"lastword run: {error}", file=sys.stderr)
        return USAGE
    except run.CommandNotRun as error:
        print(f"lastword run: {error}", file=sys.stderr)
        return error.status
    run.print_outcome(outcome, args.json)
    return outcome.status


def _seconds(text: str) -> float:
    """A duration in seconds: a number, 0 or more."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return seconds


def _service_url(text: str) -> str:
    """``--url``: the service's base URL, with its scheme and without the API's ``/v1``."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        example = "http://" + text.split("://")[-1]
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL (e.g. {example})")
    path = parts.path.rstrip("/")
    if path == "/v1" or path.endswith("/v1"):
        base = urlunsplit((parts.scheme, parts.netloc, path.removesuffix("/v1"), "", ""))
        raise argparse.ArgumentTypeError(
            f"{text!r} names the API, not the service: give its base URL, without /v1 ({base})")
    return text


def _add_remote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", type=_service_url, default=os.environ.get("LASTWORD_URL", "http://127.0.0.1:8000"),
                        help="the service's base URL (default: $LASTWORD_URL or http://127.0.0.1:8000)")
    parser.add_argument("--token", default=os.environ.get("LASTWORD_TOKEN"),
                        help="bearer token (default: $LASTWORD_TOKEN)")


class _Help(argparse.HelpFormatter):
    """argparse's help, wrapped at spaces only (a scenario name such as ``max-tokens-partial`` or
    an option is never split at its hyphen), keeping a description's or epilog's own line breaks:
    a line indented there (an example) is shown as written, on a line of its own."""

    def _wrap(self, text: str, width: int, indent: str = "") -> list[str]:
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), max(width, 20), initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return self._wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        for line in text.splitlines():
            lines.extend([indent + line] if line.startswith(" ") else self._wrap(line, width, indent))
        return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, saying a bad command line in one line that points at the command's
    ``--help`` (argparse prints its whole usage block first). ``hook`` exits 0 even then: an agent
    CLI reads a hook's status 2 as "block", and a hook must never stop the session."""

    def error(self, message: str) -> NoReturn:
        status = exits.OK if self.prog == "lastword hook" else USAGE
        self.exit(status, f"{self.prog}: {message}; see {self.prog} --help\n")


def _examples(*commands: str) -> str:
    return ("example:" if len(commands) == 1 else "examples:") + "".join(f"\n  {command}" for command in commands)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lastword",
        formatter_class=_Help,
        description="Keeps a subagent's last word.",
        epilog=exits.epilog(),
    )
    parser.add_argument("--version", action="version", version=f"lastword {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)

    def add_command(name: str, *, epilog: str, **options: Any) -> argparse.ArgumentParser:
        """A subcommand, its help ending with its examples and the exit statuses it can end with."""
        return subparsers.add_parser(name, formatter_class=_Help, epilog=f"{epilog}\n{exits.epilog(name)}", **options)

    serve = add_command(
        "serve",
        help="run the service",
        description="Run the HTTP service. Configuration comes from LASTWORD_* variables.",
        epilog=_examples("LASTWORD_PORT=8080 lastword serve"),
    )
    serve.add_argument("--host", help="overrides LASTWORD_HOST")
    serve.add_argument("--port", type=int, help="overrides LASTWORD_PORT")
    serve.add_argument("--workers", help="processes serving the port, each a full replica; 'auto': one per core "
                                         "(overrides LASTWORD_WORKERS; default 1)")
    serve.set_defaults(handler=_serve)

    from lastword.cli.demo import SCENARIOS

    demo = add_command(
        "demo",
        help="play a scripted child run against a running service",
        description="Drive a running service over HTTP as a child runtime would; prints the run id.",
        epilog=_examples("lastword demo max-tokens-partial --url http://127.0.0.1:8000"),
    )
    demo.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO",
                      help="one of: " + ", ".join(sorted(SCENARIOS)))
    demo.add_argument("--run-id", help="play into this run (created if it does not exist) instead of a new one")
    _add_remote(demo)
    demo.set_defaults(handler=_demo)

    tail = add_command(
        "tail",
        help="follow one run or every run in the terminal",
        description="Follow a run: its start, its live text, its end with the stop reason. "
        "A RUN that does not exist yet is waited for; it, or one that has already ended, is printed "
        "from its start. "
        "Without RUN, follow every run's starts and ends.",
        epilog=_examples("lastword tail 01J9Z3...", "lastword tail --parent parent-run-id"),
    )
    tail.add_argument("run", nargs="?", metavar="RUN", help="the run to follow (default: all runs)")
    tail.add_argument("--parent", help="with no RUN: only children of this run")
    _add_remote(tail)
    tail.set_defaults(handler=_tail)

    result = add_command(
        "result",
        help="print a run's result (or its tool result)",
        description="Print the latest turn's SubagentResult as JSON; --wait blocks until the turn ends.",
        epilog=_examples("lastword result 01J9Z3... --wait 60"),
    )
    result.add_argument("run", metavar="RUN")
    result.add_argument("--wait", type=float, metavar="SECONDS", help="wait up to SECONDS for the turn to end")
    result.add_argument("--tool", action="store_true", help="print the parent model's tool result instead")
    result.add_argument("--texts", action="store_true",
                        help="add 'texts': every text the assistant wrote in the turn, in order (the output is unchanged)")
    _add_remote(result)
    result.set_defaults(handler=_result)

    push = add_command(
        "push",
        help="push NDJSON events or plain text from stdin into a run",
        description="Read NDJSON events (one per line) from stdin and append them in batches; "
        "with --text, append stdin as bare chunk text. Events get eventIds, so retries are safe.",
        epilog=_examples("lastword push RUN < events.ndjson", "echo hello | lastword push RUN --text"),
    )
    push.add_argument("run", metavar="RUN")
    push.add_argument("--text", action="store_true", help="stdin is plain text, not NDJSON events")
    push.add_argument("--batch", type=int, default=1000, help="events per request (default 1000)")
    _add_remote(push)
    push.set_defaults(handler=_push)

    audit = add_command(
        "audit",
        help="report what the provider-safe transcript had to omit or repair, per run",
        description="Read the runs created in the last HOURS through the API and report, per run and "
        "format, what GET /v1/runs/{id}/messages left out (empty messages, blank text, unsigned "
        "reasoning, unknown results, ...) and what it added (answers to interrupted tool calls, ...).",
        epilog=_examples("lastword audit --url http://127.0.0.1:8000 --since 6"),
    )
    audit.add_argument("--since", type=float, default=24.0, metavar="HOURS",
                       help="audit runs created in the last HOURS hours (default 24)")
    audit.add_argument("--json", action="store_true", help="print the counts as JSON instead")
    _add_remote(audit)
    audit.set_defaults(handler=_audit)

    hook = add_command(
        "hook",
        help="the command for an agent CLI's hooks: post its transcripts into the run",
        description="For Claude Code's hooks settings (SubagentStop, Stop): reads the hook's JSON on standard "
        "input and posts the transcripts it names (only the lines not yet sent) to the run $LASTWORD_RUN_ID, "
        "else claude-code-<session_id>, at $LASTWORD_URL. Always exits 0 within 5 s; problems go to "
        "standard error.",
        epilog=_examples("lastword hook claude-code < hook-input.json"),
    )
    hook.add_argument("cli", choices=["claude-code"], help="the agent CLI whose hook this is")
    hook.set_defaults(handler=_hook)

    from lastword.adapters import FORMATS_BY_COMMAND
    from lastword.cli.run import KILL_AFTER as RUN_KILL_AFTER
    from lastword.cli.run import RETRY_SECONDS as RUN_RETRY_SECONDS

    run = add_command(
        "run",
        help="run an agent CLI as a child and keep its last word",
        description="Create a run, start COMMAND, stream its standard output into the run as it is "
        "printed (sent again from the start after a lost connection: nothing is lost or stored twice), "
        "and when it exits print the selected output. Standard input and error are COMMAND's own; "
        "SIGINT and SIGTERM are passed on to it (SIGKILL after --kill-after) and end the turn cancelled; "
        "a COMMAND that exits without a line ending its turn ends it error (no_terminal_event). "
        "A known CLI run headless gets the flags that make it print JSON lines when they are missing "
        "(claude -p: --output-format stream-json --verbose; codex exec: --json; opencode run: --format json), "
        "said on stderr. Claude Code's own transcripts (session and subagents) are sent too, so its "
        "subagents' child runs hold their own messages with no hook.",
        epilog=_examples("lastword run --url http://127.0.0.1:8000 -- claude -p 'fix the tests'"),
    )
    run.add_argument("--run-id", help="the run's id (default: a new one)")
    run.add_argument("--parent", metavar="ID", help="the parent run's id")
    run.add_argument("--agent", metavar="NAME", help="the agent's name (default: COMMAND's file name)")
    run.add_argument("--format", choices=["auto", *FORMATS_BY_COMMAND.values()], default="auto",
                     help="COMMAND's output format; auto: by its name ("
                     + ", ".join(f"{name} is {fmt}" for name, fmt in FORMATS_BY_COMMAND.items()) + ")")
    run.add_argument("--json", action="store_true", help="print the whole SubagentResult as JSON")
    run.add_argument("--lease", type=_seconds, metavar="SECONDS",
                     help="the run's lease (default: the service's); a blank line keeps it while COMMAND is silent")
    run.add_argument("--retry-seconds", type=_seconds, default=RUN_RETRY_SECONDS, metavar="SECONDS",
                     help="how long COMMAND's output is sent again to a service that cannot take it "
                     f"(failures in a row; default {RUN_RETRY_SECONDS:g})")
    run.add_argument("--kill-after", type=_seconds, default=RUN_KILL_AFTER, metavar="SECONDS",
                     help="SIGKILL for COMMAND this long after a SIGINT or SIGTERM passed on to it "
                     f"(default {RUN_KILL_AFTER:g})")
    _add_remote(run)
    run.add_argument("child", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS ...]",
                     help="the child to run, after --")
    run.set_defaults(handler=_run)
    return parser


def _refusal(error: httpx.HTTPStatusError) -> LastwordAPIError:
    """A refusal met through plain httpx (``demo``, ``audit``) as the client would raise it."""
    try:
        problem = error.response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"detail": error.response.text.strip() or error.response.reason_phrase}
    return LastwordAPIError(error.response.status_code, problem)


def _problem_line(error: LastwordAPIError) -> str:
    detail = error.problem.get("detail") or error.problem.get("title") or ""
    if error.status == 401:
        # The one refusal a newcomer meets first, and the one only the command line can mend.
        detail = (detail + " " if detail else "") + "(give the token with --token or LASTWORD_TOKEN)"
    return f"{error.status} {error.code}" + (f": {detail}" if detail else "")


def _unreachable_line(url: str, error: httpx.TransportError) -> str:
    reason = str(error.__cause__ or error) or type(error).__name__
    return (f"cannot reach the service at {url}: {reason} "
            f"(start it with `lastword serve`, or give its address with --url or LASTWORD_URL)")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line, or exit 2 with one line; arguments the command does not take are said
    by that command (argparse would say them as the top level's, ``lastword: ...``)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return int(args.handler(args))
    except LastwordAPIError as error:
        print(f"lastword {args.command}: {_problem_line(error)}", file=sys.stderr)
        return REFUSED
    except httpx.HTTPStatusError as error:
        print(f"lastword {args.command}: {_problem_line(_refusal(error))}", file=sys.stderr)
        return REFUSED
    except httpx.TransportError as error:
        print(f"lastword {args.command}: {_unreachable_line(args.url, error)}", file=sys.stderr)
        return UNREACHABLE
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`lastword audit | head`): what it wanted it has; no traceback.
        # Python would complain again while flushing stdout at exit, so stdout goes to devnull.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
