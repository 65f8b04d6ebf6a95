"""The codex and opencode CLI adapters' rules, line by line (SPEC §16; docs/ADAPTERS.md).

The fixture tests (``test_cli_adapters_codex_opencode.py``) pin what the real CLIs print. These
pin the rest of each adapter's contract on small hand-made bodies: every refusal names the line's
index, the field and what was expected; every event's ``eventId`` and ``source``; the usage and
the stop of each way a turn ends; the shapes of an MCP result Codex may print.
"""

from __future__ import annotations

from typing import Any

import pytest
from lastword.adapters.cli_base import CliAdapter, Made, NotTheFormat, StreamStop
from lastword.adapters.codex import CodexAdapter
from lastword.adapters.opencode import OpencodeAdapter

Event = dict[str, Any]

MESSAGE, RESULT, END = "assistant/message", "tool/result", "turn/end"


def translate(adapter: CliAdapter, lines: list[Event]) -> list[Event]:
    made: list[Made] = []
    for index, line in enumerate(lines):
        made.extend(adapter.feed(index, line))
    made.extend(adapter.finish())
    return [item.event for item in made]


def source(adapter: type[CliAdapter], *lines: Event) -> dict[str, Any]:
    return {"format": adapter.format, "events": list(lines)}


def refusal(adapter: CliAdapter, line: Event, index: int = 7) -> str:
    """The refusal of ``line`` fed as line ``index``; its index and field are checked too."""
    with pytest.raises(NotTheFormat) as refused:
        adapter.feed(index, line)
    assert refused.value.extra["index"] == index
    return str(refused.value)


# Codex.

THREAD: Event = {"type": "thread.started", "thread_id": "t"}


def completed(item: Event) -> Event:
    return {"type": "item.completed", "item": item}


def command(**fields: Any) -> Event:
    return completed({"id": "item_1", "type": "command_execution", "command": "ls", **fields})


def mcp(**fields: Any) -> Event:
    return completed({"id": "item_2", "type": "mcp_tool_call", "server": "docs", "tool": "find",
                      "arguments": {"q": "x"}, **fields})


def turn_completed(**usage: Any) -> Event:
    return {"type": "turn.completed", "usage": usage}


@pytest.mark.parametrize(("line", "field", "expected"), [
    ({"type": 3}, "type", "expected a string"),
    ({"type": "item.started"}, "item", "expected an object"),
    ({"type": "item.updated", "item": {"type": "command_execution"}}, "item.id", "expected a string"),
    ({"type": "thread.started", "thread_id": 5}, "thread_id", "expected a string"),
    ({"type": "error", "message": 3}, "message", "expected a string"),
    ({"type": "item.completed", "item": "x"}, "item", "expected an object"),
    (completed({"type": "agent_message", "text": "a"}), "item.id", "expected a string"),
    (completed({"id": "i", "text": "a"}), "item.type", "expected a string"),
    (completed({"id": "i", "type": "agent_message"}), "item.text", "expected a string"),
    (completed({"id": "i", "type": "reasoning", "text": 1}), "item.text", "expected a string"),
    (completed({"id": "i", "type": "command_execution"}), "item.command", "expected a string"),
    (command(aggregated_output=3), "item.aggregated_output", "expected a string"),
    (command(exit_code="1"), "item.exit_code", "expected an integer"),
    (command(exit_code=True), "item.exit_code", "expected an integer"),
    (command(exit_code=1.0), "item.exit_code", "expected an integer"),
    (completed({"id": "i", "type": "mcp_tool_call", "tool": "find"}), "item.server", "expected a string"),
    (completed({"id": "i", "type": "mcp_tool_call", "server": "docs"}), "item.tool", "expected a string"),
    ({"type": "turn.completed"}, "usage", "expected an object"),
    *[(turn_completed(**{key: value}), f"usage.{key}", "expected a non-negative integer")
      for key in ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens")
      for value in ("5", -1, True)],
    (turn_completed(input_tokens=3, cached_input_tokens=4), "usage.cached_input_tokens",
     "more cached tokens than input tokens"),
    ({"type": "turn.failed", "error": {"code": 1}}, "error.message", "expected a string"),
])
def test_codex_refusals(line: Event, field: str, expected: str) -> None:
    """A line Codex would not print is refused (422) by its index, field and what was expected."""
    assert refusal(CodexAdapter(), line) == f"line 7: {field}: {expected} (not a codex line)"


def test_codex_accepts_what_it_may_print() -> None:
    """Optional fields left out, a cache as large as the input and a null output are accepted."""
    events = translate(CodexAdapter(), [command(aggregated_output=None, exit_code=None),
                                        turn_completed(input_tokens=4, cached_input_tokens=4, output_tokens=1)])
    assert events[1]["content"] == "" and events[1]["isError"] is True
    assert events[2]["message"]["usage"] == {"inputTokens": 0, "outputTokens": 1, "cacheReadTokens": 4}


def test_codex_events_ids_and_sources() -> None:
    """Every event of a body: its eventId from the thread and item ids, its source lines."""
    lines: list[Event] = [
        THREAD,
        {"type": "turn.started"},
        {"type": "item.started", "item": {"id": "item_1", "type": "command_execution"}},
        {"type": "item.updated", "item": {"id": "item_1", "type": "command_execution"}},
        command(exit_code=0),
        {"type": "error", "message": "Reconnecting... 1/5"},
        completed({"id": "item_3", "type": "reasoning", "text": ""}),
        completed({"id": "item_4", "type": "web_search", "query": "q"}),
        completed({"id": "item_5", "type": "agent_message", "text": " "}),
        completed({"id": "item_6", "type": "reasoning", "text": "left over"}),
        turn_completed(input_tokens=10, output_tokens=2, cache_write_input_tokens=3),
    ]
    adapter = CodexAdapter()
    events = translate(adapter, lines)
    assert adapter.lines_read == len(lines)
    codex = CodexAdapter
    assert events == [
        {"type": "x-codex-thread.started", "eventId": "t:thread.started:0", "source": source(codex, lines[0])},
        {"type": "x-codex-turn.started", "eventId": "t:turn.started:0", "source": source(codex, lines[1])},
        {"type": MESSAGE, "eventId": "t:item_1", "source": source(codex, lines[4]), "message": {"content": [
            {"type": "tool_call", "id": "item_1", "name": "shell", "input": {"command": "ls"}}]}},
        {"type": RESULT, "toolCallId": "item_1", "content": "", "isError": False, "eventId": "t:item_1:result",
         "source": source(codex)},
        {"type": "x-codex-error", "eventId": "t:error:0", "source": source(codex, lines[5])},
        {"type": "x-codex-reasoning", "eventId": "t:item_3", "source": source(codex, lines[6])},
        {"type": "x-codex-web_search", "eventId": "t:item_4", "source": source(codex, lines[7])},
        {"type": MESSAGE, "eventId": "t:item_5", "source": source(codex, lines[8]),
         "message": {"content": [{"type": "text", "text": " "}]}},
        {"type": "x-codex-reasoning", "eventId": "t:item_6", "source": source(codex, lines[9])},
        {"type": MESSAGE, "eventId": "t:turn.completed:0", "source": source(codex, lines[10]), "message": {
            "content": [], "usage": {"inputTokens": 10, "outputTokens": 2, "cacheWriteTokens": 3}}},
        {"type": END, "stopReason": "completed", "eventId": "t:turn.completed:0:end", "source": source(codex)},
    ]
    assert adapter.stop == StreamStop("turn.completed", "completed")


def test_codex_first_thread_id_names_the_events() -> None:
    """A second thread.started does not rename the events; without one the format names them."""
    events = translate(CodexAdapter(), [THREAD, {"type": "thread.started", "thread_id": "u"},
                                        completed({"id": "item_0", "type": "agent_message", "text": "a"})])
    assert [event["eventId"] for event in events] == ["t:thread.started:0", "t:thread.started:1", "t:item_0:chunk",
                                                      "t:item_0"]
    events = translate(CodexAdapter(), [completed({"id": "item_0", "type": "todo_list"}), turn_completed()])
    assert [event["eventId"] for event in events] == ["codex:item_0", "codex:turn.completed:0",
                                                      "codex:turn.completed:0:end"]
    assert "usage" not in events[1]["message"]


@pytest.mark.parametrize(("usage", "counted"), [
    ({"input_tokens": 10, "output_tokens": 2}, {"inputTokens": 10, "outputTokens": 2}),
    ({"cached_input_tokens": 4, "output_tokens": 2}, None),
    ({"input_tokens": 10, "cached_input_tokens": 4}, None),
    ({"input_tokens": 10, "cached_input_tokens": 4, "cache_write_input_tokens": 0, "output_tokens": 0},
     {"inputTokens": 6, "outputTokens": 0, "cacheReadTokens": 4, "cacheWriteTokens": 0}),
])
def test_codex_turn_usage(usage: Event, counted: dict[str, int] | None) -> None:
    """The turn's usage: uncached input, output, cache reads and writes; none without both counts."""
    message = translate(CodexAdapter(), [{"type": "turn.completed", "usage": usage}])[0]["message"]
    assert message.get("usage") == counted


def test_codex_turn_failed_ids_and_sources() -> None:
    """turn.failed: its turn/end keyed by the thread and position, holding its line."""
    failed = {"type": "turn.failed", "error": {"message": "boom"}}
    cut = {"type": "turn.failed", "error": {"message": "Incomplete response returned, reason: max_output_tokens"}}
    events = translate(CodexAdapter(), [THREAD, failed])
    assert events[1] == {"type": END, "stopReason": "error", "error": {"message": "boom"},
                         "eventId": "t:turn.failed:0", "source": source(CodexAdapter, failed)}
    adapter = CodexAdapter()
    events = translate(adapter, [THREAD, completed({"id": "r", "type": "reasoning", "text": "hm"}), cut])
    assert events[1:] == [
        {"type": "x-codex-reasoning", "eventId": "t:r", "source": source(CodexAdapter, events[1]["source"]["events"][0])},
        {"type": END, "stopReason": "max_tokens", "eventId": "t:turn.failed:0", "source": source(CodexAdapter, cut)}]
    assert events[1]["source"]["events"][0]["item"]["id"] == "r"
    assert adapter.stop == StreamStop("turn.failed", "max_tokens")


def test_codex_unanswered_reasoning_keeps_its_line() -> None:
    """Reasoning held at the end of the body is stored with the line that printed it."""
    line = completed({"id": "r", "type": "reasoning", "text": "hm"})
    assert translate(CodexAdapter(), [line]) == [
        {"type": "x-codex-reasoning", "eventId": "codex:r", "source": source(CodexAdapter, line)}]


@pytest.mark.parametrize(("fields", "content", "is_error"), [
    ({"result": {"content": [{"type": "text", "text": "ok"}]}, "status": "completed"},
     [{"type": "text", "text": "ok"}], False),
    # A failed status fails the call even with a result and no error.
    ({"result": {"content": [{"type": "text", "text": "ok"}]}, "status": "failed"},
     [{"type": "text", "text": "ok"}], True),
    ({"result": {"content": [{"type": "text", "text": "ok"}]}, "error": {"code": 1}},
     [{"type": "text", "text": "ok"}], True),
    ({"result": None, "error": {"message": "boom"}, "status": "failed"}, "boom", True),
    ({"error": {"message": 404}}, "404", True),
    ({"error": {"message": None}}, "", True),
    ({"status": "completed"}, "", False),
    ({"result": None, "status": "in_progress"}, "", False),
    ({"result": "plain"}, "plain", False),
    ({"result": 7}, "7", False),
    # Not a list of typed blocks: the result is kept as text.
    ({"result": {"structured": 1}}, str({"structured": 1}), False),
    ({"result": {"content": "text"}}, str({"content": "text"}), False),
    ({"result": {"content": [{"type": 1}]}}, str({"content": [{"type": 1}]}), False),
    ({"result": {"content": [{"type": "text"}, "x"]}}, str({"content": [{"type": "text"}, "x"]}), False),
])
def test_codex_mcp_results(fields: Event, content: Any, is_error: bool) -> None:
    """An MCP call's result: its content blocks, its error message, or its result as text."""
    line = mcp(**fields)
    events = translate(CodexAdapter(), [THREAD, line])
    assert events[1:] == [
        {"type": MESSAGE, "eventId": "t:item_2", "source": source(CodexAdapter, line), "message": {"content": [
            {"type": "tool_call", "id": "item_2", "name": "docs__find", "input": {"q": "x"}}]}},
        {"type": RESULT, "toolCallId": "item_2", "content": content, "isError": is_error,
         "eventId": "t:item_2:result", "source": source(CodexAdapter)},
    ]


@pytest.mark.parametrize("arguments", [None, "q=x", ["x"], 3])
def test_codex_mcp_arguments_that_are_not_an_object(arguments: Any) -> None:
    """Arguments that are not an object are kept as the tool call's input under ``arguments``."""
    events = translate(CodexAdapter(), [mcp(arguments=arguments, result=None)])
    assert events[0]["message"]["content"][0]["input"] == {"arguments": arguments}


# opencode.

def line_of(kind: str, part: Event | None = None, session: Any = "ses_1") -> Event:
    line: Event = {"type": kind, "timestamp": 1, "sessionID": session}
    if part is not None:
        line["part"] = {"messageID": "msg_1", "sessionID": "ses_1", **part}
    return line


def tool(part_id: str, state: Event, call_id: str = "call_1") -> Event:
    return line_of("tool_use", {"id": part_id, "type": "tool", "tool": "bash", "callID": call_id, "state": state})


def finish(part_id: str, reason: str = "stop", **tokens: Any) -> Event:
    return line_of("step_finish", {"id": part_id, "type": "step-finish", "reason": reason, "tokens": tokens})


def error_line(error: Any) -> Event:
    return {"type": "error", "timestamp": 1, "sessionID": "ses_1", "error": error}


INPUT = {"command": "ls"}


@pytest.mark.parametrize(("line", "field", "expected"), [
    ({"type": None}, "type", "expected a string"),
    (line_of("text"), "part", "expected an object"),
    ({"type": "text", "part": {"id": "p", "messageID": 1}}, "part.messageID", "expected a string"),
    ({"type": "step_start", "part": {"id": 2, "messageID": "m"}}, "part.id", "expected a string"),
    (line_of("text", {"id": "p"}), "part.text", "expected a string"),
    (line_of("reasoning", {"id": "p", "text": 1}), "part.text", "expected a string"),
    (line_of("tool_use", {"id": "p", "callID": "c", "state": {"status": "running", "input": {}}}),
     "part.tool", "expected a string"),
    (line_of("tool_use", {"id": "p", "tool": "bash", "state": {"status": "running", "input": {}}}),
     "part.callID", "expected a string"),
    (line_of("tool_use", {"id": "p", "tool": "bash", "callID": "c"}), "part.state", "expected an object"),
    (tool("p", {"input": {}}), "part.state.status", "expected a string"),
    (tool("p", {"status": "pending"}), "part.state.input", "expected an object"),
    (tool("p", {"status": "completed", "input": {}}), "part.state.output", "expected a string"),
    (tool("p", {"status": "error", "input": {}, "output": "x"}), "part.state.error", "expected a string"),
    (line_of("step_finish", {"id": "p", "tokens": {}}), "part.reason", "expected a string"),
    (line_of("step_finish", {"id": "p", "reason": "stop"}), "part.tokens", "expected an object"),
    (finish("p", cache=[1]), "part.tokens.cache", "expected an object"),
    *[(finish("p", **dict[str, Any]({key: value})), f"part.tokens.{key}", "expected a non-negative integer")
      for key in ("input", "output", "reasoning") for value in ("1", -1, False)],
    *[(finish("p", cache={key: value}), f"part.tokens.cache.{key}", "expected a non-negative integer")
      for key in ("read", "write") for value in ("1", -1, True)],
    (error_line("boom"), "error", "expected an object"),
    (error_line({"name": 3}), "error.name", "expected a string"),
    (error_line({"name": "APIError", "data": {"message": ["x"]}}), "error.data.message", "expected a string"),
])
def test_opencode_refusals(line: Event, field: str, expected: str) -> None:
    """A line opencode would not print is refused (422) by its index, field and what was expected."""
    assert refusal(OpencodeAdapter(), line) == f"line 7: {field}: {expected} (not an opencode line)"


def test_opencode_events_ids_and_sources() -> None:
    """A step with every kind of part: its message, its tool results, its turn/end, and their sources."""
    lines = [
        line_of("step_start", {"id": "p0", "type": "step-start"}),
        line_of("text", {"id": "p1", "type": "text", "text": "Running."}),
        tool("p2", {"status": "completed", "input": INPUT, "output": "hi\n"}, "call_a"),
        tool("p3", {"status": "error", "input": INPUT, "error": "denied", "output": "x"}, "call_b"),
        tool("p4", {"status": "running", "input": INPUT}, "call_c"),
        line_of("reasoning", {"id": "p5", "type": "reasoning", "text": "hm"}),
        finish("p6", "stop", input=5, output=2),
    ]
    adapter = OpencodeAdapter()
    events = translate(adapter, lines)
    assert adapter.lines_read == len(lines)
    opencode = OpencodeAdapter

    def call(call_id: str) -> Event:
        return {"type": "tool_call", "id": call_id, "name": "bash", "input": INPUT}

    assert events == [
        {"type": MESSAGE, "eventId": "msg_1", "source": source(opencode, *lines), "message": {
            "content": [{"type": "text", "text": "Running."}, call("call_a"), call("call_b"), call("call_c"),
                        {"type": "reasoning", "text": "hm"}],
            "usage": {"inputTokens": 5, "outputTokens": 2}, "stopReason": "completed"}},
        {"type": RESULT, "toolCallId": "call_a", "content": "hi\n", "isError": False, "eventId": "p2",
         "source": source(opencode)},
        {"type": RESULT, "toolCallId": "call_b", "content": "denied", "isError": True, "eventId": "p3",
         "source": source(opencode)},
        {"type": END, "stopReason": "completed", "eventId": "p6:end", "source": source(opencode)},
    ]
    assert adapter.stop == StreamStop("stop", "completed")


def test_opencode_step_without_its_start() -> None:
    """Parts printed without a step_start: the message holds their lines and the finish only."""
    lines = [line_of("text", {"id": "p1", "type": "text", "text": "a"}), finish("p2", "tool-calls")]
    events = translate(OpencodeAdapter(), lines)
    assert events == [{"type": MESSAGE, "eventId": "msg_1", "source": source(OpencodeAdapter, *lines),
                       "message": {"content": [{"type": "text", "text": "a"}]}}]


def test_opencode_lone_step_start_and_unknown_kinds_keep_their_line() -> None:
    """A step_start that printed nothing and an unknown line kind are stored with their line."""
    lines = [line_of("step_start", {"id": "p0", "type": "step-start"}), line_of("patch", {"id": "p9"}),
             {"type": "status", "sessionID": "ses_2"}, {"type": "status"}]
    events = translate(OpencodeAdapter(), lines)
    assert events == [
        {"type": "x-opencode-patch", "eventId": "p9", "source": source(OpencodeAdapter, lines[1])},
        {"type": "x-opencode-status", "eventId": "ses_1:status:0", "source": source(OpencodeAdapter, lines[2])},
        {"type": "x-opencode-status", "eventId": "ses_1:status:1", "source": source(OpencodeAdapter, lines[3])},
        {"type": "x-opencode-step_start", "eventId": "p0", "source": source(OpencodeAdapter, lines[0])},
    ]


def test_opencode_session_is_the_first_string_one() -> None:
    """The session naming positional ids is the first string sessionID printed."""
    lines = [line_of("status", session=5), line_of("status", session=None), line_of("status", session="ses_a"),
             line_of("status", session="ses_b")]
    events = translate(OpencodeAdapter(), lines)
    assert [event["eventId"] for event in events] == [
        "opencode:status:0", "opencode:status:1", "ses_a:status:2", "ses_a:status:3"]


@pytest.mark.parametrize(("tokens", "counted"), [
    ({"input": 5, "output": 2}, {"inputTokens": 5, "outputTokens": 2}),
    ({"input": 5, "output": 2, "reasoning": 3, "cache": None}, {"inputTokens": 5, "outputTokens": 5}),
    ({"input": 5, "output": 2, "cache": {"read": 1}}, {"inputTokens": 5, "outputTokens": 2, "cacheReadTokens": 1}),
    ({"input": 5, "reasoning": 3}, None),
    ({"output": 2}, None),
])
def test_opencode_step_usage(tokens: Event, counted: dict[str, int] | None) -> None:
    """A step's usage: no cache counts when not printed, none without both input and output."""
    message = translate(OpencodeAdapter(), [finish("p1", "tool-calls", **tokens)])[0]["message"]
    assert message.get("usage") == counted


def test_opencode_turn_end_error_only_for_an_unknown_reason() -> None:
    """A known reason's turn/end holds no error; an unknown one's names the reason."""
    assert translate(OpencodeAdapter(), [finish("p1", "length", input=1, output=1)])[-1] == {
        "type": END, "stopReason": "max_tokens", "eventId": "p1:end", "source": source(OpencodeAdapter)}
    assert translate(OpencodeAdapter(), [finish("p1", "odd", input=1, output=1)])[-1] == {
        "type": END, "stopReason": "error", "error": {"message": "the step finished with reason 'odd'"},
        "eventId": "p1:end", "source": source(OpencodeAdapter)}


@pytest.mark.parametrize(("error", "kept"), [
    ({"name": "APIError", "data": {"message": "boom", "statusCode": 500}}, {"name": "APIError", "message": "boom"}),
    ({"name": "UnknownError"}, {"name": "UnknownError"}),
    ({"name": "UnknownError", "data": "text"}, {"name": "UnknownError"}),
    ({"data": {"message": "boom"}}, {"message": "boom"}),
    ({"name": None, "data": {"message": None}}, {}),
])
def test_opencode_error_line(error: Event, kept: dict[str, str]) -> None:
    """An error line stores the open step, then ends the turn `error` with its name and message."""
    text = line_of("text", {"id": "p1", "type": "text", "text": "a"})
    line = error_line(error)
    adapter = OpencodeAdapter()
    events = translate(adapter, [text, line])
    assert events == [
        {"type": MESSAGE, "eventId": "msg_1", "source": source(OpencodeAdapter, text),
         "message": {"content": [{"type": "text", "text": "a"}]}},
        {"type": END, "stopReason": "error", "error": kept, "eventId": "ses_1:error:0",
         "source": source(OpencodeAdapter, line)},
    ]
    assert adapter.stop == StreamStop("error", "error", kept)
