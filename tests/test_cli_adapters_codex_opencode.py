"""The codex and opencode CLI adapters (SPEC §16), over the CLIs' real recorded standard output.

Each fixture in ``tests/cli_children/fixtures/{codex,opencode}/`` is what the real CLI printed
against a scripted model. For every scenario the tests pin the events the adapter makes, the
output that the project's one selection rule (``lastword.rules.fold``) picks from them, the
stop reason and the usage; then the properties every body must keep (valid §4 events, unique and
stable eventIds, a bad line refused by its index).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.adapters.cli_base import CliAdapter, Made, NotTheFormat, StreamStop
from lastword.adapters.codex import CodexAdapter
from lastword.adapters.opencode import OpencodeAdapter
from lastword.rules.events import validate_events
from lastword.rules.fold import TurnFold, final_assistant_output

FIXTURES = Path(__file__).parent / "cli_children" / "fixtures"

Event = dict[str, Any]


def lines_of(cli: str, scenario: str) -> list[Event]:
    text = (FIXTURES / cli / f"{scenario}.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def translate(adapter: CliAdapter, lines: list[Event]) -> tuple[list[Event], StreamStop]:
    made: list[Made] = []
    for index, line in enumerate(lines):
        made.extend(adapter.feed(index, line))
    made.extend(adapter.finish())
    assert all(item.child is None for item in made)
    return [item.event for item in made], adapter.stop


def turn_usage(events: list[Event]) -> dict[str, int]:
    fold = TurnFold()
    for event in events:
        fold.push(event)
    return fold.usage


def usage(inputs: int, outputs: int) -> dict[str, int]:
    return {"inputTokens": inputs, "outputTokens": outputs, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def shell(call_id: str, command: str) -> list[dict[str, Any]]:
    return [{"type": "tool_call", "id": call_id, "name": "shell", "input": {"command": command}}]


def bash(call_id: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": "bash", "input": {"command": "echo hi", "description": "Print hi"}}


ECHO = "/bin/bash -lc 'echo hi'"
MESSAGE, RESULT, END, CHUNK = "assistant/message", "tool/result", "turn/end", "assistant/chunk"
THREAD, TURN, ERROR = "x-codex-thread.started", "x-codex-turn.started", "x-codex-error"

# scenario: (event types, selected output, stop reason, providerStopReason, turn usage)
CODEX: dict[str, tuple[list[str], list[dict[str, Any]], str, str, dict[str, int]]] = {
    "completion": ([THREAD, TURN, CHUNK, MESSAGE, MESSAGE, END],
                   text("Hello from the fake model. The answer is 42."), "completed", "turn.completed",
                   usage(9623, 11)),
    # Codex neither continues nor retries a cut reply: the partial text is the answer.
    "max_tokens_partial": ([THREAD, TURN, CHUNK, MESSAGE, ERROR, END],
                           text("This answer is cut off at the token ceil"), "max_tokens", "turn.failed",
                           usage(0, 0)),
    "continued_after_ceiling": ([THREAD, TURN, CHUNK, MESSAGE, ERROR, END],
                                text("Part one of a long answer, cut"), "max_tokens", "turn.failed", usage(0, 0)),
    # Nothing but a command before the ceiling: the tool-call message is the last substantive one.
    "tool_then_empty_max_tokens": ([THREAD, TURN, MESSAGE, RESULT, ERROR, END],
                                   shell("item_0", ECHO), "max_tokens", "turn.failed", usage(0, 0)),
    # Codex prints the text and the command of one reply as two items, the command's starting on
    # the next line: one message, text then call (Codex's own last agent_message is the text).
    "tool_then_empty_end_turn": ([THREAD, TURN, CHUNK, MESSAGE, RESULT, MESSAGE, END],
                                 [*text("Let me run a command first."), *shell("item_1", ECHO)], "completed",
                                 "turn.completed", usage(19427, 7)),
    "text_then_command": ([THREAD, TURN, CHUNK, MESSAGE, RESULT, CHUNK, MESSAGE, MESSAGE, END],
                          text("The file says hi."), "completed", "turn.completed", usage(19415, 9)),
    "codex_shell_then_final": ([THREAD, TURN, MESSAGE, RESULT, CHUNK, MESSAGE, MESSAGE, END],
                               text("The command printed hi."), "completed", "turn.completed", usage(19374, 6)),
    # The retry's repeat is stored again under its new item id and selects the same text.
    "codex_retry_repeat": ([THREAD, TURN, CHUNK, MESSAGE, ERROR, CHUNK, MESSAGE, MESSAGE, END],
                           text("This message is sent twice."), "completed", "turn.completed", usage(9679, 6)),
    "http_500_mid_run": ([THREAD, TURN, CHUNK, MESSAGE, RESULT, ERROR, ERROR, END],
                         [*text("Running a command before the outage."), *shell("item_1", ECHO)], "error",
                         "turn.failed", usage(0, 0)),
    # The first invocation of a resumed session (its second is resume.turn2, below).
    "resume": ([THREAD, TURN, CHUNK, MESSAGE, MESSAGE, END], text("First turn: the answer is 42."), "completed",
               "turn.completed", usage(9620, 7)),
    "sse_error_mid_stream": ([THREAD, TURN, ERROR, ERROR, END], [], "error", "turn.failed", usage(0, 0)),
    "sse_failed_mid_stream": ([THREAD, TURN, ERROR, ERROR, END], [], "error", "turn.failed", usage(0, 0)),
}

STEP = "x-opencode-step_start"
OPENCODE: dict[str, tuple[list[str], list[dict[str, Any]], str, str, dict[str, int]]] = {
    "completion": ([MESSAGE, END], text("Hello from the fake model. The answer is 42."), "completed", "stop",
                   usage(7444, 11)),
    # opencode exits 0 after a `length` stop; the turn keeps max_tokens and the partial text.
    "max_tokens_partial": ([MESSAGE, END], text("This answer is cut off at the token ceil"), "max_tokens",
                           "length", usage(7448, 10)),
    "continued_after_ceiling": ([MESSAGE, END], text("Part one of a long answer, cut"), "max_tokens", "length",
                                usage(7450, 7)),
    "tool_then_empty_max_tokens": ([MESSAGE, RESULT, MESSAGE, END], [bash("call_fake_dcca032058444a91")],
                                   "max_tokens", "length", usage(7452 + 7526, 2)),
    "tool_then_empty_end_turn": ([MESSAGE, RESULT, MESSAGE, END],
                                 [*text("Let me run a command first."), bash("call_fake_27d182475b38402d")],
                                 "completed", "stop", usage(7451 + 7532, 7)),
    "http_500_mid_run": ([MESSAGE, RESULT, END],
                         [*text("Running a command before the outage."), bash("call_fake_08440f3073674455")],
                         "error", "error", usage(7447, 9)),
    # Six attempts that printed nothing but their step_start, then the error.
    "sse_error_mid_stream": ([STEP] * 6 + [END], [], "error", "error", usage(0, 0)),
    "subagent": ([MESSAGE, RESULT, MESSAGE, END], text("The subagent replied: hello from the subagent."),
                 "completed", "stop", usage(7443 + 7569, 16)),
    # A call cut by the ceiling (opencode's `invalid` tool) ends its step `length`; opencode goes on
    # with another step, whose answer is the turn's.
    "tool_cut_then_step": ([MESSAGE, MESSAGE, END], text("The check could not run; the answer is 42."),
                           "completed", "stop", usage(15056, 17)),
}
# opencode through its Anthropic provider (@ai-sdk/anthropic) against the Messages API.
OPENCODE_ANTHROPIC: dict[str, tuple[list[str], list[dict[str, Any]], str, str, dict[str, int]]] = {
    "completion": ([MESSAGE, END], text("Hello from the fake model. The answer is 42."), "completed", "stop",
                   usage(7397, 11)),
    "tool_cut_then_step": ([MESSAGE, MESSAGE, END], text("The check could not run; the answer is 42."),
                           "completed", "stop", usage(14977, 27)),
}


def scenarios(cli: str) -> list[str]:
    """The recorded scenarios (a resumed session's second turn, ``<scenario>.turn2``, is its own)."""
    return sorted(path.stem for path in (FIXTURES / cli).glob("*.ndjson") if "." not in path.stem)


def test_every_fixture_has_a_case() -> None:
    """No recorded scenario goes untested (a fixture added later fails here until it is pinned)."""
    assert scenarios("codex") == sorted(CODEX)
    assert scenarios("opencode") == sorted(OPENCODE)
    assert scenarios("opencode-anthropic") == sorted(OPENCODE_ANTHROPIC)


EXPECTED = {"codex": CODEX, "opencode": OPENCODE, "opencode-anthropic": OPENCODE_ANTHROPIC}


@pytest.mark.parametrize(("cli", "adapter", "scenario"), [
    *[("codex", CodexAdapter, name) for name in sorted(CODEX)],
    *[("opencode", OpencodeAdapter, name) for name in sorted(OPENCODE)],
    *[("opencode-anthropic", OpencodeAdapter, name) for name in sorted(OPENCODE_ANTHROPIC)],
])
def test_fixture_translation(cli: str, adapter: type[CliAdapter], scenario: str) -> None:
    """Each real stream makes the expected events, output, stop reason and usage."""
    types, output, stop_reason, provider, expected_usage = EXPECTED[cli][scenario]
    lines = lines_of(cli, scenario)
    events, stop = translate(adapter(), lines)
    validate_events(events)
    assert [event["type"] for event in events] == types
    assert final_assistant_output(events) == output
    assert stop.stop_reason == stop_reason and stop.provider == provider
    assert [event["stopReason"] for event in events if event["type"] == END] == [stop_reason]
    assert turn_usage(events) == expected_usage
    assert all(event["source"]["format"] == cli.split("-")[0] for event in events)
    # Every line but the ones that only announce an item is kept in some event's source.
    kept = [raw for event in events for raw in event["source"]["events"]]
    assert all(line in kept for line in lines if line["type"] not in ("item.started", "item.updated"))


@pytest.mark.parametrize("cli", ["opencode", "opencode-anthropic"])
def test_fixture_opencode_a_cut_call_then_another_step(cli: str) -> None:
    """The cut call (opencode's `invalid` tool) is not output; its step is max_tokens, not the turn's end."""
    lines = lines_of(cli, "tool_cut_then_step")
    invalid = next(line for line in lines if line["type"] == "tool_use")
    assert invalid["part"]["tool"] == "invalid"
    events, _ = translate(OpencodeAdapter(), lines)
    first, second = [event for event in events if event["type"] == MESSAGE]
    assert first["message"]["content"] == text("I will check with a command.")
    assert first["message"]["stopReason"] == "max_tokens" and invalid in first["source"]["events"]
    assert second["message"]["stopReason"] == "completed"
    assert not any(event["type"] == RESULT for event in events)


@pytest.mark.parametrize("cli", ["codex"])
def test_fixture_a_resumed_sessions_second_turn_has_its_own_ids(cli: str) -> None:
    """Fed as the run's turn 2, `codex exec resume`'s output (items again from item_0) shares no
    eventId with the first turn's, and selects its own answer."""
    first, _ = translate(CodexAdapter(), lines_of(cli, "resume"))
    second, stop = translate(CodexAdapter(turn=2), lines_of(cli, "resume.turn2"))
    assert not {event["eventId"] for event in first} & {event["eventId"] for event in second}
    assert all(event["eventId"].startswith("turn2:") for event in second)
    assert final_assistant_output(second) == text("Second turn: still 42.") and stop.stop_reason == "completed"
    assert translate(CodexAdapter(turn=1), lines_of(cli, "resume"))[0] == first


def test_codex_failed_turn_keeps_its_message_as_error() -> None:
    """A turn.failed that is not the ceiling ends `error` with the CLI's message."""
    events, stop = translate(CodexAdapter(), lines_of("codex", "http_500_mid_run"))
    message = "We’re currently experiencing high demand, which may cause temporary errors."
    assert events[-1]["error"] == {"message": message} and stop.error == {"message": message}
    assert "error" not in translate(CodexAdapter(), lines_of("codex", "max_tokens_partial"))[0][-1]


def test_codex_command_result() -> None:
    """A command execution is a shell tool call and its result, keyed by the item id."""
    lines = lines_of("codex", "codex_shell_then_final")
    events, _ = translate(CodexAdapter(), lines)
    thread = lines[0]["thread_id"]
    call, result = events[2], events[3]
    assert call["eventId"] == f"{thread}:item_0" and call["source"]["events"] == [lines[3]]
    assert result == {"type": RESULT, "toolCallId": "item_0", "content": "hi\n", "isError": False,
                      "eventId": f"{thread}:item_0:result", "source": {"format": "codex", "events": []}}


def test_codex_failed_command_is_an_error_result() -> None:
    """A non-zero (or missing) exit code marks the tool result as an error."""
    item = {"id": "item_0", "type": "command_execution", "command": "false", "aggregated_output": "", "status": "failed"}
    for exit_code, failed in ((1, True), (None, True), (0, False)):
        events, _ = translate(CodexAdapter(), [{"type": "item.completed", "item": {**item, "exit_code": exit_code}}])
        assert events[1]["isError"] is failed


def reasoning(item_id: str, value: str) -> Event:
    return {"type": "item.completed", "item": {"id": item_id, "type": "reasoning", "text": value}}


def agent_message(item_id: str, value: str) -> Event:
    return {"type": "item.completed", "item": {"id": item_id, "type": "agent_message", "text": value}}


COMPLETED = {"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 4, "output_tokens": 3}}


def test_codex_reasoning_goes_first_in_the_next_message() -> None:
    """Reasoning items become reasoning blocks at the head of the next agent message."""
    lines = [{"type": "thread.started", "thread_id": "t"}, reasoning("item_0", "think"),
             reasoning("item_1", "more"), agent_message("item_2", "answer"), COMPLETED]
    events, _ = translate(CodexAdapter(), lines)
    assert events[1] == {"type": CHUNK, "delta": {"type": "text", "text": "answer"}, "eventId": "t:item_2:chunk",
                         "source": {"format": "codex", "events": [lines[3]]}}
    assert events[2]["message"]["content"] == [
        {"type": "reasoning", "text": "think"}, {"type": "reasoning", "text": "more"}, {"type": "text", "text": "answer"}]
    assert events[2]["source"]["events"] == lines[1:4]
    assert events[2]["eventId"] == "t:item_2"


def test_codex_reasoning_without_a_message_is_not_output() -> None:
    """Reasoning that no agent message follows is kept as x-codex-reasoning at the turn's end."""
    lines = [{"type": "thread.started", "thread_id": "t"}, agent_message("item_0", "answer"),
             reasoning("item_1", "then thought"), reasoning("item_2", " "),
             {"type": "turn.failed", "error": {"message": "Incomplete response returned, reason: max_output_tokens"}}]
    events, stop = translate(CodexAdapter(), lines)
    assert [event["type"] for event in events] == [THREAD, CHUNK, MESSAGE, "x-codex-reasoning", "x-codex-reasoning",
                                                   END]
    assert [event["eventId"] for event in events[3:5]] == ["t:item_2", "t:item_1"]  # blank one at once
    assert final_assistant_output(events) == text("answer") and stop.stop_reason == "max_tokens"
    # At the end of a body without a terminal line too.
    events, stop = translate(CodexAdapter(), lines[:3])
    assert events[-1]["type"] == "x-codex-reasoning" and stop.stop_reason is None


def test_codex_blank_message_does_not_take_the_reasoning() -> None:
    """A blank agent message leaves the reasoning held, so it cannot hide the answer before it."""
    lines = [agent_message("item_0", "answer"), reasoning("item_1", "thought"), agent_message("item_2", ""),
             {"type": "turn.failed", "error": {"message": "Incomplete response returned, reason: max_output_tokens"}}]
    events, _ = translate(CodexAdapter(), lines)
    assert [event["type"] for event in events] == [CHUNK, MESSAGE, MESSAGE, "x-codex-reasoning", END]
    assert events[2]["message"]["content"] == text("")
    assert final_assistant_output(events) == text("answer")


def test_codex_usage_leaves_cached_input_out() -> None:
    """inputTokens is input_tokens less cached_input_tokens, which is cacheReadTokens."""
    events, _ = translate(CodexAdapter(), [agent_message("item_0", "a"), COMPLETED])
    assert events[2]["message"] == {"content": [], "usage": {"inputTokens": 6, "outputTokens": 3, "cacheReadTokens": 4}}
    assert "usage" not in events[3]


def test_codex_unknown_kinds_are_kept() -> None:
    """Unknown line kinds and other item types become x-codex-<type>; item.started is skipped."""
    lines: list[Event] = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.something", "x": 1},
             {"type": "item.started", "item": {"id": "item_0", "type": "file_change"}},
             {"type": "item.completed", "item": {"id": "item_0", "type": "file_change", "changes": []}}]
    events, _ = translate(CodexAdapter(), lines)
    assert [(event["type"], event["eventId"]) for event in events] == [
        (THREAD, "t:thread.started:0"), ("x-codex-turn.something", "t:turn.something:0"),
        ("x-codex-file_change", "t:item_0")]


def test_codex_mcp_tool_call() -> None:
    """An MCP tool call is a tool call named server__tool and its result."""
    item = {"id": "item_3", "type": "mcp_tool_call", "server": "docs", "tool": "find", "arguments": {"q": "x"},
            "result": {"content": [{"type": "text", "text": "found"}]}, "error": None, "status": "completed"}
    events, _ = translate(CodexAdapter(), [{"type": "item.completed", "item": item}])
    assert events[0]["message"]["content"] == [{"type": "tool_call", "id": "item_3", "name": "docs__find", "input": {"q": "x"}}]
    assert events[1]["content"] == [{"type": "text", "text": "found"}] and events[1]["isError"] is False
    failed = {**item, "result": None, "error": {"message": "boom"}, "status": "failed"}
    events, _ = translate(CodexAdapter(), [{"type": "item.completed", "item": failed}])
    assert events[1]["content"] == "boom" and events[1]["isError"] is True


def started(item: Event) -> Event:
    return {"type": "item.started", "item": {**item, "status": "in_progress"}}


COMMAND = {"id": "item_1", "type": "command_execution", "command": "ls", "aggregated_output": "a\n", "exit_code": 0}
MCP = {"id": "item_1", "type": "mcp_tool_call", "server": "docs", "tool": "find", "arguments": {"q": "x"},
       "result": {"content": [{"type": "text", "text": "found"}]}, "error": None, "status": "completed"}


@pytest.mark.parametrize(("item", "call"), [
    (COMMAND, {"type": "tool_call", "id": "item_1", "name": "shell", "input": {"command": "ls"}}),
    (MCP, {"type": "tool_call", "id": "item_1", "name": "docs__find", "input": {"q": "x"}}),
])
def test_codex_text_then_a_call_starting_on_the_next_line_is_one_message(item: Event, call: Event) -> None:
    """The text is streamed at once; the message (text, then the call) is stored at the next line,
    and the call's completion gives only its result."""
    adapter = CodexAdapter()
    lines = [{"type": "thread.started", "thread_id": "t"}, agent_message("item_0", "Let me read the file."),
             started(item), {"type": "item.completed", "item": item}, COMPLETED]
    assert adapter.feed(0, lines[0])[0].event["type"] == THREAD
    assert [made.event for made in adapter.feed(1, lines[1])] == [
        {"type": CHUNK, "delta": {"type": "text", "text": "Let me read the file."}, "eventId": "t:item_0:chunk",
         "source": {"format": "codex", "events": [lines[1]]}}]
    assert [made.event for made in adapter.feed(2, lines[2])] == [
        {"type": MESSAGE, "message": {"content": [*text("Let me read the file."), call]}, "eventId": "t:item_0",
         "source": {"format": "codex", "events": lines[1:3]}}]
    result_event = [made.event for made in adapter.feed(3, lines[3])]
    assert [(event["type"], event["eventId"], event["source"]["events"]) for event in result_event] == [
        (RESULT, "t:item_1:result", [lines[3]])]
    events = [made.event for made in adapter.feed(4, lines[4]) + adapter.finish()]
    assert [event["type"] for event in events] == [MESSAGE, END]


@pytest.mark.parametrize("after", [
    {"type": "item.started", "item": {"id": "item_1", "type": "file_change"}},
    {"type": "item.started", "item": {"id": "item_1", "type": "command_execution"}},
    {"type": "item.started", "item": {"id": "item_1", "type": "mcp_tool_call", "server": "docs"}},
    {"type": "item.started", "item": {"id": "item_1", "type": "mcp_tool_call", "tool": "find"}},
    {"type": "item.completed", "item": COMMAND},
    {"type": "error", "message": "Reconnecting... 1/1"},
])
def test_codex_text_not_followed_by_a_call_start_is_its_own_message(after: Event) -> None:
    """Anything else on the next line stores the text alone first; the call stays whole."""
    lines = [agent_message("item_0", "words"), after]
    events, _ = translate(CodexAdapter(), lines)
    assert events[1] == {"type": MESSAGE, "message": {"content": text("words")}, "eventId": "codex:item_0",
                         "source": {"format": "codex", "events": lines[:1]}}
    if after["type"] == "item.completed":
        assert [event["type"] for event in events[2:]] == [MESSAGE, RESULT]
        assert events[2]["message"]["content"][0]["name"] == "shell"


def test_codex_a_call_joined_to_the_text_before_it_keeps_its_outcome() -> None:
    """Its completion's exit code makes the result an error, and a bad one is refused by index."""
    failed = {**COMMAND, "exit_code": 2}
    events, _ = translate(CodexAdapter(), [agent_message("item_0", "t"), started(failed),
                                           {"type": "item.completed", "item": failed}])
    assert events[-1]["type"] == RESULT and events[-1]["isError"] is True
    with pytest.raises(NotTheFormat) as refused:
        translate(CodexAdapter(), [agent_message("item_0", "t"), started(COMMAND),
                                   {"type": "item.completed", "item": {**COMMAND, "exit_code": "0"}}])
    assert refused.value.extra["index"] == 2 and "item.exit_code" in str(refused.value)


@pytest.mark.parametrize(("line", "field"), [
    ({"type": "item.started"}, "item"),
    ({"type": "item.started", "item": {"type": "command_execution", "command": "ls"}}, "item.id"),
])
def test_codex_an_unreadable_start_after_a_text_is_refused_by_its_index(line: Event, field: str) -> None:
    with pytest.raises(NotTheFormat) as refused:
        translate(CodexAdapter(), [{"type": "thread.started", "thread_id": "t"}, agent_message("item_0", "t"), line])
    assert refused.value.extra["index"] == 2 and f"{field}:" in str(refused.value)


def test_codex_text_at_the_end_of_the_body_is_stored() -> None:
    events, _ = translate(CodexAdapter(), [agent_message("item_0", "last words")])
    assert [event["type"] for event in events] == [CHUNK, MESSAGE]
    assert final_assistant_output(events) == text("last words")


def opencode_line(kind: str, part: dict[str, Any]) -> Event:
    return {"type": kind, "timestamp": 1, "sessionID": "ses_1", "part": {"messageID": "msg_1", "sessionID": "ses_1", **part}}


def finish_step(part_id: str, reason: str, **tokens: Any) -> Event:
    counts = {"input": 5, "output": 2, "reasoning": 0, "cache": {"read": 0, "write": 0}, **tokens}
    return opencode_line("step_finish", {"id": part_id, "type": "step-finish", "reason": reason, "tokens": counts})


def test_opencode_part_printed_again_keeps_the_last() -> None:
    """A part printed twice under one id keeps its last text, in its first place."""
    lines = [opencode_line("step_start", {"id": "p0", "type": "step-start"}),
             opencode_line("text", {"id": "p1", "type": "text", "text": "Hel"}),
             opencode_line("reasoning", {"id": "p2", "type": "reasoning", "text": "hm"}),
             opencode_line("text", {"id": "p1", "type": "text", "text": "Hello"}),
             finish_step("p3", "stop")]
    events, _ = translate(OpencodeAdapter(), lines)
    assert events[0]["message"]["content"] == [{"type": "text", "text": "Hello"}, {"type": "reasoning", "text": "hm"}]
    assert events[0]["source"]["events"] == [lines[0], lines[3], lines[2], lines[4]]


def test_opencode_reasoning_tokens_count_as_output() -> None:
    """outputTokens is opencode's output plus its separately counted reasoning."""
    lines = [finish_step("p1", "stop", input=7, output=2, reasoning=5, cache={"read": 3, "write": 1})]
    events, _ = translate(OpencodeAdapter(), lines)
    assert events[0]["message"]["usage"] == {"inputTokens": 7, "outputTokens": 7, "cacheReadTokens": 3,
                                             "cacheWriteTokens": 1}


@pytest.mark.parametrize(("reason", "stop_reason"), [
    ("stop", "completed"), ("length", "max_tokens"), ("content-filter", "refusal"), ("error", "error"),
    ("other", "error"), ("tool-calls", None)])
def test_opencode_finish_reasons(reason: str, stop_reason: str | None) -> None:
    """A step's finish reason ends the turn by §6, except tool-calls; unknown ones are errors."""
    events, stop = translate(OpencodeAdapter(), [finish_step("p1", reason)])
    assert stop == StreamStop(reason, stop_reason, {"message": "the step finished with reason 'other'"}
                              if reason == "other" else None)
    assert [event["stopReason"] for event in events if event["type"] == END] == ([stop_reason] if stop_reason else [])
    assert events[0]["message"].get("stopReason") == stop_reason


def test_opencode_steps_of_one_message_get_numbered_ids() -> None:
    """Several stored steps under one messageID get distinct eventIds; an empty retry is x-."""
    start = opencode_line("step_start", {"id": "p0", "type": "step-start"})
    lines = [start, opencode_line("text", {"id": "p1", "type": "text", "text": "a"}),
             opencode_line("step_start", {"id": "p2", "type": "step-start"}),
             opencode_line("step_start", {"id": "p3", "type": "step-start"}),
             opencode_line("text", {"id": "p4", "type": "text", "text": "b"}), finish_step("p5", "stop")]
    events, _ = translate(OpencodeAdapter(), lines)
    assert [(event["type"], event["eventId"]) for event in events] == [
        (MESSAGE, "msg_1"), (STEP, "p2"), (MESSAGE, "msg_1:step2"), (END, "p5:end")]
    assert final_assistant_output(events) == text("b")


def bash_part(part_id: str, tool: str = "bash") -> Event:
    return opencode_line("tool_use", {"id": part_id, "type": "tool", "tool": tool, "callID": f"call_{part_id}",
                                      "state": {"status": "completed", "input": {"command": "ls"}, "output": "a"}})


def test_opencode_a_length_step_followed_by_another_does_not_end_the_turn() -> None:
    """Each step's reason is its message's stopReason; the turn ends at the body's end, with the
    last step's reason (the providerStopReason its reason)."""
    adapter = OpencodeAdapter()
    lines = [opencode_line("text", {"id": "p1", "type": "text", "text": "a"}), finish_step("p2", "length"),
             opencode_line("text", {"id": "p3", "type": "text", "text": "b"}), finish_step("p4", "stop")]
    made = [item.event for index, line in enumerate(lines) for item in adapter.feed(index, line)]
    assert [event["type"] for event in made] == [MESSAGE, MESSAGE]
    assert [event["message"]["stopReason"] for event in made] == ["max_tokens", "completed"]
    assert adapter.stop == StreamStop("stop", "completed")
    end = [item.event for item in adapter.finish()]
    assert end == [{"type": END, "stopReason": "completed", "eventId": "p4:end",
                    "source": {"format": "opencode", "events": []}}]
    assert adapter.finish() == []  # made once


@pytest.mark.parametrize(("last", "stop_reason"), [("tool-calls", None), ("length", "max_tokens")])
def test_opencode_the_last_steps_reason_ends_the_turn(last: str, stop_reason: str | None) -> None:
    """A last step that called tools leaves the turn unfinished, even after a stop before it."""
    events, stop = translate(OpencodeAdapter(), [finish_step("p1", "stop"), finish_step("p2", last)])
    assert [event["stopReason"] for event in events if event["type"] == END] == ([stop_reason] if stop_reason else [])
    assert stop.stop_reason == stop_reason


def test_opencode_an_error_after_a_length_step_ends_the_turn_once() -> None:
    error = {"type": "error", "sessionID": "ses_1", "error": {"name": "APIError", "data": {"message": "boom"}}}
    events, stop = translate(OpencodeAdapter(), [finish_step("p1", "length"), error])
    assert [event["type"] for event in events] == [MESSAGE, END] and events[1]["stopReason"] == "error"
    assert events[0]["message"]["stopReason"] == "max_tokens"
    assert stop.stop_reason == "error"


@pytest.mark.parametrize("reason", ["tool-calls", "length"])
def test_opencode_an_invalid_call_is_not_output(reason: str) -> None:
    """opencode's `invalid` tool (a call it could not read): out of the content and the results,
    kept in the source; its message is max_tokens."""
    lines = [opencode_line("text", {"id": "p1", "type": "text", "text": "a"}), bash_part("p2", "invalid"),
             bash_part("p3"), finish_step("p4", reason)]
    events, _ = translate(OpencodeAdapter(), lines)
    assert events[0]["message"]["content"] == [*text("a"), {"type": "tool_call", "id": "call_p3", "name": "bash",
                                                            "input": {"command": "ls"}}]
    assert events[0]["message"]["stopReason"] == "max_tokens" and lines[1] in events[0]["source"]["events"]
    assert [event["toolCallId"] for event in events if event["type"] == RESULT] == ["call_p3"]


def test_opencode_unknown_kinds_are_kept() -> None:
    """An unknown line kind becomes x-opencode-<type>, keyed by its part id or its position."""
    lines = [opencode_line("patch", {"id": "p9", "type": "patch"}), {"type": "status", "sessionID": "ses_1"}]
    events, _ = translate(OpencodeAdapter(), lines)
    assert [(event["type"], event["eventId"]) for event in events] == [
        ("x-opencode-patch", "p9"), ("x-opencode-status", "ses_1:status:0")]


@pytest.mark.parametrize(("adapter", "lines", "index", "field"), [
    (CodexAdapter, [{"type": "thread.started", "thread_id": "t"}, {"thread_id": "t"}], 1, "type"),
    (CodexAdapter, [{"type": "turn.started"}, {"type": "item.completed", "item": {"type": "agent_message"}}],
     1, "item.id"),
    (CodexAdapter, [agent_message("item_0", "a"), {"type": "item.completed", "item": {"id": "i", "type": "agent_message",
                                                                                     "text": 3}}], 1, "item.text"),
    (CodexAdapter, [{"type": "turn.completed", "usage": {"input_tokens": -1, "output_tokens": 1}}], 0,
     "usage.input_tokens"),
    (CodexAdapter, [{"type": "turn.failed", "error": "boom"}], 0, "error"),
    (OpencodeAdapter, [opencode_line("step_start", {"id": "p0"}), opencode_line("text", {"type": "text", "text": "a"})],
     1, "part.id"),
    (OpencodeAdapter, [opencode_line("tool_use", {"id": "p0", "tool": "bash", "callID": "c", "state": {"status": "completed"}})],
     0, "part.state.input"),
    (OpencodeAdapter, [finish_step("p1", "stop", output="2")], 0, "part.tokens.output"),
    (OpencodeAdapter, [{"sessionID": "ses_1"}], 0, "type"),
])
def test_bad_line_is_refused_by_index(adapter: type[CliAdapter], lines: list[Event], index: int, field: str) -> None:
    """A JSON line that is not the format is refused (422) naming its index and field."""
    with pytest.raises(NotTheFormat) as refused:
        translate(adapter(), lines)
    assert refused.value.extra["index"] == index and refused.value.extra["field"] == field
    assert refused.value.extra["format"] == adapter.format


# Properties, over random bodies built from the lines the CLIs print.

texts = st.text(max_size=8)
ids = st.sampled_from(["item_0", "item_1", "item_2", "item_3"])
codex_lines = st.one_of(
    st.builds(agent_message, ids, texts),
    st.builds(reasoning, ids, texts),
    st.builds(lambda item_id, code: {"type": "item.completed", "item": {
        "id": item_id, "type": "command_execution", "command": "ls", "aggregated_output": "x", "exit_code": code}},
        ids, st.one_of(st.none(), st.integers(0, 2))),
    st.builds(lambda item_id: {"type": "item.started", "item": {"id": item_id, "type": "command_execution"}}, ids),
    st.builds(lambda item_id: {"type": "item.completed", "item": {"id": item_id, "type": "todo_list"}}, ids),
    st.builds(lambda message: {"type": "error", "message": message}, texts),
    st.just({"type": "turn.started"}),
    st.just(COMPLETED),
    st.builds(lambda message: {"type": "turn.failed", "error": {"message": message}},
              st.sampled_from(["Incomplete response returned, reason: max_output_tokens", "boom"])),
)


def _unique_items(body: list[Event]) -> list[Event]:
    """Codex numbers its items per run: one id per item (a started item keeps its id)."""
    renumbered = []
    for position, line in enumerate(body):
        if "item" in line:
            line = {**line, "item": {**line["item"], "id": f"item_{position}"}}
        renumbered.append(line)
    return [{"type": "thread.started", "thread_id": "t"}, *renumbered]


codex_bodies = st.lists(codex_lines, max_size=12).map(_unique_items)

part_ids = st.sampled_from(["p1", "p2", "p3", "p4"])
message_ids = st.sampled_from(["msg_1", "msg_2"])


def _part(kind: str, part: dict[str, Any], message_id: str) -> Event:
    line = opencode_line(kind, part)
    line["part"]["messageID"] = message_id
    return line


opencode_lines = st.one_of(
    st.builds(lambda pid, mid: _part("step_start", {"id": pid, "type": "step-start"}, mid), part_ids, message_ids),
    st.builds(lambda pid, mid, value: _part("text", {"id": pid, "type": "text", "text": value}, mid),
              part_ids, message_ids, texts),
    st.builds(lambda pid, mid, status: _part("tool_use", {
        "id": pid, "type": "tool", "tool": "bash", "callID": f"call_{pid}",
        "state": {"status": status, "input": {}, "output": "o", "error": "e"}}, mid),
        part_ids, message_ids, st.sampled_from(["running", "completed", "error"])),
    st.builds(lambda pid, mid, reason: {**finish_step(pid, reason), "part": {**finish_step(pid, reason)["part"],
                                                                             "messageID": mid}},
              part_ids, message_ids, st.sampled_from(["stop", "length", "tool-calls", "other"])),
    st.just({"type": "error", "sessionID": "ses_1", "error": {"name": "APIError", "data": {"message": "x"}}}),
)


def _unique_parts(body: list[Event]) -> list[Event]:
    """opencode gives every part its own id."""
    return [{**line, "part": {**line["part"], "id": f"p{position}"}} if "part" in line else line
            for position, line in enumerate(body)]


opencode_bodies = st.lists(opencode_lines, max_size=12).map(_unique_parts)


def _check_body(adapter: type[CliAdapter], lines: list[Event]) -> None:
    events, stop = translate(adapter(), lines)
    validate_events(events)
    event_ids = [event["eventId"] for event in events]
    assert len(set(event_ids)) == len(event_ids)
    assert all(len(event_id) <= 200 for event_id in event_ids)
    # Sent again from its start, the body makes the very same events (so it stores nothing twice).
    assert translate(adapter(), lines) == (events, stop)
    # A stop reason is set exactly when a terminal line was read, and the last turn/end says it.
    ends = [event for event in events if event["type"] == END]
    if ends and stop.stop_reason is not None:
        assert ends[-1]["stopReason"] == stop.stop_reason
    # Tool results never become output.
    assert all(block.get("type") != "tool_result" for block in final_assistant_output(events))


@settings(max_examples=200, deadline=None, database=None)
@given(codex_bodies)
def test_codex_bodies_make_valid_stable_events(lines: list[Event]) -> None:
    """Any codex body makes valid §4 events with unique eventIds, the same each time it is sent."""
    _check_body(CodexAdapter, lines)


@settings(max_examples=200, deadline=None, database=None)
@given(opencode_bodies)
def test_opencode_bodies_make_valid_stable_events(lines: list[Event]) -> None:
    """Any opencode body makes valid §4 events with unique eventIds, the same each time it is sent."""
    _check_body(OpencodeAdapter, lines)


@settings(max_examples=200, deadline=None, database=None)
@given(codex_bodies)
def test_codex_selects_the_last_answering_item(lines: list[Event]) -> None:
    """The selected output is the last non-blank agent message or command, read naively."""
    expected: list[dict[str, Any]] = []
    for line in lines:
        item = line.get("item", {})
        if line["type"] != "item.completed":
            continue
        if item["type"] == "agent_message" and item["text"].strip():
            expected = [{"type": "text", "text": item["text"]}]
        elif item["type"] == "command_execution":
            expected = shell(item["id"], "ls")
    output = final_assistant_output(translate(CodexAdapter(), lines)[0])
    assert [block for block in output if block["type"] != "reasoning"] == expected


@pytest.mark.parametrize(("cli", "adapter"), [("codex", CodexAdapter), ("opencode", OpencodeAdapter)])
def test_fixtures_are_idempotent(cli: str, adapter: type[CliAdapter]) -> None:
    """Every real stream, fed again to a fresh adapter, makes identical events and eventIds."""
    for scenario in scenarios(cli):
        first, _ = translate(adapter(), lines_of(cli, scenario))
        again, _ = translate(adapter(), lines_of(cli, scenario))
        assert first == again
        event_ids = [event["eventId"] for event in first]
        assert len(set(event_ids)) == len(event_ids)
