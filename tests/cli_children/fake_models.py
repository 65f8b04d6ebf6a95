"""Scripted fake model servers on 127.0.0.1, for recording what agent CLIs print.

Stdlib only. ``start(scenario, flavour)`` returns a running ``FakeServer``.

Flavours (wire formats served):

* ``anthropic``        - Messages API, ``POST /v1/messages`` (SSE when ``stream``)
                         and ``POST /v1/messages/count_tokens``.
* ``openai-responses`` - Responses API, ``POST /v1/responses`` or ``/responses`` (SSE).
* ``openai-chat``      - Chat Completions, ``POST /v1/chat/completions`` (SSE when ``stream``).

Any other request gets a harmless ``200 {}`` (and is logged).

A scenario is a script: per *lane*, a list of steps served in order, one step per
model request.  Requests are sorted into lanes:

* ``sub``  - the first user message carries ``SUBAGENT_MARKER`` (a subagent's run),
* ``side`` - a model request that declares no tools (title / topic helpers),
* ``main`` - everything else (the agent loop itself).

A lane that runs out repeats its last step when that step says ``repeat``,
otherwise it answers ``EXHAUSTED_TEXT`` so that an unexpected extra request shows
up in the fixture instead of hanging the CLI.  The ``side`` lane, unless scripted,
always answers ``SIDE_TEXT``.

Tool calls are written abstractly (``shell`` / ``subagent``) and resolved against
the tool names the request itself declares, so one script fits every CLI.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

SUBAGENT_MARKER = "SUBAGENT-TASK-7f3a"
SIDE_TEXT = "Fake side reply"
EXHAUSTED_TEXT = "(fake server: script exhausted)"
MODEL = "fake-model"
NameInput: TypeAlias = "tuple[str, dict[str, Any]] | None"


# --------------------------------------------------------------------------- steps


def text(t: str, stop: str = "end", **kw: Any) -> dict[str, Any]:
    """A text reply. stop: 'end' | 'max_tokens'."""
    return {"text": t, "stop": stop, **kw}


def tool(kind: str = "shell", text_before: str = "", command: str = "echo hi", prompt: str = "",
         background: bool | None = None, cut: bool = False, **kw: Any) -> dict[str, Any]:
    """A reply that calls a tool (optionally after some text).

    cut: the output-token ceiling cuts the call: its input is sent only up to its middle (not
    valid JSON) and the reply stops with max_tokens / finish_reason length."""
    spec: dict[str, Any] = {"kind": kind, "command": command, "prompt": prompt}
    if background is not None:
        spec["run_in_background"] = background
    if cut:
        return {"text": text_before, "stop": "max_tokens", "tool": spec, "cut": True, **kw}
    return {"text": text_before, "stop": "tool", "tool": spec, **kw}


def empty(stop: str = "end", **kw: Any) -> dict[str, Any]:
    """A reply with no content at all."""
    return {"text": "", "stop": stop, **kw}


def status(code: int, repeat: bool = True) -> dict[str, Any]:
    """An HTTP error answer."""
    return {"status": code, "repeat": repeat}


def sse_error(text_before: str, repeat: bool = True, kind: str = "error") -> dict[str, Any]:
    """A stream that starts text, then an error event instead of the end.

    kind (Responses API only): "error" sends an ``error`` event, "failed" a ``response.failed``.
    """
    return {"text": text_before, "sse_error": kind, "repeat": repeat}


SHELL_CMD = "echo hi"
#: A command that says it started (the file ``waiting`` in the CLI's working directory) and then
#: waits for the test to create ``go`` there: a child that is busy for as long as a test needs.
WAIT_CMD = "touch waiting; while [ ! -e go ]; do sleep 0.05; done; echo hi"

SCENARIOS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "completion": {"main": [text("Hello from the fake model. The answer is 42.")]},
    # every later request is cut again (repeat), to see where the CLI gives up
    "max_tokens_partial": {"main": [text("This answer is cut off at the token ceil", stop="max_tokens", repeat=True)]},
    "tool_then_empty_max_tokens": {"main": [tool("shell", command=SHELL_CMD), empty("max_tokens", repeat=True)]},
    "tool_then_empty_end_turn": {
        "main": [tool("shell", text_before="Let me run a command first.", command=SHELL_CMD),
                 empty("end", repeat=True)]
    },
    "continued_after_ceiling": {
        "main": [
            text("Part one of a long answer, cut", stop="max_tokens"),
            text(" part two, cut again", stop="max_tokens"),
            text(" and part three, which completes the answer."),
        ]
    },
    "http_500_mid_run": {
        "main": [tool("shell", text_before="Running a command before the outage.", command=SHELL_CMD), status(500)]
    },
    "http_529_mid_run": {
        "main": [tool("shell", text_before="Running a command before the overload.", command=SHELL_CMD), status(529)]
    },
    "sse_error_mid_stream": {"main": [sse_error("The stream starts and then")]},
    "sse_failed_mid_stream": {"main": [sse_error("The stream starts and then", kind="failed")]},
    "subagent": {
        "main": [
            tool("subagent", text_before="I will delegate this.", prompt=f"{SUBAGENT_MARKER}: reply with a greeting."),
            text("The subagent replied: hello from the subagent."),
            # Claude Code runs Agent in the background by default and starts one more
            # turn when the completion notification arrives
            text("Noted: the background subagent has finished."),
        ],
        "sub": [text("Hello from the subagent.")],
    },
    "subagent_foreground": {
        "main": [
            tool("subagent", text_before="I will delegate this.", prompt=f"{SUBAGENT_MARKER}: reply with a greeting.",
                 background=False),
            text("The subagent replied: hello from the subagent."),
        ],
        "sub": [text("Hello from the subagent.")],
    },
    # not recorded: tests/test_cli_run_restart.py restarts lastword while the command waits
    "waits_for_the_test": {
        "main": [tool("shell", text_before="Running the long command.", command=WAIT_CMD),
                 text("The command printed hi.")]
    },
    "codex_shell_then_final": {
        "main": [tool("shell", command=SHELL_CMD), text("The command printed hi.")]
    },
    # a call cut by the output ceiling (its input half sent), then an empty reply ending normally;
    # recorded for Claude Code also with --max-turns 1 (tool_cut_max_turns, see record.py)
    "tool_cut_at_ceiling": {
        "main": [tool("shell", text_before="I will check with a command.", command=SHELL_CMD, cut=True),
                 empty("end", repeat=True)]
    },
    "tool_cut_max_turns": {
        "main": [tool("shell", text_before="I will check with a command.", command=SHELL_CMD, cut=True),
                 empty("end", repeat=True)]
    },
    # a call cut by the ceiling, then another step that answers
    "tool_cut_then_step": {
        "main": [tool("shell", text_before="I will check with a command.", command=SHELL_CMD, cut=True),
                 text("The check could not run; the answer is 42.")]
    },
    # text and a command in one response, then an answer
    "text_then_command": {
        "main": [tool("shell", text_before="Let me read the file.", command=SHELL_CMD),
                 text("The file says hi.")]
    },
    # two CLI invocations on one session (the second resumes the first): one step each
    "resume": {"main": [text("First turn: the answer is 42."), text("Second turn: still 42.")]},
    "codex_retry_repeat": {
        "main": [
            text("This message is sent twice.", disconnect_after_item=True),
            text("This message is sent twice."),
        ]
    },
    # A foreground subagent whose reply is split by the output-token ceiling: the CLI asks it to
    # go on and hands the parent only the last part as the tool result.
    "subagent_split": {
        "main": [
            tool("subagent", text_before="I will delegate this.", prompt=f"{SUBAGENT_MARKER}: write the report.",
                 background=False),
            text("The subagent's report is in."),
        ],
        "sub": [
            text("Report part one: the first half of the findings, cut", stop="max_tokens"),
            text(" and report part two, which completes the findings."),
        ],
    },
    # A foreground subagent cut at the ceiling every time: the CLI gives up after its retries.
    "subagent_cut": {
        "main": [
            tool("subagent", text_before="I will delegate this.", prompt=f"{SUBAGENT_MARKER}: write the report.",
                 background=False),
            text("The subagent's report was cut."),
        ],
        "sub": [text("Report cut at the ceiling, every time", stop="max_tokens", repeat=True)],
    },
}


# ------------------------------------------------------------------ tool resolution


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if "function" in t and isinstance(t["function"], dict):
            names.append(t["function"].get("name", ""))
        elif "name" in t:
            names.append(t["name"])
        elif "type" in t:
            names.append(t["type"])
    return names


def resolve_tool(spec: dict[str, Any], body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(name, input) for an abstract tool call, given the tools this request declares."""
    names = _tool_names(body)
    if spec["kind"] == "subagent":
        for cand in ("Agent", "Task", "task"):
            if cand in names:
                args = {"description": "Greet", "prompt": spec["prompt"]}
                args["subagent_type"] = "general" if cand == "task" else "general-purpose"
                if "run_in_background" in spec:
                    args["run_in_background"] = spec["run_in_background"]
                return cand, args
        raise LookupError(f"no subagent tool among {names}")
    cmd = spec["command"]
    if "Bash" in names:  # Claude Code
        return "Bash", {"command": cmd, "description": "Print hi"}
    if "bash" in names:  # opencode
        return "bash", {"command": cmd, "description": "Print hi"}
    if "exec_command" in names:  # codex (unified exec)
        return "exec_command", {"cmd": cmd}
    if "shell_command" in names:  # codex
        return "shell_command", {"command": cmd}
    if "shell" in names:  # codex (older)
        return "shell", {"command": ["bash", "-lc", cmd]}
    raise LookupError(f"no shell tool among {names}")


# ---------------------------------------------------------------------- the server


def _first_user_text(body: dict[str, Any]) -> str:
    msgs = body.get("messages")
    if msgs is None:
        msgs = body.get("input")
    if isinstance(msgs, str):
        return msgs
    for m in msgs or []:
        if isinstance(m, dict) and m.get("role") == "user":
            return json.dumps(m.get("content"))
    return ""


class FakeServer:
    def __init__(self, scenario: str | dict[str, Any], flavour: str):
        self.flavour = flavour
        self.scenario = scenario if isinstance(scenario, str) else "custom"
        script = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        self.lanes = {k: list(v) for k, v in script.items()}
        self.pos = {k: 0 for k in self.lanes}
        self.requests: list[dict[str, Any]] = []  # JSON bodies of model requests
        self.log: list[dict[str, Any]] = []  # every request: method, path, lane, step, body
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def model_requests(self) -> int:
        return len(self.requests)

    def next_step(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if SUBAGENT_MARKER in _first_user_text(body):
            lane = "sub"
        elif not _tool_names(body):
            lane = "side"
        else:
            lane = "main"
        with self.lock:
            steps = self.lanes.get(lane)
            if not steps:
                return lane, text(SIDE_TEXT if lane == "side" else EXHAUSTED_TEXT)
            i = self.pos[lane]
            if i < len(steps):
                self.pos[lane] = i + 1
                return lane, steps[i]
            last = steps[-1]
            return lane, (last if last.get("repeat") else text(EXHAUSTED_TEXT))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "FakeServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start(scenario: str | dict[str, Any], flavour: str) -> FakeServer:
    if flavour not in ("anthropic", "openai-responses", "openai-chat"):
        raise ValueError(flavour)
    return FakeServer(scenario, flavour)


def _make_handler(srv: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        # -- plumbing
        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                raw = self._read_chunked()
            try:
                return json.loads(raw) if raw else {}
            except ValueError:
                return {"_raw": raw[:2000].decode("utf-8", "replace")}

        def _read_chunked(self) -> bytes:
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()

        def _json(self, code: int, obj: Any, headers: dict[str, Any] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _sse_start(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        def _sse(self, event: str | None, data: Any) -> None:
            chunk = ""
            if event:
                chunk += f"event: {event}\n"
            chunk += "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n"
            self.wfile.write(chunk.encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            srv.log.append({"method": "GET", "path": self.path})
            if self.path.rstrip("/").endswith("/models"):
                return self._json(200, {"object": "list", "data": [], "models": []})
            self._json(200, {})

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            body = self._body()
            path = self.path.split("?")[0]
            entry = {"method": "POST", "path": self.path, "t": time.time()}
            srv.log.append(entry)
            if path.endswith("/messages/count_tokens"):
                return self._json(200, {"input_tokens": len(json.dumps(body)) // 4})
            kind = None
            if path.endswith("/messages"):
                kind = "anthropic"
            elif path.endswith("/responses"):
                kind = "openai-responses"
            elif path.endswith("/chat/completions"):
                kind = "openai-chat"
            if kind is None or not isinstance(body, dict):
                entry["body"] = body
                return self._json(200, {})
            lane, step = srv.next_step(body)
            with srv.lock:
                srv.requests.append(body)
            entry.update(lane=lane, step=step, stream=bool(body.get("stream")))
            if "status" in step:
                return self._error(kind, step["status"])
            try:
                name_input = resolve_tool(step["tool"], body) if step.get("tool") else None
            except LookupError as e:
                entry["resolve_error"] = str(e)
                name_input = None
                step = text(f"(fake server: {e})")
            try:
                if kind == "anthropic":
                    self._anthropic(body, step, name_input)
                elif kind == "openai-responses":
                    self._responses(body, step, name_input)
                else:
                    self._chat(body, step, name_input)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _error(self, kind: str, code: int) -> None:
            if kind == "anthropic":
                etype = "overloaded_error" if code == 529 else "api_error"
                msg = "Overloaded" if code == 529 else "Internal server error"
                return self._json(code, {"type": "error", "error": {"type": etype, "message": msg}},
                                  {"x-should-retry": "true"})
            return self._json(code, {"error": {"message": "Internal server error", "type": "server_error",
                                               "code": "server_error", "param": None}})

        # -- Anthropic Messages
        def _anthropic(self, body: dict[str, Any], step: dict[str, Any], name_input: NameInput) -> None:
            mid = "msg_fake_" + uuid.uuid4().hex[:20]
            in_tok = len(json.dumps(body)) // 4
            blocks: list[dict[str, Any]] = []
            if step.get("text"):
                blocks.append({"type": "text", "text": step["text"]})
            if name_input:
                blocks.append({"type": "tool_use", "id": "toolu_fake_" + uuid.uuid4().hex[:16],
                               "name": name_input[0], "input": name_input[1]})
            stop = {"end": "end_turn", "max_tokens": "max_tokens", "tool": "tool_use"}.get(str(step.get("stop")), "end_turn")
            out_tok = max(1, len(step.get("text", "")) // 4 + (10 if name_input else 0))
            usage = {"input_tokens": in_tok, "output_tokens": out_tok,
                     "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
            if not body.get("stream"):
                if step.get("sse_error"):  # a non-streaming retry of a broken stream: overloaded
                    return self._error("anthropic", 529)
                return self._json(200, {"id": mid, "type": "message", "role": "assistant", "model": body.get("model", MODEL),
                                        "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage})
            self._sse_start()
            self._sse("message_start", {"type": "message_start", "message": {
                "id": mid, "type": "message", "role": "assistant", "model": body.get("model", MODEL), "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}})
            self._sse("ping", {"type": "ping"})
            for i, b in enumerate(blocks):
                if b["type"] == "text":
                    self._sse("content_block_start", {"type": "content_block_start", "index": i,
                                                      "content_block": {"type": "text", "text": ""}})
                    words = b["text"].split(" ")
                    for j, w in enumerate(words):
                        piece = w if j == 0 else " " + w
                        self._sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                          "delta": {"type": "text_delta", "text": piece}})
                    if step.get("sse_error"):
                        self._sse("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                       "message": "Overloaded"}})
                        return
                else:
                    self._sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                        "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                    js = json.dumps(b["input"])
                    if step.get("cut"):
                        js = js[:len(js) // 2]
                    for k in range(0, len(js), 20):
                        self._sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                            "type": "input_json_delta", "partial_json": js[k:k + 20]}})
                self._sse("content_block_stop", {"type": "content_block_stop", "index": i})
            self._sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                        "usage": {"output_tokens": out_tok}})
            self._sse("message_stop", {"type": "message_stop"})

        # -- OpenAI Responses
        def _responses(self, body: dict[str, Any], step: dict[str, Any], name_input: NameInput) -> None:
            rid = "resp_fake_" + uuid.uuid4().hex[:20]
            model = body.get("model", MODEL)
            in_tok = len(json.dumps(body)) // 4
            out_tok = max(1, len(step.get("text", "")) // 4)
            usage = {"input_tokens": in_tok, "input_tokens_details": {"cached_tokens": 0},
                     "output_tokens": out_tok, "output_tokens_details": {"reasoning_tokens": 0},
                     "total_tokens": in_tok + out_tok}
            base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
                    "status": "in_progress", "output": [], "usage": None, "error": None, "incomplete_details": None}
            self._sse_start()
            seq = iter(range(10**6))

            def ev(obj: dict[str, Any]) -> None:
                obj["sequence_number"] = next(seq)
                self._sse(obj["type"], obj)

            ev({"type": "response.created", "response": dict(base)})
            ev({"type": "response.in_progress", "response": dict(base)})
            output: list[dict[str, Any]] = []
            idx = 0
            if step.get("text"):
                iid = "msg_fake_" + uuid.uuid4().hex[:20]
                item = {"type": "message", "id": iid, "role": "assistant", "status": "in_progress", "content": []}
                ev({"type": "response.output_item.added", "output_index": idx, "item": item})
                ev({"type": "response.content_part.added", "item_id": iid, "output_index": idx, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []}})
                words = step["text"].split(" ")
                for j, w in enumerate(words):
                    ev({"type": "response.output_text.delta", "item_id": iid, "output_index": idx,
                        "content_index": 0, "delta": w if j == 0 else " " + w})
                if step.get("sse_error") == "failed":
                    ev({"type": "response.failed", "response": {**base, "status": "failed", "error": {
                        "code": "server_error", "message": "The server had an error while processing your request."}}})
                    return
                if step.get("sse_error"):
                    ev({"type": "error", "code": "server_error", "message": "The server had an error while "
                        "processing your request.", "param": None})
                    return
                part = {"type": "output_text", "text": step["text"], "annotations": []}
                ev({"type": "response.output_text.done", "item_id": iid, "output_index": idx, "content_index": 0,
                    "text": step["text"]})
                ev({"type": "response.content_part.done", "item_id": iid, "output_index": idx, "content_index": 0,
                    "part": part})
                done = {**item, "status": "completed" if step.get("stop") != "max_tokens" else "incomplete",
                        "content": [part]}
                ev({"type": "response.output_item.done", "output_index": idx, "item": done})
                output.append(done)
                idx += 1
                if step.get("disconnect_after_item"):
                    return  # connection closes without response.completed
            if name_input:
                fid = "fc_fake_" + uuid.uuid4().hex[:20]
                call = {"type": "function_call", "id": fid, "call_id": "call_fake_" + uuid.uuid4().hex[:16],
                        "name": name_input[0], "arguments": "", "status": "in_progress"}
                ev({"type": "response.output_item.added", "output_index": idx, "item": call})
                args = json.dumps(name_input[1])
                ev({"type": "response.function_call_arguments.delta", "item_id": fid, "output_index": idx,
                    "delta": args})
                ev({"type": "response.function_call_arguments.done", "item_id": fid, "output_index": idx,
                    "arguments": args})
                call = {**call, "arguments": args, "status": "completed"}
                ev({"type": "response.output_item.done", "output_index": idx, "item": call})
                output.append(call)
            if step.get("stop") == "max_tokens":
                ev({"type": "response.incomplete", "response": {**base, "status": "incomplete", "output": output,
                    "usage": usage, "incomplete_details": {"reason": "max_output_tokens"}}})
            else:
                ev({"type": "response.completed", "response": {**base, "status": "completed", "output": output,
                    "usage": usage}})

        # -- OpenAI Chat Completions
        def _chat(self, body: dict[str, Any], step: dict[str, Any], name_input: NameInput) -> None:
            cid = "chatcmpl-fake" + uuid.uuid4().hex[:20]
            model = body.get("model", MODEL)
            finish = {"end": "stop", "max_tokens": "length", "tool": "tool_calls"}.get(str(step.get("stop")), "stop")
            in_tok = len(json.dumps(body)) // 4
            out_tok = max(1, len(step.get("text", "")) // 4)
            usage = {"prompt_tokens": in_tok, "completion_tokens": out_tok, "total_tokens": in_tok + out_tok}
            call = None
            if name_input:
                arguments = json.dumps(name_input[1])
                call = {"id": "call_fake_" + uuid.uuid4().hex[:16], "type": "function",
                        "function": {"name": name_input[0],
                                     "arguments": arguments[:len(arguments) // 2] if step.get("cut") else arguments}}
            if not body.get("stream"):
                if step.get("sse_error"):
                    return self._error("openai-chat", 500)
                msg: dict[str, Any] = {"role": "assistant", "content": step.get("text") or None}
                if call:
                    msg["tool_calls"] = [call]
                return self._json(200, {"id": cid, "object": "chat.completion", "created": int(time.time()),
                                        "model": model, "choices": [{"index": 0, "message": msg,
                                                                     "finish_reason": finish}], "usage": usage})
            self._sse_start()

            def chunk(delta: dict[str, Any], fr: str | None = None) -> None:
                self._sse(None, {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                                 "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]})

            chunk({"role": "assistant", "content": ""})
            if step.get("text"):
                words = step["text"].split(" ")
                for j, w in enumerate(words):
                    chunk({"content": w if j == 0 else " " + w})
                if step.get("sse_error"):
                    self._sse(None, {"error": {"message": "The server had an error while processing your request.",
                                               "type": "server_error", "code": "server_error"}})
                    return
            if call:
                chunk({"tool_calls": [{"index": 0, **call}]})
            chunk({}, finish)
            self._sse(None, {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                             "model": model, "choices": [], "usage": usage})
            self._sse(None, "[DONE]")

    return Handler
