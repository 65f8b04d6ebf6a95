"""The claude-code CLI adapter (SPEC §16), module-level: no server, no database.

Over every recorded body of the real CLI (``tests/cli_children/fixtures/claude-code*/``) the
tests pin what the parent gets: valid §4 events, unique and stable eventIds, the output that
``lastword.rules.fold`` selects (with and without ``joinContinuations``), the stop, the error
and the usage. Then one test per rule of ``lastword.adapters.claude_code`` over small bodies
built here, each failing if its rule were broken, and a property over generated bodies.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.adapters.claude_code import ClaudeCodeAdapter
from lastword.adapters.cli_base import Made, NotTheFormat, StreamStop
from lastword.rules.events import validate_events
from lastword.rules.fold import TurnFold, final_assistant_output

FIXTURES = Path(__file__).parent / "cli_children" / "fixtures"
MODES = ["claude-code", "claude-code-partial"]

Event = dict[str, Any]

MESSAGE, RESULT, END, USER, CHUNK = "assistant/message", "tool/result", "turn/end", "user/message", "assistant/chunk"
SYSTEM, NUDGE, CLI_RESULT = "x-claude-code-system", "x-claude-code-user", "x-claude-code-result"


# -- helpers -------------------------------------------------------------------------------------

def lines_of(mode: str, scenario: str) -> list[Event]:
    text = (FIXTURES / mode / f"{scenario}.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def scenarios(mode: str) -> list[str]:
    """The recorded scenarios (a resumed session's second turn, ``<scenario>.turn2``, is its own)."""
    return sorted(path.stem for path in (FIXTURES / mode).glob("*.ndjson") if "." not in path.stem)


def run(lines: list[Event], adapter: ClaudeCodeAdapter | None = None) -> tuple[list[Made], StreamStop]:
    adapter = adapter or ClaudeCodeAdapter()
    made: list[Made] = []
    for index, line in enumerate(lines):
        made.extend(adapter.feed(index, line))
    made.extend(adapter.finish())
    return made, adapter.stop


def parent(made: list[Made]) -> list[Event]:
    return [item.event for item in made if item.child is None]


def by_run(made: list[Made]) -> dict[str | None, list[Event]]:
    runs: dict[str | None, list[Event]] = defaultdict(list)
    for item in made:
        runs[item.child].append(item.event)
    return runs


def types(events: list[Event]) -> list[str]:
    return [event["type"] for event in events]


def turn_usage(events: list[Event]) -> dict[str, int]:
    fold = TurnFold()
    for event in events:
        fold.push(event)
    return fold.usage


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in block.items() if key != "id"} for block in output]


def cli_usage(inputs: int = 0, outputs: int = 0, read: int = 0, write: int = 0) -> Event:
    return {"input_tokens": inputs, "output_tokens": outputs, "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write}


def usage(inputs: int = 0, outputs: int = 0, read: int = 0, write: int = 0) -> dict[str, int]:
    return {"inputTokens": inputs, "outputTokens": outputs, "cacheReadTokens": read, "cacheWriteTokens": write}


def assistant(message_id: str, *blocks: Event, uuid: str | None = None, parent_id: str | None = None,
              **fields: Any) -> Event:
    """One ``assistant`` line; ``fields`` go into its message (``usage``, ``stop_reason``, ``model``)."""
    line: Event = {"type": "assistant", "message": {"id": message_id, "type": "message", "role": "assistant",
                                                    "model": "claude-sonnet-4-5", "content": list(blocks), **fields},
                   "parent_tool_use_id": parent_id, "session_id": "s"}
    if uuid is not None:
        line["uuid"] = uuid
    return line


def synthetic(message_id: str, sentence: str, error: Any = "server_error", parent_id: str | None = None) -> Event:
    """The CLI's own message in place of a reply."""
    line = assistant(message_id, text(sentence), parent_id=parent_id, model="<synthetic>")
    line["error"] = error
    return line


def user(content: Any, uuid: str | None = "u", parent_id: str | None = None, **fields: Any) -> Event:
    line: Event = {"type": "user", "message": {"role": "user", "content": content}, "parent_tool_use_id": parent_id,
                   "session_id": "s", **fields}
    if uuid is not None:
        line["uuid"] = uuid
    return line


def nudge(uuid: str = "n", parent_id: str | None = None) -> Event:
    return user([text("Output token limit hit. Resume directly.")], uuid, parent_id, isSynthetic=True)


def tool_result(call_id: str, content: Any = "ok", is_error: Any = False) -> Event:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}


def stream(event: Event, uuid: str | None = None, parent_id: str | None = None) -> Event:
    line: Event = {"type": "stream_event", "event": event, "parent_tool_use_id": parent_id, "session_id": "s"}
    if uuid is not None:
        line["uuid"] = uuid
    return line


def message_start(message_id: str, inputs: int = 5, outputs: int = 1) -> Event:
    return stream({"type": "message_start", "message": {"id": message_id, "content": [],
                                                         "usage": cli_usage(inputs, outputs)}})


def message_delta(stop: str | None, outputs: int | None = None) -> Event:
    event: Event = {"type": "message_delta", "delta": {"stop_reason": stop}}
    if outputs is not None:
        event["usage"] = {"output_tokens": outputs}
    return stream(event)


def system(subtype: str, uuid: str | None = None, **fields: Any) -> Event:
    line: Event = {"type": "system", "subtype": subtype, "session_id": "s", **fields}
    if uuid is not None:
        line["uuid"] = uuid
    return line


def result(uuid: str | None = "r", subtype: str = "success", **fields: Any) -> Event:
    line: Event = {"type": "result", "subtype": subtype, "is_error": False, "session_id": "s", **fields}
    if uuid is not None:
        line["uuid"] = uuid
    return line


def agent_call(call_id: str, agent: Any = "general-purpose", name: str = "Agent") -> Event:
    return {"type": "tool_use", "id": call_id, "name": name,
            "input": {"description": "Greet", "prompt": "say hi", "subagent_type": agent}}


BASH = {"type": "tool_use", "id": "call_b", "name": "Bash", "input": {"command": "echo hi"}}


# -- the real CLI's bodies ------------------------------------------------------------------------

TOOL = {"type": "tool_call", "name": "Bash", "input": {"command": "echo hi", "description": "Print hi"}}
CUT = text("This answer is cut off at the token ceil")
PARTS = [text("Part one of a long answer, cut"), text(" part two, cut again"),
         text(" and part three, which completes the answer.")]

# scenario: (output, output with joinContinuations, stop reason, error type, error message start)
EXPECTED: dict[str, tuple[list[Event], list[Event], str, str | None, str | None]] = {
    "completion": ([text("Hello from the fake model. The answer is 42.")],
                   [text("Hello from the fake model. The answer is 42.")], "completed", None, None),
    "continued_after_ceiling": (PARTS[2:], PARTS, "completed", None, None),
    "http_500_mid_run": ([text("Running a command before the outage."), TOOL],
                         [text("Running a command before the outage."), TOOL], "error", "server_error",
                         "API Error: 500 Internal server error."),
    "http_529_mid_run": ([text("Running a command before the overload."), TOOL],
                         [text("Running a command before the overload."), TOOL], "error", "server_error",
                         "API Error: 529 Overloaded."),
    "max_tokens_partial": ([CUT], [CUT] * 4, "max_tokens", "max_output_tokens",
                           "API Error: Claude's response exceeded the 32000 output token maximum."),
    # Only the partial mode printed the text before the error (as chunks): see below.
    "sse_error_mid_stream": ([], [], "error", "server_error", "API Error: 529 Overloaded."),
    "subagent": ([text("Noted: the background subagent has finished.")],
                 [text("Noted: the background subagent has finished.")], "completed", None, None),
    "subagent_foreground": ([text("The subagent replied: hello from the subagent.")],
                            [text("The subagent replied: hello from the subagent.")], "completed", None, None),
    "tool_then_empty_end_turn": ([text("Let me run a command first."), TOOL],
                                 [text("Let me run a command first."), TOOL], "completed", None, None),
    "tool_then_empty_max_tokens": ([TOOL], [TOOL], "max_tokens", "max_output_tokens",
                                   "API Error: Claude's response exceeded the 32000 output token maximum."),
    # The CLI prints the call the ceiling cut (its input an __unparsedToolInput), runs it and answers
    # result: "" after the empty replies; the text before the cut call is the child's last word.
    "tool_cut_at_ceiling": ([text("I will check with a command.")], [text("I will check with a command.")],
                            "completed", None, None),
    # The same cut call with --max-turns 1: error_max_turns, its errors[] text the turn's error.
    "tool_cut_max_turns": ([text("I will check with a command.")], [text("I will check with a command.")],
                           "max_turns", "error_max_turns", "Reached maximum number of turns (1)"),
    # The first invocation of a resumed session (its second is resume.turn2, below).
    "resume": ([text("First turn: the answer is 42.")], [text("First turn: the answer is 42.")],
               "completed", None, None),
}
PARTIAL_OUTPUT = {"sse_error_mid_stream": [text("The stream starts and then")]}


def test_every_fixture_has_a_case() -> None:
    """No recorded scenario goes untested."""
    assert scenarios("claude-code") == sorted(EXPECTED) == scenarios("claude-code-partial")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_fixture_translation(mode: str, scenario: str) -> None:
    """Each real body: valid events, unique eventIds per run, the output, stop, error and usage."""
    output, joined, stop_reason, error_type, error_start = EXPECTED[scenario]
    if mode == "claude-code-partial" and scenario in PARTIAL_OUTPUT:
        output = joined = PARTIAL_OUTPUT[scenario]
    lines = lines_of(mode, scenario)
    made, stop = run(lines)
    for events in by_run(made).values():
        validate_events(events)
        event_ids = [event["eventId"] for event in events]
        assert len(set(event_ids)) == len(event_ids)
        assert all(event["source"]["format"] == "claude-code" for event in events)
    events = parent(made)
    assert without_ids(final_assistant_output(events)) == output
    assert without_ids(final_assistant_output(events, join_continuations=True)) == joined
    assert stop.provider == lines[-1]["subtype"] and stop.stop_reason == stop_reason
    assert [event["stopReason"] for event in events if event["type"] == END] == [stop_reason]
    assert events[-1]["type"] == END
    if error_type is None:
        assert stop.error is None and "error" not in events[-1]
    else:
        assert stop.error["type"] == error_type and stop.error["message"].startswith(error_start)
        assert events[-1]["error"] == stop.error
    # §4's sum over the turn is the CLI's own total: the sum of its result lines' usage.
    totals = [line["usage"] for line in lines if line["type"] == "result"]
    assert turn_usage(events) == {name: sum(total[key] for total in totals) for name, key in (
        ("inputTokens", "input_tokens"), ("outputTokens", "output_tokens"),
        ("cacheReadTokens", "cache_read_input_tokens"), ("cacheWriteTokens", "cache_creation_input_tokens"))}
    # Every raw line is in some stored event's source, except the stream events that add nothing.
    kept = [raw for events in by_run(made).values() for event in events for raw in event["source"]["events"]]
    assert all(line in kept for line in lines if line["type"] != "stream_event")
    # Fed again to a fresh adapter, the body makes the very same events (a retry stores nothing twice).
    assert run(lines) == (made, stop)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", ["subagent", "subagent_foreground"])
def test_fixture_subagent_is_a_child(mode: str, scenario: str) -> None:
    """The Agent call's lines go to its child run, with its type, its output and its end."""
    lines = lines_of(mode, scenario)
    call = next(block["id"] for line in lines if line["type"] == "assistant"
                for block in line["message"]["content"] if block["type"] == "tool_use")
    made, _ = run(lines)
    children = [item for item in made if item.child is not None]
    assert {item.child for item in children} == {call} and {item.agent for item in children} == {"general-purpose"}
    child = [item.event for item in children]
    assert child[-1]["type"] == END and child[-1]["stopReason"] == "completed"
    assert final_assistant_output(child) == [text("Hello from the subagent.")]
    assert types(child).count(END) == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", ["tool_cut_at_ceiling", "tool_cut_max_turns"])
def test_fixture_a_call_cut_by_the_ceiling_is_not_output(mode: str, scenario: str) -> None:
    """The cut call stays in its message's source, out of its content; the message is max_tokens."""
    lines = lines_of(mode, scenario)
    cut = next(line for line in lines if line["type"] == "assistant"
               and any("__unparsedToolInput" in block.get("input", {}) for block in line["message"]["content"]))
    made, _ = run(lines)
    message = next(event for event in parent(made) if event["type"] == MESSAGE
                   and event["eventId"] == cut["message"]["id"])
    assert message["message"]["content"] == [text("I will check with a command.")]
    assert message["message"]["stopReason"] == "max_tokens"
    assert cut in message["source"]["events"]


@pytest.mark.parametrize("mode", MODES)
def test_fixture_a_backgrounded_subagents_usage_is_the_notifications(mode: str) -> None:
    """The child's usage sums to the total its task notification reports."""
    lines = lines_of(mode, "subagent")
    notification = next(line for line in lines if line.get("subtype") == "task_notification")
    made, _ = run(lines)
    child = [item.event for item in made if item.child is not None]
    assert sum(turn_usage(child).values()) == notification["usage"]["total_tokens"]


@pytest.mark.parametrize("mode", MODES)
def test_fixture_only_the_usage_remainders_are_marked_as_such(mode: str) -> None:
    """The usage-only messages that bring a turn's or a backgrounded child's sum to the CLI's total
    are marked ``remainder`` (the ingest lowers them when a transcript's replies were kept instead
    of the stdout's), and nothing else is."""
    seen: set[str | None] = set()
    for scenario in scenarios(mode):
        made, _ = run(lines_of(mode, scenario))
        marked = {(item.child, item.event["eventId"]) for item in made if item.remainder}
        remainders = {(item.child, item.event["eventId"]) for item in made
                      if item.event["type"] == "assistant/message" and item.event["eventId"].endswith(":usage")}
        assert marked == remainders, scenario
        seen |= {child for child, _ in marked}
    assert None in seen and len(seen) > 1  # some run's and some child's remainder were made


@pytest.mark.parametrize("mode", MODES)
def test_fixture_a_resumed_sessions_second_turn_has_its_own_ids(mode: str) -> None:
    """Fed as the run's turn 2, the second invocation's events share no eventId with the first's."""
    first, _ = run(lines_of(mode, "resume"))
    second, stop = run(lines_of(mode, "resume.turn2"), ClaudeCodeAdapter(turn=2))
    ids = {item.event["eventId"] for item in first}
    assert not ids & {item.event["eventId"] for item in second}
    assert final_assistant_output(parent(second)) == [text("Second turn: still 42.")]
    assert stop.stop_reason == "completed"
    # The first turn's ids are the CLI's own, as before: a body of turn 1 sent again dedupes.
    assert first == run(lines_of(mode, "resume"), ClaudeCodeAdapter(turn=1))[0]


def test_fixture_foreground_subagent_ends_at_its_tool_result() -> None:
    """A foreground subagent ends at the parent's tool result, with tool_use_result's usage."""
    for mode in MODES:
        lines = lines_of(mode, "subagent_foreground")
        answer = next(index for index, line in enumerate(lines) if line.get("tool_use_result"))
        adapter = ClaudeCodeAdapter()
        for index, line in enumerate(lines[:answer]):
            assert all(item.event["type"] != END for item in adapter.feed(index, line))
        made = adapter.feed(answer, lines[answer])
        child = [item.event for item in made if item.child is not None]
        expected = lines[answer]["tool_use_result"]["usage"]
        assert types(child) == [MESSAGE, END]
        assert child[0]["message"]["usage"] == usage(expected["input_tokens"], expected["output_tokens"])


# -- blocks ----------------------------------------------------------------------------------------

def test_blocks_are_translated_and_gathered_by_message_id() -> None:
    """text, tool_use → tool_call, thinking → reasoning (+signature), others as sent; one message."""
    redacted = {"type": "redacted_thinking", "data": "xyz"}
    lines = [
        assistant("m1", {"type": "thinking", "thinking": "hm", "signature": "sig"}, uuid="a1", usage=cli_usage(3, 1)),
        assistant("m1", {"type": "thinking", "thinking": "more", "signature": 7}, uuid="a2", usage=cli_usage(9, 9)),
        assistant("m1", text("hello"), uuid="a3"),
        assistant("m1", BASH, redacted, uuid="a4"),
    ]
    made, _ = run(lines)
    events = parent(made)
    assert events == [{"type": MESSAGE, "eventId": "m1", "message": {"id": "m1", "content": [
        {"type": "reasoning", "text": "hm", "signature": "sig"}, {"type": "reasoning", "text": "more"},
        text("hello"), {"type": "tool_call", "id": "call_b", "name": "Bash", "input": {"command": "echo hi"}},
        redacted], "usage": usage(3, 1)}, "source": {"format": "claude-code", "events": lines}}]
    validate_events(events)


def test_a_message_stop_reason_on_the_line_is_kept_when_section_6_names_it() -> None:
    """An assistant line's own stop_reason: §6's words kept, the context window a max_tokens, others not."""
    for stop, expected in (("end_turn", "end_turn"), ("refusal", "refusal"), ("stop_sequence", "stop_sequence"),
                           ("max_tokens", "max_tokens"), ("model_context_window_exceeded", "max_tokens"),
                           ("tool_use", None), (None, None)):
        made, _ = run([assistant("m1", text("a"), stop_reason=stop), user("hi")])
        assert parent(made)[0]["message"].get("stopReason") == expected, stop


# -- when a reply is stored -------------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "answered"), [
    (user("thanks", "u2"), True),
    (user([text("thanks")], "u2"), True),
    (assistant("m2", text("next")), True),
    (stream({"type": "message_stop"}), True),
    (system("init", "i1"), True),
    (result(), True),
    (system("status", "s1"), False),
    (system("api_retry", "s1"), False),
    (nudge(), False),
    (stream({"type": "content_block_stop", "index": 0}), False),
    (stream({"type": "ping"}), False),
])
def test_a_reply_is_stored_when_answered(answer: Event, answered: bool) -> None:
    """Stored at the first line that may answer it; a nudge, a system line or a stream event does not."""
    adapter = ClaudeCodeAdapter()
    assert adapter.feed(0, assistant("m1", text("hello"))) == []
    made = adapter.feed(1, answer)
    stored = [item.event for item in made if item.event.get("eventId") == "m1"]
    assert len(stored) == int(answered)
    if answered:
        assert made[0].event["eventId"] == "m1"  # before what answered it
    rest = adapter.finish()
    assert len([item for item in rest if item.event.get("eventId") == "m1"]) == int(not answered)


def test_a_reply_is_stored_at_the_end_of_the_body() -> None:
    adapter = ClaudeCodeAdapter()
    adapter.feed(0, assistant("m1", text("hello")))
    stored = adapter.finish()
    assert [item.event["eventId"] for item in stored] == ["m1"]
    assert "stopReason" not in stored[0].event["message"]  # the end of the body is no next reply
    assert adapter.stop == StreamStop(None, None)
    assert adapter.finish() == []  # nothing twice


def test_a_reply_of_another_context_is_not_answered() -> None:
    """A subagent's line does not answer the parent's reply, nor the parent's line the subagent's."""
    adapter = ClaudeCodeAdapter()
    adapter.feed(0, assistant("m1", agent_call("call_a")))
    assert adapter.feed(1, assistant("c1", text("child"), parent_id="call_a")) == []
    assert adapter.feed(2, user("child task", "u1", parent_id="call_a"))[0].event["eventId"] == "c1"
    assert [item.event["eventId"] for item in adapter.finish()] == ["m1"]


# -- the ceiling, inferred ----------------------------------------------------------------------------

def test_a_reply_answered_by_the_next_is_cut_by_the_ceiling() -> None:
    """Only nudges and system lines between two replies: the first is stored max_tokens."""
    lines = [system("init", "i"), assistant("m1", text("part one")), nudge("n1"), system("status", "s1"),
             assistant("m2", text(" part two")), result()]
    events = parent(run(lines)[0])
    messages = [event["message"] for event in events if event["type"] == MESSAGE]
    assert [message.get("stopReason") for message in messages] == ["max_tokens", None]
    assert final_assistant_output(events, join_continuations=True) == [text("part one"), text(" part two")]
    assert final_assistant_output(events) == [text(" part two")]


def test_a_reply_answered_by_the_clis_own_message_is_cut() -> None:
    made, _ = run([assistant("m1", text("part")), synthetic("m2", "API Error: boom")])
    assert parent(made)[0]["message"]["stopReason"] == "max_tokens"


def test_a_reply_with_a_tool_call_is_never_marked_cut() -> None:
    made, _ = run([assistant("m1", text("let me"), BASH), assistant("m2", text("next"))])
    assert "stopReason" not in parent(made)[0]["message"]


def test_a_reply_answered_otherwise_is_not_marked_cut() -> None:
    for answer in (user("hi"), system("init", "i"), stream({"type": "message_stop"}), result()):
        made, _ = run([assistant("m1", text("a")), answer])
        assert "stopReason" not in parent(made)[0]["message"], answer


def test_message_delta_stop_is_used_instead() -> None:
    """With partial messages the reply's real stop reason is used, even when the next reply follows."""
    lines = [message_start("m1"), assistant("m1", text("a")), message_delta("end_turn", 4),
             assistant("m2", text("b"))]
    message = parent(run(lines)[0])[0]["message"]
    assert message["stopReason"] == "end_turn"
    assert message["usage"] == usage(5, 4)
    for stop, expected in (("max_tokens", "max_tokens"), ("refusal", "refusal"),
                           ("model_context_window_exceeded", "max_tokens")):
        lines = [message_start("m1"), assistant("m1", text("a")), message_delta(stop), user("next")]
        assert parent(run(lines)[0])[0]["message"]["stopReason"] == expected
    # A stop §6 does not name (tool_use) is not recorded, and the ceiling is not inferred from it.
    lines = [message_start("m1"), assistant("m1", BASH), message_delta("tool_use"), stream({"type": "message_stop"})]
    assert "stopReason" not in parent(run(lines)[0])[0]["message"]


def test_message_delta_without_a_reply_or_with_odd_fields_is_ignored() -> None:
    lines = [message_delta("end_turn", 3), stream({"type": "message_delta", "delta": "x", "usage": "y"})]
    assert run(lines)[0] == []
    lines = [message_start("m1"), stream({"type": "message_delta", "delta": "x", "usage": "y"}),
             stream({"type": "message_stop"})]
    assert parent(run(lines)[0])[0]["message"] == {"id": "m1", "content": [], "usage": usage(5, 1)}


# -- the CLI's own messages ----------------------------------------------------------------------------

def test_the_clis_own_message_is_stored_empty_with_its_error() -> None:
    line = synthetic("m9", "API Error: 500 oops", "server_error")
    line["message"]["content"] = [text("API Error: "), "junk", {"type": "image"}, text("500 oops")]
    made, _ = run([line])
    assert parent(made) == [{"type": MESSAGE, "eventId": "m9", "message": {
        "id": "m9", "content": [], "error": {"type": "server_error", "message": "API Error: 500 oops"}},
        "source": {"format": "claude-code", "events": [line]}}]


def test_a_synthetic_model_without_an_error_field_is_an_api_error() -> None:
    line = assistant("m9", text("API Error: x"), model="<synthetic>")
    assert parent(run([line])[0])[0]["message"]["error"] == {"type": "api_error", "message": "API Error: x"}
    # An error field that is not a string makes the same type.
    assert parent(run([synthetic("m9", "x", {"code": 1})])[0])[0]["message"]["error"]["type"] == "api_error"


def test_an_error_field_alone_marks_the_clis_own_message() -> None:
    line = assistant("m9", text("API Error: cut"))
    line["error"] = "max_output_tokens"
    events, stop = run([line, result(is_error=True)])
    assert events[0].event["message"]["content"] == []
    assert stop.stop_reason == "max_tokens" and stop.error == {"type": "max_output_tokens", "message": "API Error: cut"}
    # error: null is not an error.
    plain = assistant("m9", text("fine"))
    plain["error"] = None
    assert parent(run([plain])[0])[0]["message"]["content"] == [text("fine")]


def test_the_clis_own_message_of_a_subagent_goes_to_its_child() -> None:
    made, _ = run([assistant("m1", agent_call("call_a")), synthetic("m9", "API Error", parent_id="call_a")])
    assert [(item.child, item.event["eventId"]) for item in made] == [("call_a", "m9"), (None, "m1")]


# -- user lines and tool results -------------------------------------------------------------------------

def test_user_lines() -> None:
    """isSynthetic user lines are x-claude-code-user; others user/message with their content."""
    nudge_line = nudge("n1")
    made, _ = run([nudge_line, user("hello", "u1"), user([text("a"), tool_result("c")], "u2"),
                   user([], "u3")])
    assert parent(made) == [
        {"type": NUDGE, "eventId": "n1", "source": {"format": "claude-code", "events": [nudge_line]}},
        {"type": USER, "eventId": "u1", "message": {"content": "hello"},
         "source": {"format": "claude-code", "events": [user("hello", "u1")]}},
        {"type": USER, "eventId": "u2", "message": {"content": [text("a"), tool_result("c")]},
         "source": {"format": "claude-code", "events": [user([text("a"), tool_result("c")], "u2")]}},
        {"type": USER, "eventId": "u3", "message": {"content": []},
         "source": {"format": "claude-code", "events": [user([], "u3")]}},
    ]
    # isSynthetic only when it is true.
    assert parent(run([user("x", "u1", isSynthetic="true")])[0])[0]["type"] == USER


def test_a_nudge_of_a_subagent_goes_to_its_child() -> None:
    made, _ = run([nudge("n1", parent_id="call_a")])
    assert [(item.child, item.event["type"]) for item in made] == [("call_a", NUDGE)]


def test_tool_results() -> None:
    """One tool/result a block: the line's uuid, ``:N`` when several; content as §4 takes it."""
    line = user([tool_result("c1", "out"), tool_result("c2", [text("x")], True), tool_result("c3", None, "yes"),
                 tool_result("c4", 42), tool_result("c5", [{"no": "type"}])], "u1")
    events = parent(run([line])[0])
    assert [(e["eventId"], e["toolCallId"], e["content"], e["isError"]) for e in events] == [
        ("u1:0", "c1", "out", False), ("u1:1", "c2", [text("x")], True), ("u1:2", "c3", "", False),
        ("u1:3", "c4", "42", False), ("u1:4", "c5", "[{'no': 'type'}]", False)]
    assert all(event["source"] == {"format": "claude-code", "events": [line]} for event in events)
    validate_events(events)
    single = parent(run([user([tool_result("c1")], "u1")])[0])
    assert single == [{"type": RESULT, "eventId": "u1", "toolCallId": "c1", "content": "ok", "isError": False,
                       "source": {"format": "claude-code", "events": [user([tool_result("c1")], "u1")]}}]


def test_a_tool_result_answers_the_reply() -> None:
    made, _ = run([assistant("m1", BASH), user([tool_result("call_b")], "u1")])
    assert [item.event["eventId"] for item in made] == ["m1", "u1"]


# -- stream events ---------------------------------------------------------------------------------------

def test_stream_deltas_are_chunks_and_other_stream_events_are_not_stored() -> None:
    lines = [
        stream({"type": "content_block_start", "index": 0, "content_block": text("")}, "e0"),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}, "e1"),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
               "e2"),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                                     "partial_json": "{"}}, "e3"),
        stream({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
               "e4"),
        stream({"type": "content_block_stop", "index": 0}, "e5"),
        stream({"type": "ping"}, "e6"),
    ]
    events = parent(run(lines)[0])
    assert events == [
        {"type": CHUNK, "delta": {"type": "text", "text": "Hel"}, "eventId": "e1",
         "source": {"format": "claude-code", "events": [lines[1]]}},
        {"type": CHUNK, "delta": {"type": "reasoning", "text": "hm"}, "eventId": "e2",
         "source": {"format": "claude-code", "events": [lines[2]]}},
    ]


def test_a_subagents_chunks_go_to_its_child() -> None:
    line = stream({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}, "e1", "call_a")
    assert [(item.child, item.event["type"]) for item in run([line])[0]] == [("call_a", CHUNK)]


def test_an_empty_reply_is_stored_empty_with_its_usage_and_stop() -> None:
    """message_start … message_stop with no assistant line: an empty message with its usage and stop."""
    lines = [message_start("m1", 7, 1), message_delta("end_turn", 3), stream({"type": "message_stop"}, "e9")]
    adapter = ClaudeCodeAdapter()
    assert adapter.feed(0, lines[0]) == [] and adapter.feed(1, lines[1]) == []
    made = adapter.feed(2, lines[2])
    assert [item.event for item in made] == [{"type": MESSAGE, "eventId": "m1", "message": {
        "id": "m1", "content": [], "usage": usage(7, 3), "stopReason": "end_turn"},
        "source": {"format": "claude-code", "events": []}}]
    # message_start without usage: none.
    start = stream({"type": "message_start", "message": {"id": "m1"}})
    assert parent(run([start, stream({"type": "message_stop"})])[0])[0]["message"] == {"id": "m1", "content": []}


def test_message_start_stores_the_reply_before_it() -> None:
    """A new message_start answers a reply still open (cut: nothing came between)."""
    made, _ = run([assistant("m1", text("a")), message_start("m2")])
    assert parent(made)[0]["eventId"] == "m1" and parent(made)[0]["message"]["stopReason"] == "max_tokens"


def test_message_delta_usage_keeps_message_start_counts() -> None:
    """message_delta's counts replace those message_start gave; the others stay."""
    start = stream({"type": "message_start", "message": {"id": "m1", "usage": cli_usage(7, 1, 2, 3)}})
    delta = stream({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9, "input_tokens": 8}})
    message = parent(run([start, delta, stream({"type": "message_stop"})])[0])[0]["message"]
    assert message["usage"] == usage(8, 9, 2, 3)


def test_message_delta_usage_without_an_earlier_usage_is_whole() -> None:
    """A reply whose lines carried no usage takes message_delta's as a whole usage (input 0)."""
    lines = [assistant("m1", text("a")), message_delta(None, 4), stream({"type": "message_stop"})]
    events = parent(run(lines)[0])
    assert events[0]["message"]["usage"] == {"inputTokens": 0, "outputTokens": 4}
    validate_events(events)


# -- the turn's end ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("before", "line", "stop_reason", "error"), [
    ([], result(), "completed", None),
    ([], result(stop_reason="end_turn", result="fine"), "completed", None),
    ([], result(subtype="error_max_turns", is_error=True), "max_turns", None),
    ([], result(subtype="error_max_turns", is_error=True, errors=[7, "Reached maximum number of turns (1)", "and"]),
     "max_turns", {"type": "error_max_turns", "message": "Reached maximum number of turns (1)\nand"}),
    ([], result(subtype="error_max_turns", is_error=True, errors=[7]), "max_turns", None),
    ([], result(subtype="error_max_turns", is_error=True, errors="Reached"), "max_turns", None),
    ([], result(stop_reason="max_tokens"), "max_tokens", None),
    ([synthetic("m9", "API Error: ceiling", "max_output_tokens")], result(is_error=True), "max_tokens",
     {"type": "max_output_tokens", "message": "API Error: ceiling"}),
    ([synthetic("m9", "API Error: 500", "server_error")], result(is_error=True, result="API Error: 500"), "error",
     {"type": "server_error", "message": "API Error: 500"}),
    ([], result(is_error=True, result="boom"), "error", {"type": "success", "message": "boom"}),
    ([], result(is_error=True, result=None), "error", {"type": "success", "message": "success"}),
    ([], result(subtype="error_during_execution"), "error",
     {"type": "error_during_execution", "message": "error_during_execution"}),
    ([], result(is_error="true"), "completed", None),
    ([], result(stop_reason="refusal"), "refusal", None),
    ([synthetic("m9", "odd", "server_error")], result(), "completed", None),
])
def test_result_mapping(before: list[Event], line: Event, stop_reason: str, error: Event | None) -> None:
    made, stop = run([*before, line])
    assert stop == StreamStop(line["subtype"], stop_reason, error)
    end = parent(made)[-1]
    assert end["type"] == END and end["stopReason"] == stop_reason and end.get("error") == error
    assert end["eventId"] == "r:end" and end["source"] == {"format": "claude-code", "events": []}


def test_the_turn_ends_when_the_body_ends_after_a_result() -> None:
    """Not at the result: a second result (a backgrounded subagent's new CLI turn) gives the stop."""
    adapter = ClaudeCodeAdapter()
    first = result("r1", usage=cli_usage(10, 2, 1, 0))
    made = adapter.feed(0, first)
    assert types([item.event for item in made]) == [CLI_RESULT]
    assert made[0].event == {"type": CLI_RESULT, "eventId": "r1", "source": {"format": "claude-code",
                                                                             "events": [first]}}
    assert adapter.stop.stop_reason == "completed"  # known at once
    adapter.feed(1, result("r2", is_error=True, result="late", usage=cli_usage(5, 1, 0, 4)))
    assert adapter.stop.stop_reason == "error"
    end = adapter.finish()
    assert [item.event for item in end] == [{"type": END, "eventId": "r2:end", "stopReason": "error",
                                             "source": {"format": "claude-code", "events": []},
                                             "usage": usage(15, 3, 1, 4),
                                             "error": {"type": "success", "message": "late"}}]
    assert adapter.finish() == []  # made once


def test_a_usage_without_a_count_gives_it_as_0() -> None:
    """A usage missing its input or output count gives it as 0 (§4 needs both)."""
    for counts, expected in (({"input_tokens": 3}, {"inputTokens": 3, "outputTokens": 0}),
                             ({"output_tokens": 2}, {"inputTokens": 0, "outputTokens": 2}),
                             ({}, {"inputTokens": 0, "outputTokens": 0})):
        made, _ = run([assistant("m1", text("a"), usage=counts)])
        assert parent(made)[0]["message"]["usage"] == expected


def test_a_result_without_usage_ends_without_usage() -> None:
    made, _ = run([assistant("m1", text("a"), usage=cli_usage(4, 2)), result()])
    events = parent(made)
    assert types(events) == [MESSAGE, CLI_RESULT, END] and "usage" not in events[-1]


def test_a_result_usage_with_only_some_counts() -> None:
    """A result usage without cache counts: the turn/end gives input and output (0 when absent)."""
    made, _ = run([result(usage={"output_tokens": 3})])
    assert parent(made)[-1]["usage"] == {"inputTokens": 0, "outputTokens": 3}


def test_no_turn_end_without_a_result() -> None:
    made, stop = run([assistant("m1", text("a")), user("x")])
    assert END not in types(parent(made)) and stop == StreamStop(None, None)


# -- usage ----------------------------------------------------------------------------------------------

def test_the_usage_remainder_is_a_message_when_non_zero_and_replies_were_stored() -> None:
    lines = [assistant("m1", text("a"), usage=cli_usage(10, 1, 2, 0)), result(usage=cli_usage(15, 4, 2, 3))]
    events = parent(run(lines)[0])
    assert types(events) == [MESSAGE, CLI_RESULT, MESSAGE, END]
    assert events[2] == {"type": MESSAGE, "eventId": "r:end:usage", "message": {
        "content": [], "usage": usage(5, 3, 0, 3)}, "source": {"format": "claude-code", "events": []}}
    assert events[3]["usage"] == usage(15, 4, 2, 3)
    assert turn_usage(events) == usage(15, 4, 2, 3)
    assert final_assistant_output(events) == [text("a")]


def test_no_remainder_when_the_replies_carried_it_all() -> None:
    lines = [assistant("m1", text("a"), usage=cli_usage(10, 1)), result(usage=cli_usage(10, 1))]
    assert types(parent(run(lines)[0])) == [MESSAGE, CLI_RESULT, END]


def test_no_remainder_when_a_reply_carried_more() -> None:
    """A count the replies exceed leaves no negative remainder: that count is 0."""
    lines = [assistant("m1", text("a"), usage=cli_usage(20, 1)), result(usage=cli_usage(10, 4))]
    assert parent(run(lines)[0])[2]["message"]["usage"] == usage(0, 3)


def test_no_remainder_without_a_stored_reply() -> None:
    """Without messages the fold counts the turn/end's own usage: no remainder message."""
    events = parent(run([result(usage=cli_usage(10, 4))])[0])
    assert types(events) == [CLI_RESULT, END] and turn_usage(events) == usage(10, 4)


def test_the_clis_own_message_counts_as_a_stored_reply_for_the_remainder() -> None:
    events = parent(run([synthetic("m9", "API Error"), result(usage=cli_usage(10, 4))])[0])
    assert types(events) == [MESSAGE, CLI_RESULT, MESSAGE, END] and turn_usage(events) == usage(10, 4)


def test_a_subagents_replies_do_not_count_against_the_parents_total() -> None:
    lines = [assistant("c1", text("hi"), parent_id="call_a", usage=cli_usage(3, 3)),
             assistant("m1", text("a"), usage=cli_usage(10, 1)), result(usage=cli_usage(10, 1))]
    made, _ = run(lines)
    assert types(parent(made)) == [MESSAGE, CLI_RESULT, END]
    lines = [assistant("c1", text("hi"), parent_id="call_a", usage=cli_usage(3, 3)), result(usage=cli_usage(10, 1))]
    assert types(parent(run(lines)[0])) == [CLI_RESULT, END]


# -- subagents ---------------------------------------------------------------------------------------------

def test_two_results_in_one_line_end_each_child_with_its_own_content() -> None:
    """Each tool_result block ends its own child with its own content; the line-level
    tool_use_result (one result's) is given to neither."""
    line = user([tool_result("call_a", "report A"), tool_result("call_b", "report B")], "t1",
                tool_use_result={"status": "completed", "content": [text("report A")], "usage": cli_usage(9, 9)})
    made, _ = run([assistant("m1", agent_call("call_a"), agent_call("call_b")),
                   assistant("s1", text("working"), parent_id="call_a"),
                   assistant("s2", text("working too"), parent_id="call_b"), line])
    runs = by_run(made)
    for call, report in (("call_a", "report A"), ("call_b", "report B")):
        assert final_assistant_output(runs[call]) == [text(report)]
        assert types(runs[call])[-1] == END and types(runs[call]).count(END) == 1
        assert all("usage" not in event.get("message", {}) for event in runs[call])
    output_ids = [event["eventId"] for events in runs.values() for event in events if event["type"] == MESSAGE]
    assert "t1:0:output" in output_ids and "t1:1:output" in output_ids


def test_a_subagent_line_after_its_child_ended_is_kept_on_the_parent() -> None:
    """Never sent to the ended child (whose run refuses it): kept as x-claude-code-late-subagent."""
    late = [assistant("s9", text("late"), uuid="late1", parent_id="call_a"),
            stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
                   "late2", parent_id="call_a"),
            user("late words", "late3", parent_id="call_a")]
    lines = [assistant("m1", agent_call("call_a")), assistant("s1", text("hi"), parent_id="call_a"),
             foreground("call_a", tool_result("call_a", "done")), *late, result()]
    adapter = ClaudeCodeAdapter()
    made, _ = run(lines, adapter)
    runs = by_run(made)
    assert types(runs["call_a"])[-1] == END
    kept = [event for event in runs[None] if event["type"] == "x-claude-code-late-subagent"]
    assert [event["eventId"] for event in kept] == ["late1", "late2", "late3"]
    assert [event["source"]["events"] for event in kept] == [[line] for line in late]
    assert adapter.lines_read == len(lines)  # the late delta, handed on by the fast path, counted once


def test_a_backgrounded_subagents_notification_total_completes_its_usage() -> None:
    """The notification's total_tokens less what the child's replies carried comes as output."""
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a", "launched"), {"status": "async_launched"}),
             assistant("s1", text("hi"), parent_id="call_a", usage=cli_usage(50, 1)),
             system("task_notification", "tn", tool_use_id="call_a", status="completed",
                    usage={"total_tokens": 56, "tool_uses": 0})]
    runs = by_run(run(lines)[0])
    assert turn_usage(runs["call_a"]) == usage(50, 6)
    usage_only = [event for event in runs["call_a"] if event["eventId"] == "tn:usage"]
    assert usage_only == [{"type": MESSAGE, "eventId": "tn:usage",
                           "message": {"content": [], "usage": {"inputTokens": 0, "outputTokens": 5}},
                           "source": {"format": "claude-code", "events": [lines[3]]}}]
    notification = system("task_notification", "tn", tool_use_id="call_a", status="completed",
                          usage={"total_tokens": 52})
    assert turn_usage(by_run(run([*lines[:3], notification])[0])["call_a"]) == usage(50, 2)
    for total in (51, 40, "56", None):
        notification = system("task_notification", "tn", tool_use_id="call_a", status="completed",
                              usage={"total_tokens": total})
        child = by_run(run([*lines[:3], notification])[0])["call_a"]
        assert turn_usage(child) == usage(50, 1), total
        assert not any(event["eventId"] == "tn:usage" for event in child), total


def foreground(call_id: str, block: Event, tool_use_result: Any = None, uuid: str = "t1") -> Event:
    line = user([block], uuid)
    if tool_use_result is not None:
        line["tool_use_result"] = tool_use_result
    return line


@pytest.mark.parametrize("tool", ["Agent", "Task"])
def test_a_foreground_subagent(tool: str) -> None:
    """Its lines go to its child run with the call's subagent_type; it ends at the tool result."""
    answer = foreground("call_a", tool_result("call_a", "raw"), {
        "status": "completed", "content": [text("Hello.")],
        "usage": {**cli_usage(12, 6, 1, 2), "service_tier": "standard"}})
    lines = [assistant("m1", agent_call("call_a", "helper", tool)), user("the task", "u1", parent_id="call_a"),
             assistant("c1", text("working"), parent_id="call_a"), answer]
    made, _ = run(lines)
    assert [(item.child, item.agent, item.event["type"], item.event["eventId"]) for item in made] == [
        ("call_a", "helper", USER, "u1"), (None, None, MESSAGE, "m1"), (None, None, RESULT, "t1"),
        ("call_a", "helper", MESSAGE, "c1"), ("call_a", "helper", MESSAGE, "t1:output"),
        ("call_a", "helper", END, "t1:end")]
    assert made[4].event == {"type": MESSAGE, "eventId": "t1:output", "message": {
        "content": [text("Hello.")], "usage": usage(12, 6, 1, 2)}, "source": {"format": "claude-code", "events": []}}
    assert made[5].event == {"type": END, "eventId": "t1:end", "stopReason": "completed",
                             "source": {"format": "claude-code", "events": []}}
    # The child's reply was not cut: its tool result answered it.
    assert "stopReason" not in made[3].event["message"]


def test_a_foreground_subagent_that_failed() -> None:
    made, _ = run([assistant("m1", agent_call("call_a")),
                   foreground("call_a", tool_result("call_a", "it broke", True))])
    child = [item.event for item in made if item.child == "call_a"]
    assert child[0]["message"] == {"content": [text("it broke")]}
    assert child[1]["stopReason"] == "error" and child[1]["error"] == {
        "type": "subagent_error", "message": "the subagent's tool call ended in an error"}


@pytest.mark.parametrize(("block_content", "tool_use_result", "output"), [
    ("plain", None, [text("plain")]),
    ("  ", None, []),
    ([text("a"), {"no": "type"}, "x", {"type": "image", "source": {}}], None,
     [text("a"), {"type": "image", "source": {}}]),
    (None, None, []),
    ("fallback", {"status": "completed", "content": []}, [text("fallback")]),
    ("fallback", {"status": "completed", "content": "not blocks"}, [text("fallback")]),
    ("fallback", "not an object", [text("fallback")]),
])
def test_a_foreground_subagents_output(block_content: Any, tool_use_result: Any, output: list[Event]) -> None:
    """tool_use_result.content when it holds blocks, else the tool result's own content."""
    made, _ = run([assistant("m1", agent_call("call_a")),
                   foreground("call_a", tool_result("call_a", block_content), tool_use_result)])
    child = [item.event for item in made if item.child == "call_a"]
    assert child[0]["message"] == {"content": output}
    validate_events(child)


@pytest.mark.parametrize("counts", [
    {"input_tokens": 3},  # no output count: no usage
    {"input_tokens": -1, "output_tokens": 2},
    {"input_tokens": 1, "output_tokens": True},
    {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": "3"},
])
def test_a_foreground_subagents_usage_is_left_out_unless_whole(counts: Event) -> None:
    made, _ = run([assistant("m1", agent_call("call_a")),
                   foreground("call_a", tool_result("call_a"), {"content": [text("x")], "usage": counts})])
    assert "usage" not in [item.event for item in made if item.child == "call_a"][0]["message"]


def test_a_foreground_subagents_usage_without_cache_counts() -> None:
    made, _ = run([assistant("m1", agent_call("call_a")),
                   foreground("call_a", tool_result("call_a"), {"content": [text("x")],
                                                                "usage": {"input_tokens": 3, "output_tokens": 2}})])
    assert [item.event for item in made if item.child == "call_a"][0]["message"]["usage"] == {
        "inputTokens": 3, "outputTokens": 2}


def test_a_tool_result_of_another_tool_ends_no_child() -> None:
    made, _ = run([assistant("m1", BASH, agent_call("call_x", name="Explore")),
                   user([tool_result("call_b"), tool_result("call_x")], "u1")])
    assert all(item.child is None for item in made)


def test_a_subagent_answered_twice_ends_once() -> None:
    lines = [assistant("m1", agent_call("call_a")), foreground("call_a", tool_result("call_a"), uuid="t1"),
             foreground("call_a", tool_result("call_a"), uuid="t2")]
    made, _ = run(lines)
    assert [item.event["eventId"] for item in made if item.child == "call_a"] == ["t1:output", "t1:end"]


@pytest.mark.parametrize("launched", [{"status": "async_launched"}, {"isAsync": True, "status": "x"}])
def test_a_backgrounded_subagent_ends_at_its_notification(launched: Event) -> None:
    """Answered at once (async_launched), it ends at its task_notification with its own replies."""
    notification = system("task_notification", "tn", tool_use_id="call_a", status="completed", summary="Summary.")
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a", "launched"), launched),
             assistant("c1", text("Hello from it."), parent_id="call_a"), notification]
    made, _ = run(lines)
    assert [(item.child, item.event["type"], item.event["eventId"]) for item in made] == [
        (None, MESSAGE, "m1"), (None, RESULT, "t1"), (None, SYSTEM, "tn"), ("call_a", MESSAGE, "c1"),
        ("call_a", END, "tn:end")]
    assert made[-1].event == {"type": END, "eventId": "tn:end", "stopReason": "completed",
                              "source": {"format": "claude-code", "events": [notification]}}
    assert made[-1].agent == "general-purpose"
    assert "stopReason" not in made[3].event["message"]  # the notification is no next reply


def test_a_backgrounded_subagent_seen_only_in_other_lines_ends_at_its_notification() -> None:
    """A child seen only through a line of a kind not known still exists, so its notification ends it."""
    notification = system("task_notification", "tn", tool_use_id="call_a", status="completed", summary="Done.")
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a", "launched"), {"status": "async_launched"}),
             {"type": "tool_progress", "uuid": "p1", "parent_tool_use_id": "call_a"}, notification]
    child = [item.event for item in run(lines)[0] if item.child == "call_a"]
    assert types(child) == ["x-claude-code-tool_progress", MESSAGE, END]
    assert child[1]["message"] == {"content": [text("Done.")]}


def test_a_backgrounded_subagent_without_a_reply_gives_its_summary() -> None:
    notification = system("task_notification", "tn", tool_use_id="call_a", status="failed", summary="It failed.")
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a", "launched"), {"status": "async_launched"}),
             user("the task", "u1", parent_id="call_a"), message_start("c1"),
             stream({"type": "message_stop"}), notification]
    made, _ = run([{**line, "parent_tool_use_id": "call_a"} if line["type"] == "stream_event" else line
                   for line in lines])
    child = [item.event for item in made if item.child == "call_a"]
    assert types(child) == [USER, MESSAGE, MESSAGE, END]
    assert child[2] == {"type": MESSAGE, "eventId": "tn:output", "message": {"content": [text("It failed.")]},
                        "source": {"format": "claude-code", "events": [notification]}}
    assert child[3]["stopReason"] == "error" and child[3]["error"]["type"] == "subagent_error"


@pytest.mark.parametrize("summary", [None, "  ", 7])
def test_a_blank_summary_is_no_output(summary: Any) -> None:
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a"), {"status": "async_launched"}),
             user("the task", "u1", parent_id="call_a"),
             system("task_notification", "tn", tool_use_id="call_a", status="completed", summary=summary)]
    child = [item.event for item in run(lines)[0] if item.child == "call_a"]
    assert types(child) == [USER, END] and child[-1]["stopReason"] == "completed"


def test_a_notification_ends_a_subagent_once() -> None:
    notification = system("task_notification", "tn", tool_use_id="call_a", status="completed", summary="S")
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a"), {"status": "async_launched"}),
             user("the task", "u1", parent_id="call_a"), notification, {**notification, "uuid": "tn2"},
             foreground("call_a", tool_result("call_a"), uuid="t9")]
    child = [item.event["eventId"] for item in run(lines)[0] if item.child == "call_a"]
    assert child == ["u1", "tn:output", "tn:end"]


def test_a_notification_of_no_known_subagent_is_only_kept() -> None:
    for line in (system("task_notification", "tn", tool_use_id="call_z", status="completed", summary="S"),
                 system("task_notification", "tn", tool_use_id=5, status="completed", summary="S")):
        assert types(parent(run([line])[0])) == [SYSTEM]


def test_task_started_names_the_agent_when_the_call_did_not() -> None:
    started = system("task_started", "ts", tool_use_id="call_a", subagent_type="Explore")
    for call in (agent_call("call_a", None), agent_call("call_a", 7)):
        made, _ = run([assistant("m1", call), started, assistant("c1", text("x"), parent_id="call_a")])
        assert {item.agent for item in made if item.child} == {"Explore"}
    # The call's own type is kept; a task_started without a type names none.
    made, _ = run([assistant("m1", agent_call("call_a", "helper")), started,
                   assistant("c1", text("x"), parent_id="call_a")])
    assert {item.agent for item in made if item.child} == {"helper"}
    made, _ = run([system("task_started", "ts", tool_use_id="call_a", subagent_type=3),
                   assistant("c1", text("x"), parent_id="call_a")])
    assert {item.agent for item in made if item.child} == {None}
    made, _ = run([system("task_started", "ts", tool_use_id=3, subagent_type="Explore"),
                   assistant("c1", text("x"), parent_id="call_a")])
    assert {item.agent for item in made if item.child} == {None}


def test_a_childs_agent_is_the_one_known_when_it_was_first_seen() -> None:
    """A call id given again with another type does not retype a child already seen."""
    lines = [assistant("m1", agent_call("call_a", "first")), assistant("c1", text("x"), parent_id="call_a"),
             assistant("m1", agent_call("call_a", "second"))]
    assert {item.agent for item in run(lines)[0] if item.child} == {"first"}


def test_the_agent_is_learnt_after_the_child_was_seen() -> None:
    """A child seen before its type was known takes it once task_started names it."""
    adapter = ClaudeCodeAdapter()
    first = adapter.feed(0, user("task", "u1", parent_id="call_a"))
    assert first[0].agent is None
    adapter.feed(1, system("task_started", "ts", tool_use_id="call_a", subagent_type="Explore"))
    assert adapter.feed(2, user("more", "u2", parent_id="call_a"))[0].agent == "Explore"


def test_finish_stores_every_contexts_reply() -> None:
    made, _ = run([assistant("c1", text("x"), parent_id="call_a"), assistant("m1", text("y"))])
    assert [(item.child, item.event["eventId"]) for item in made] == [(None, "m1"), ("call_a", "c1")]


def test_an_init_does_not_answer_a_subagents_reply() -> None:
    adapter = ClaudeCodeAdapter()
    adapter.feed(0, assistant("c1", text("x"), parent_id="call_a"))
    assert types([item.event for item in adapter.feed(1, system("init", "i"))]) == [SYSTEM]


# -- eventIds ------------------------------------------------------------------------------------------------

def test_lines_without_uuid_get_positional_ids() -> None:
    """session:type:n, n counted per type; before any session the format's name."""
    lines: list[Event] = [{"type": "system", "subtype": "init"}, {"type": "system", "subtype": "status", "session_id": 5},
             user("a", None, session_id="s1"), user("b", None, session_id="s2"), system("status", ""),
             {"type": "rate_limit_event", "session_id": "s3"}, result(None)]
    events = parent(run(lines)[0])
    assert [event["eventId"] for event in events] == [
        "claude-code:system:0", "claude-code:system:1", "s1:user:0", "s1:user:1", "s1:system:2",
        "s1:rate_limit_event:0", "s1:result:0", "s1:result:0:end"]


def test_unknown_line_types_are_kept() -> None:
    line = {"type": "rate_limit_event", "uuid": "x1", "info": {}}
    sub = {"type": "tool_progress", "uuid": "x2", "parent_tool_use_id": "call_a"}
    made, _ = run([line, sub])
    assert made == [Made({"type": "x-claude-code-rate_limit_event", "eventId": "x1",
                          "source": {"format": "claude-code", "events": [line]}}),
                    Made({"type": "x-claude-code-tool_progress", "eventId": "x2",
                          "source": {"format": "claude-code", "events": [sub]}}, "call_a")]


def test_system_lines_are_kept() -> None:
    line = system("api_retry", "s1", attempt=1)
    assert run([line])[0] == [Made({"type": SYSTEM, "eventId": "s1", "source": {"format": "claude-code",
                                                                                 "events": [line]}})]


def test_lines_read_are_counted() -> None:
    adapter = ClaudeCodeAdapter()
    run([system("init", "i"), assistant("m1", text("a")), result()], adapter)
    assert adapter.lines_read == 3


# -- refusals -------------------------------------------------------------------------------------------------

def message_of(**fields: Any) -> Event:
    return {"type": "assistant", "message": fields}


@pytest.mark.parametrize(("line", "field"), [
    ({"uuid": "x"}, "type"),
    ({"type": 3}, "type"),
    ({"type": True}, "type"),
    ({**user("a"), "parent_tool_use_id": 5}, "parent_tool_use_id"),
    ({"type": "system", "parent_tool_use_id": ["x"]}, "parent_tool_use_id"),
    ({"type": "assistant"}, "message"),
    ({"type": "assistant", "message": "x"}, "message"),
    (message_of(id="m"), "message.content"),
    (message_of(id="m", content="text"), "message.content"),
    (message_of(content=[text("a")]), "message.id"),
    (message_of(id=4, content=[text("a")]), "message.id"),
    (message_of(id="m", content=[{"text": "a"}]), "message.content.0"),
    (message_of(id="m", content=[text("a"), "b"]), "message.content.1"),
    (message_of(id="m", content=[{"type": 1}]), "message.content.0"),
    (message_of(id="m", content=[{"type": "text"}]), "message.content.0.text"),
    (message_of(id="m", content=[text("a"), {"type": "tool_use", "name": "Bash", "input": {}}]),
     "message.content.1.id"),
    (message_of(id="m", content=[{"type": "tool_use", "id": "c", "input": {}}]), "message.content.0.name"),
    (message_of(id="m", content=[{"type": "tool_use", "id": "c", "name": "Bash", "input": "x"}]),
     "message.content.0.input"),
    (message_of(id="m", content=[{"type": "thinking", "signature": "s"}]), "message.content.0.thinking"),
    (message_of(id="m", content=[], usage=cli_usage(-1, 1)), "message.usage.input_tokens"),
    (message_of(id="m", content=[], usage={"input_tokens": 1, "output_tokens": True}), "message.usage.output_tokens"),
    (message_of(id="m", content=[], usage={**cli_usage(1, 1), "cache_read_input_tokens": 1.5}),
     "message.usage.cache_read_input_tokens"),
    (message_of(id="m", content=[], usage={**cli_usage(1, 1), "cache_creation_input_tokens": "2"}),
     "message.usage.cache_creation_input_tokens"),
    ({"type": "user"}, "message"),
    ({"type": "user", "message": {"content": 3}}, "message.content"),
    ({"type": "user", "message": {}}, "message.content"),
    (user([tool_result("c"), {"type": "tool_result", "content": "x"}]), "message.content.1.tool_use_id"),
    (user([{"type": "tool_result", "tool_use_id": 2}]), "message.content.0.tool_use_id"),
    ({"type": "stream_event"}, "event"),
    (stream({"delta": {}}), "event.type"),
    (stream({"type": "message_start"}), "event.message"),
    (stream({"type": "message_start", "message": {"content": []}}), "event.message.id"),
    (stream({"type": "message_start", "message": {"id": "m", "usage": {**cli_usage(1, 1),
                                                                       "cache_read_input_tokens": -2}}}),
     "event.message.usage.cache_read_input_tokens"),
    (stream({"type": "content_block_delta"}), "event.delta"),
    (stream({"type": "content_block_delta", "delta": {"type": "text_delta"}}), "event.delta.text"),
    (stream({"type": "content_block_delta", "delta": {"type": "thinking_delta", "text": "x"}}),
     "event.delta.thinking"),
    ({"type": "result"}, "subtype"),
    (result(usage={**cli_usage(1, 1), "output_tokens": -3}), "usage.output_tokens"),
])
def test_a_bad_line_is_refused_by_index_and_field(line: Event, field: str) -> None:
    """A JSON line that is not what Claude Code prints is refused (422) naming its index and field."""
    good = [system("init", "i"), assistant("m0", text("fine"))]
    with pytest.raises(NotTheFormat) as refused:
        run([*good, line])
    assert refused.value.extra == {"index": 2, "field": field, "format": "claude-code"}
    assert str(refused.value).startswith(f"line 2: {field}: expected ")
    assert str(refused.value).endswith("(not a claude-code line)")


def test_a_bad_message_delta_usage_is_refused() -> None:
    with pytest.raises(NotTheFormat) as refused:
        run([message_start("m1"), stream({"type": "message_delta", "delta": {}, "usage": {"output_tokens": -1}})])
    assert refused.value.extra == {"index": 1, "field": "event.usage.output_tokens", "format": "claude-code"}
    assert "non-negative integer" in str(refused.value)


def test_a_bad_usage_is_named_with_its_expectation() -> None:
    with pytest.raises(NotTheFormat) as refused:
        run([assistant("m1", usage={"input_tokens": -1, "output_tokens": 1})])
    assert str(refused.value) == ("line 0: message.usage.input_tokens: expected a non-negative integer "
                                  "(not a claude-code line)")
    with pytest.raises(NotTheFormat) as refused:
        run([message_of(id="m", content=[{"type": 1}])])
    assert str(refused.value) == "line 0: message.content.0: expected a block with a type (not a claude-code line)"
    with pytest.raises(NotTheFormat) as refused:
        run([{"type": "user", "message": {"content": 1}}])
    assert str(refused.value) == "line 0: message.content: expected a string or an array (not a claude-code line)"
    with pytest.raises(NotTheFormat) as refused:
        run([{"type": "user", "parent_tool_use_id": 1}])
    assert str(refused.value) == "line 0: parent_tool_use_id: expected a string or null (not a claude-code line)"


# -- properties -------------------------------------------------------------------------------------------------

CALLS = ["call_a", "call_b", "call_c"]
texts = st.text(max_size=6)
parents = st.sampled_from([None, None, None, "call_a", "call_b"])
counts = st.builds(cli_usage, st.integers(0, 50), st.integers(0, 50), st.integers(0, 5), st.integers(0, 5))
blocks = st.one_of(
    st.builds(text, texts),
    st.builds(lambda value, sig: {"type": "thinking", "thinking": value, **({"signature": sig} if sig else {})},
              texts, st.sampled_from([None, "sig"])),
    st.builds(lambda call, agent: agent_call(call, agent), st.sampled_from(CALLS), st.sampled_from([None, "helper"])),
    st.builds(lambda call: {**BASH, "id": call}, st.sampled_from(CALLS)),
    st.just({"type": "redacted_thinking", "data": "x"}),
)
# ("reply", continue the open reply?, …): message ids are given after generation, one per reply.
line_specs = st.one_of(
    st.tuples(st.just("assistant"), st.booleans(), st.lists(blocks, min_size=1, max_size=2), parents,
              st.one_of(st.none(), counts), st.sampled_from([None, None, "end_turn", "tool_use", "max_tokens"])),
    st.tuples(st.just("synthetic"), texts, st.sampled_from(["server_error", "max_output_tokens", None]), parents),
    st.tuples(st.just("user"), st.one_of(texts, st.lists(st.builds(text, texts), max_size=2)), parents,
              st.booleans()),
    st.tuples(st.just("tool_result"), st.lists(st.sampled_from(CALLS), min_size=1, max_size=2),
              st.sampled_from([None, {"status": "async_launched"}, {"status": "completed", "content": [text("r")],
                                                                   "usage": cli_usage(3, 1)}]),
              st.booleans()),
    st.tuples(st.just("start"), parents, counts),
    st.tuples(st.just("delta"), parents, st.sampled_from(["text_delta", "thinking_delta", "input_json_delta"]), texts),
    st.tuples(st.just("message_delta"), parents, st.sampled_from([None, "end_turn", "max_tokens", "tool_use"]),
              st.integers(0, 9)),
    st.tuples(st.just("message_stop"), parents),
    st.tuples(st.just("system"), st.sampled_from(["init", "status", "api_retry", "task_started"]),
              st.sampled_from(CALLS)),
    st.tuples(st.just("notification"), st.sampled_from(CALLS), st.sampled_from(["completed", "failed"]),
              st.sampled_from([None, "Summary."])),
    st.tuples(st.just("result"), st.sampled_from(["success", "error_max_turns", "error_during_execution"]),
              st.booleans(), st.sampled_from([None, "end_turn", "max_tokens", "refusal"]), st.one_of(st.none(), counts)),
    st.tuples(st.just("other"), parents),
)


def body_of(specs: list[tuple[Any, ...]], with_uuids: bool) -> list[Event]:
    """Lines from specs; each reply gets its own message id, as the CLI gives them."""
    lines: list[Event] = []
    open_reply: dict[str | None, str] = {}
    replies = 0

    def new_id() -> str:
        nonlocal replies
        replies += 1
        return f"msg_{replies}"

    for position, spec in enumerate(specs):
        kind = spec[0]
        uuid = f"uuid_{position}" if with_uuids else None
        if kind == "assistant":
            _, keep, content, parent_id, counts_, stop = spec
            message_id = open_reply[parent_id] if keep and parent_id in open_reply else new_id()
            open_reply[parent_id] = message_id
            fields: Event = {"stop_reason": stop}
            if counts_ is not None:
                fields["usage"] = counts_
            line = assistant(message_id, *content, uuid=uuid, parent_id=parent_id, **fields)
        elif kind == "synthetic":
            _, sentence, error, parent_id = spec
            line = synthetic(new_id(), sentence, error, parent_id)
        elif kind == "user":
            _, content, parent_id, is_synthetic = spec
            line = user(content, uuid, parent_id, **({"isSynthetic": True} if is_synthetic else {}))
        elif kind == "tool_result":
            _, calls, tool_use_result, is_error = spec
            line = user([tool_result(call, "out", is_error) for call in calls], uuid)
            if tool_use_result is not None:
                line["tool_use_result"] = tool_use_result
        elif kind == "start":
            _, parent_id, counts_ = spec
            message_id = new_id()
            open_reply[parent_id] = message_id
            line = stream({"type": "message_start", "message": {"id": message_id, "usage": counts_}}, uuid, parent_id)
        elif kind == "delta":
            _, parent_id, delta_type, value = spec
            key = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}[delta_type]
            line = stream({"type": "content_block_delta", "index": 0, "delta": {"type": delta_type, key: value}},
                          uuid, parent_id)
        elif kind == "message_delta":
            _, parent_id, stop, outputs = spec
            line = stream({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": outputs}},
                          uuid, parent_id)
        elif kind == "message_stop":
            line = stream({"type": "message_stop"}, uuid, spec[1])
        elif kind == "system":
            _, subtype, call = spec
            line = system(subtype, uuid, tool_use_id=call, subagent_type="Explore")
        elif kind == "notification":
            _, call, status, summary = spec
            line = system("task_notification", uuid, tool_use_id=call, status=status, summary=summary)
        elif kind == "result":
            _, subtype, is_error, stop, counts_ = spec
            line = result(uuid, subtype, is_error=is_error, stop_reason=stop, result="r",
                          **({"usage": counts_} if counts_ is not None else {}))
        else:
            line = {"type": "rate_limit_event", "parent_tool_use_id": spec[1], "session_id": "s"}
            if uuid is not None:
                line["uuid"] = uuid
        if kind in ("synthetic", "tool_result", "message_stop", "result", "notification") or \
                (kind == "user" and not spec[3]) or (kind == "system" and spec[1] == "init"):
            open_reply.clear()  # it may answer the reply open in its context: the next one is new
        lines.append(line)
    return lines


bodies = st.builds(body_of, st.lists(line_specs, max_size=14), st.booleans())


@settings(max_examples=300, deadline=None, database=None)
@given(bodies)
def test_bodies_make_valid_stable_events(lines: list[Event]) -> None:
    """Any plausible body: valid §4 events, eventIds unique per run and the same when sent again."""
    made, stop = run(lines)
    for events in by_run(made).values():
        validate_events(events)
        event_ids = [event["eventId"] for event in events]
        assert len(set(event_ids)) == len(event_ids)
        assert types(events).count(END) <= 1
    assert run(lines) == (made, stop)
    # A stop exactly when a result line was read; the run's turn/end is its last event and says it.
    results = [line for line in lines if line["type"] == "result"]
    events = parent(made)
    if results:
        assert stop.provider == results[-1]["subtype"] and stop.stop_reason is not None
        assert events[-1]["type"] == END and events[-1]["stopReason"] == stop.stop_reason
    else:
        assert stop == StreamStop(None, None) and END not in types(events)
    # The CLI's own messages are never output.
    assert not any(block.get("type") == "text" and block["text"].startswith("API Error")
                   for block in final_assistant_output(events))
    # Every line but the stream events is in some stored event's source.
    kept = [raw for item in made for raw in item.event["source"]["events"]]
    assert all(any(raw is line for raw in kept) for line in lines if line["type"] != "stream_event")


def test_a_backgrounded_subagent_that_printed_nothing_is_a_child_run_too() -> None:
    """Its notification is the first sight of it: the child run is made then, with the summary."""
    notification = system("task_notification", "tn", tool_use_id="call_a", status="completed", summary="Done.")
    lines = [assistant("m1", agent_call("call_a")),
             foreground("call_a", tool_result("call_a", "launched"), {"status": "async_launched"}), notification]
    made, _ = run(lines)
    child = [item for item in made if item.child == "call_a"]
    assert types([item.event for item in child]) == [MESSAGE, END]
    assert child[0].event["message"] == {"content": [text("Done.")]} and child[0].agent is not None


# -- the fast path for deltas -----------------------------------------------------------------------

def _recorded_delta() -> tuple[Event, Event]:
    """The first line of a recorded partial-messages run (it names the session) and its first text delta."""
    lines = lines_of("claude-code-partial", "completion")
    return lines[0], next(line for line in lines if line.get("event", {}).get("type") == "content_block_delta")


def _edited(edit: Any) -> Event:
    line: Event = json.loads(json.dumps(_recorded_delta()[1]))
    edit(line)
    return line


def _outcome(adapter: ClaudeCodeAdapter, index: int, line: Event) -> tuple[Any, int]:
    """What the adapter makes of ``line`` (or the refusal's text), and the lines it counted for it."""
    before = adapter.lines_read
    try:
        made: Any = [(item.event, item.child) for item in adapter.feed(index, line)]
    except NotTheFormat as refused:
        made = str(refused)
    return made, adapter.lines_read - before


FAST_PATH_LINES = {
    "recorded": lambda line: None,
    "thinking": lambda line: line["event"].update(delta={"type": "thinking_delta", "thinking": "hm"}),
    "uuid-empty": lambda line: line.update(uuid=""),
    "uuid-number": lambda line: line.update(uuid=5),
    "parent-number": lambda line: line.update(parent_tool_use_id=7),
    "parent-first-seen": lambda line: line.update(parent_tool_use_id="call_first"),
    "delta-array": lambda line: line["event"].update(delta=[]),
    "text-number": lambda line: line["event"]["delta"].update(text=5),
    "message-delta-with-text": lambda line: line["event"].update(type="message_delta"),
    "json-delta-with-text": lambda line: line["event"]["delta"].update(type="input_json_delta"),
    "json-delta-with-thinking": lambda line: line["event"].update(
        delta={"type": "input_json_delta", "thinking": "hm", "partial_json": ""}),
}


@pytest.mark.parametrize("edit", list(FAST_PATH_LINES.values()), ids=list(FAST_PATH_LINES))
def test_the_fast_path_makes_what_the_general_path_makes(edit: Any) -> None:
    """A delta line read once the session is known (the fast path) makes the same events, or
    the same refusal, and counts as one line, as when it names the session (the general path)."""
    first, _ = _recorded_delta()
    line = _edited(edit)
    general = _outcome(ClaudeCodeAdapter(), 1, line)
    primed = ClaudeCodeAdapter()
    primed.feed(0, first)
    assert _outcome(primed, 1, line) == general
    assert general[1] == 1


@pytest.mark.parametrize("scenario", scenarios("claude-code-partial"))
def test_every_line_of_a_partial_messages_run_is_counted_once(scenario: str) -> None:
    adapter = ClaudeCodeAdapter()
    lines = lines_of("claude-code-partial", scenario)
    run(lines, adapter)
    assert adapter.lines_read == len(lines)
