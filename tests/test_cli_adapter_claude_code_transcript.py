"""The Claude Code transcript adapter (SPEC §19), through the module: real lines in, §4 events out.

The lines are the real CLI's (``tests/cli_children/fixtures/claude-code-transcript/``); a case
that needs a line the CLI did not write takes a real one and changes the one field it is about.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lastword.adapters import CLI_ADAPTERS, FORMATS_BY_COMMAND
from lastword.adapters.base import NotTheFormat
from lastword.adapters.claude_code_transcript import ClaudeCodeTranscriptAdapter
from lastword.adapters.cli_base import Made

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures" / "claude-code-transcript"


def read(scenario: str, name: str) -> list[dict[str, Any]]:
    path = next((FIXTURES / scenario / "subagents").glob("agent-*.jsonl")) if name == "subagent" \
        else FIXTURES / scenario / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tool_use_id(scenario: str) -> str:
    path = next((FIXTURES / scenario / "subagents").glob("agent-*.meta.json"))
    return str(json.loads(path.read_text())["toolUseId"])


def run(lines: list[dict[str, Any]], tool_use_id: str | None = None) -> list[Made]:
    adapter = ClaudeCodeTranscriptAdapter.for_request(tool_use_id=tool_use_id)
    made: list[Made] = []
    for index, line in enumerate(lines):
        made.extend(adapter.feed(index, line))
    made.extend(adapter.finish())
    assert adapter.lines_read == len(lines)
    return made


def first(lines: list[dict[str, Any]], kind: str, **where: Any) -> dict[str, Any]:
    return next(line for line in lines if line["type"] == kind and all(line.get(k) == v for k, v in where.items()))


def refused(lines: list[dict[str, Any]], field: str, tool_use_id: str | None = None) -> str:
    with pytest.raises(NotTheFormat) as caught:
        run(lines, tool_use_id)
    assert caught.value.extra["field"] == field, caught.value
    return str(caught.value)


def test_registered_as_a_cli_format_that_no_command_prints() -> None:
    assert CLI_ADAPTERS["claude-code-transcript"] is ClaudeCodeTranscriptAdapter
    assert "claude-code-transcript" not in FORMATS_BY_COMMAND.values()
    assert FORMATS_BY_COMMAND["claude"] == "claude-code"


def test_split_subagent_reply_is_two_messages_the_first_cut() -> None:
    call = tool_use_id("subagent_split")
    made = run(read("subagent_split", "subagent"), call)
    # the prompt line names no agent; the replies' attributionAgent does
    assert [(item.child, item.agent) for item in made] == [(call, None)] + [(call, "general-purpose")] * 4
    events = [item.event for item in made]
    assert [event["type"] for event in events] == [
        "user/message", "assistant/message", "x-claude-code-transcript-user", "assistant/message", "turn/end"]
    lines = read("subagent_split", "subagent")
    prompt = first(lines, "user")
    assert events[0] == {"type": "user/message", "eventId": prompt["uuid"], "message": {"content": prompt["message"]["content"]},
                         "source": {"format": "claude-code-transcript", "events": [prompt]}}
    replies = [line for line in lines if line["type"] == "assistant"]
    assert events[1] == {"type": "assistant/message", "eventId": replies[0]["message"]["id"],
                         "message": {"id": replies[0]["message"]["id"],
                                     "content": [{"type": "text", "text": "Report part one: the first half of the findings, cut"}],
                                     "usage": {"inputTokens": replies[0]["message"]["usage"]["input_tokens"],
                                               "outputTokens": 13, "cacheReadTokens": 0, "cacheWriteTokens": 0},
                                     "stopReason": "max_tokens"},
                         "source": {"format": "claude-code-transcript", "events": [replies[0]]}}
    nudge = first(lines, "user", isMeta=True)
    assert events[2] == {"type": "x-claude-code-transcript-user", "eventId": nudge["uuid"],
                         "source": {"format": "claude-code-transcript", "events": [nudge]}}
    assert events[3]["message"]["stopReason"] == "end_turn"
    assert events[3]["message"]["content"] == [{"type": "text", "text": " and report part two, which completes the findings."}]
    agent_id = replies[0]["agentId"]
    assert events[4] == {"type": "turn/end", "eventId": f"{agent_id}:end", "stopReason": "completed",
                         "source": {"format": "claude-code-transcript", "events": []}}


def test_subagent_cut_every_time_ends_max_tokens_with_the_clis_error() -> None:
    call = tool_use_id("subagent_cut")
    events = [item.event for item in run(read("subagent_cut", "subagent"), call)]
    messages = [event["message"] for event in events if event["type"] == "assistant/message"]
    assert [message.get("stopReason") for message in messages] == ["max_tokens"] * 4 + [None]
    synthetic = messages[-1]
    assert synthetic["content"] == [] and synthetic["error"]["type"] == "max_output_tokens"
    assert synthetic["error"]["message"].startswith("API Error: Claude's response exceeded")
    end = events[-1]
    assert end["type"] == "turn/end" and end["stopReason"] == "max_tokens" and end["error"] == synthetic["error"]


def test_a_synthetic_message_without_an_error_word_is_an_api_error() -> None:
    lines = read("subagent_cut", "subagent")
    synthetic = next(line for line in lines if line["type"] == "assistant" and line["message"]["model"] == "<synthetic>")
    del synthetic["error"]
    events = [item.event for item in run(lines, "toolu_x")]
    assert events[-1]["stopReason"] == "error" and events[-1]["error"]["type"] == "api_error"
    # an error field alone (not the synthetic model) is the CLI's message too
    lines = read("subagent_cut", "subagent")
    synthetic = next(line for line in lines if line["type"] == "assistant" and line["message"]["model"] == "<synthetic>")
    synthetic["message"]["model"] = "claude-sonnet-4-5"
    synthetic["message"]["content"].append({"type": "image", "source": {}})
    synthetic["message"]["content"].append("not a block")
    events = [item.event for item in run(lines, "toolu_x")]
    assert events[-2]["message"]["content"] == [] and events[-1]["stopReason"] == "max_tokens"


def test_a_reply_after_the_clis_error_is_the_last_word() -> None:
    lines = read("subagent_cut", "subagent")
    answered = copy.deepcopy(read("subagent_split", "subagent"))
    last = [line for line in answered if line["type"] == "assistant"][-1]
    last["agentId"] = lines[0]["agentId"]
    events = [item.event for item in run([*lines, last], "toolu_x")]
    assert events[-1] == {"type": "turn/end", "eventId": f"{lines[0]['agentId']}:end", "stopReason": "completed",
                          "source": {"format": "claude-code-transcript", "events": []}}


def test_session_transcript_links_its_subagent_and_never_ends_the_run() -> None:
    session = read("subagent_split", "session.jsonl")
    made = run(session + read("subagent_split", "subagent"))
    parent = [item.event for item in made if item.child is None]
    assert [event["type"] for event in parent] == ["user/message", "assistant/message", "tool/result", "assistant/message"]
    delegating = parent[1]["message"]
    assert [block["type"] for block in delegating["content"]] == ["text", "tool_call"]
    assert "stopReason" not in delegating  # tool_use is no stop §6 knows
    assert delegating["content"][1]["name"] == "Agent"
    call = delegating["content"][1]["id"]
    result_line = first(session, "user", sourceToolAssistantUUID=next(
        line["uuid"] for line in session if line["type"] == "assistant" and line["message"]["content"][0]["type"] == "tool_use"))
    assert parent[2] == {"type": "tool/result", "eventId": result_line["uuid"], "toolCallId": call,
                         "content": result_line["message"]["content"][0]["content"], "isError": False,
                         "source": {"format": "claude-code-transcript", "events": [result_line]}}
    assert parent[3]["message"]["stopReason"] == "end_turn"
    children = {(item.child, item.agent) for item in made if item.child is not None}
    assert children == {(call, "general-purpose")}
    assert not any(event["type"] == "turn/end" for event in parent)


def test_agent_named_by_its_call_before_its_own_lines() -> None:
    session = read("subagent_split", "session.jsonl")
    for line in session:
        if line["type"] == "assistant":
            for block in line["message"]["content"]:
                if block["type"] == "tool_use":
                    block["input"]["subagent_type"] = "reviewer"
    sub = read("subagent_split", "subagent")
    assert {item.agent for item in run(session + sub) if item.child} == {"reviewer"}
    for line in sub:
        line.pop("attributionAgent", None)
    assert {item.agent for item in run(sub, "toolu_x") if item.child} == {None}
    for line in sub:
        line["attributionAgent"] = ""
    assert {item.agent for item in run(sub, "toolu_x") if item.child} == {None}


def test_a_tool_result_of_another_tool_links_no_subagent() -> None:
    session = read("subagent_split", "session.jsonl")
    result_line = next(line for line in session if "toolUseResult" in line)
    result_line["toolUseResult"] = "plain"
    with pytest.raises(NotTheFormat):
        run(session + read("subagent_split", "subagent"))
    result_line["toolUseResult"] = {"agentId": ""}
    with pytest.raises(NotTheFormat):
        run(session + read("subagent_split", "subagent"))


def test_several_tool_results_in_one_line() -> None:
    session = read("subagent_split", "session.jsonl")
    result_line = next(line for line in session if "toolUseResult" in line)
    block = result_line["message"]["content"][0]
    second = {**copy.deepcopy(block), "tool_use_id": "toolu_second", "is_error": True, "content": None}
    result_line["message"]["content"].append(second)
    results = [item.event for item in run(session) if item.event["type"] == "tool/result"]
    assert [(event["eventId"], event["toolCallId"], event["isError"], event["content"]) for event in results] == [
        (f"{result_line['uuid']}:0", block["tool_use_id"], False, block["content"]),
        (f"{result_line['uuid']}:1", "toolu_second", True, "")]
    # two results in one line name no single agent: the subagent stays unlinked
    with pytest.raises(NotTheFormat):
        run(session + read("subagent_split", "subagent"))


@pytest.mark.parametrize(("content", "stored"), [
    ("plain text", "plain text"), (7, "7"), ([{"type": "text", "text": "a"}], [{"type": "text", "text": "a"}]),
    ([{"text": "no type"}], "[{'text': 'no type'}]"), (["x"], "['x']")])
def test_tool_result_content(content: Any, stored: Any) -> None:
    session = read("subagent_split", "session.jsonl")
    result_line = next(line for line in session if "toolUseResult" in line)
    result_line["message"]["content"][0]["content"] = content
    assert [item.event["content"] for item in run(session) if item.event["type"] == "tool/result"] == [stored]


def test_a_user_line_with_text_beside_a_tool_result_is_the_users() -> None:
    session = read("subagent_split", "session.jsonl")
    result_line = next(line for line in session if "toolUseResult" in line)
    result_line["message"]["content"].append({"type": "text", "text": "and a note"})
    events = [item.event for item in run(session)]
    assert [event["type"] for event in events].count("tool/result") == 0
    assert any(event["type"] == "user/message" and event["eventId"] == result_line["uuid"] for event in events)


def test_blocks_kept_and_translated() -> None:
    session = read("subagent_split", "session.jsonl")
    reply = next(line for line in session if line["type"] == "assistant")
    thinking = copy.deepcopy(reply)
    thinking["message"]["content"] = [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                      {"type": "thinking", "thinking": "", "signature": 5},
                                      {"type": "redacted_thinking", "data": "x"}]
    events = [item.event for item in run([thinking, reply])]
    assert events[0]["message"]["content"] == [
        {"type": "reasoning", "text": "hmm", "signature": "sig"}, {"type": "reasoning", "text": ""},
        {"type": "redacted_thinking", "data": "x"}, {"type": "text", "text": "I will delegate this."}]


def test_a_tool_call_cut_by_the_ceiling_is_not_output() -> None:
    session = read("subagent_split", "session.jsonl")
    replies = [line for line in session if line["type"] == "assistant"][:2]
    replies[1]["message"]["content"][0]["input"] = {"__unparsedToolInput": "{\"desc"}
    (event,) = [item.event for item in run(replies)]
    assert event["message"]["content"] == [{"type": "text", "text": "I will delegate this."}]
    assert event["message"]["stopReason"] == "max_tokens"


def test_a_later_blocks_stop_and_usage_do_not_replace_the_first() -> None:
    session = read("subagent_split", "session.jsonl")
    replies = copy.deepcopy([line for line in session if line["type"] == "assistant"][:2])
    replies[0]["message"]["stop_reason"] = "refusal"
    replies[1]["message"]["usage"]["output_tokens"] = 999
    (event,) = [item.event for item in run(replies)]
    assert event["message"]["stopReason"] == "refusal" and event["message"]["usage"]["outputTokens"] == 15
    replies[0]["message"]["stop_reason"] = None
    replies[0]["message"].pop("usage")
    (event,) = [item.event for item in run(replies)]
    assert "stopReason" not in event["message"]
    assert event["message"]["usage"]["outputTokens"] == 999


@pytest.mark.parametrize(("stop", "message_stop", "turn_stop"), [
    ("stop_sequence", "stop_sequence", "completed"), ("refusal", "refusal", "refusal"),
    ("model_context_window_exceeded", "max_tokens", "max_tokens"), ("max_tokens", "max_tokens", "max_tokens"),
    ("pause_turn", None, None), (None, None, None)])
def test_a_subagents_last_reply_ends_its_turn(stop: str | None, message_stop: str | None, turn_stop: str | None) -> None:
    lines = read("subagent_split", "subagent")
    last = [line for line in lines if line["type"] == "assistant"][-1]
    last["message"]["stop_reason"] = stop
    events = [item.event for item in run(lines, "toolu_x")]
    message = [event for event in events if event["type"] == "assistant/message"][-1]["message"]
    assert message.get("stopReason") == message_stop
    ends = [event for event in events if event["type"] == "turn/end"]
    assert [end["stopReason"] for end in ends] == ([turn_stop] if turn_stop else [])
    assert all("error" not in end for end in ends)


def test_usage_counts() -> None:
    lines = read("subagent_split", "subagent")
    reply = [line for line in lines if line["type"] == "assistant"][0]
    reply["message"]["usage"] = {"output_tokens": 4, "cache_read_input_tokens": 9}
    (message,) = [item.event["message"] for item in run([reply], "toolu_x") if item.event["type"] == "assistant/message"]
    assert message["usage"] == {"inputTokens": 0, "outputTokens": 4, "cacheReadTokens": 9}


def test_non_message_lines_are_skipped_whatever_their_type() -> None:
    session = read("subagent_split", "session.jsonl")
    others = [line for line in session if line["type"] not in ("user", "assistant")]
    assert {line["type"] for line in others} >= {"queue-operation", "attachment", "api-request", "last-prompt", "cost-state"}
    assert run([*others, {"type": "a-type-added-later"}, {"type": "attachment", "agentId": 7}]) == []


def base_reply() -> dict[str, Any]:
    return copy.deepcopy([line for line in read("subagent_split", "session.jsonl") if line["type"] == "assistant"][1])


def base_user() -> dict[str, Any]:
    return copy.deepcopy(next(line for line in read("subagent_split", "session.jsonl") if "toolUseResult" in line))


def changed(line: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    target: Any = line
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is KeyError:
        del target[keys[-1]]
    else:
        target[int(keys[-1]) if isinstance(target, list) else keys[-1]] = value
    return line


@pytest.mark.parametrize(("line", "field"), [
    (changed(base_reply(), "type", None), "type"),
    (changed(base_reply(), "message", "x"), "message"),
    (changed(base_reply(), "message.content", {}), "message.content"),
    (changed(base_reply(), "message.id", 5), "message.id"),
    (changed(base_reply(), "message.content.0", {"text": "no type"}), "message.content.0"),
    (changed(base_reply(), "message.content.0", "text"), "message.content.0"),
    (changed(base_reply(), "message.content.0.id", KeyError), "message.content.0.id"),
    (changed(base_reply(), "message.content.0.name", 3), "message.content.0.name"),
    (changed(base_reply(), "message.content.0.input", []), "message.content.0.input"),
    (changed(base_reply(), "message.content.0", {"type": "text"}), "message.content.0.text"),
    (changed(base_reply(), "message.content.0", {"type": "thinking"}), "message.content.0.thinking"),
    (changed(base_reply(), "message.usage.output_tokens", -1), "message.usage.output_tokens"),
    (changed(base_reply(), "message.usage.input_tokens", 1.5), "message.usage.input_tokens"),
    (changed(base_user(), "uuid", KeyError), "uuid"),
    (changed(base_user(), "message", None), "message"),
    (changed(base_user(), "message.content", None), "message.content"),
    (changed(base_user(), "message.content.0.tool_use_id", KeyError), "message.content.0.tool_use_id"),
    (changed(base_reply(), "agentId", 5), "agentId"),
    (changed(base_reply(), "agentId", ""), "agentId"),
])
def test_lines_not_the_format_are_refused_naming_the_field(line: dict[str, Any], field: str) -> None:
    message = refused([line], field, "toolu_x")
    assert "claude-code-transcript" in message and "line 0" in message


def test_an_unlinked_subagent_is_refused() -> None:
    lines = read("subagent_split", "subagent")
    message = refused(lines, "agentId")
    assert lines[0]["agentId"] in message and "toolUseId" in message


def test_a_reply_followed_by_another_with_nothing_between_is_two_messages() -> None:
    replies = [line for line in read("subagent_cut", "subagent") if line["type"] == "assistant"][:2]
    events = [item.event for item in run(replies, "toolu_x")]
    assert events[-1]["type"] == "turn/end"
    assert [(event["eventId"], len(event["message"]["content"])) for event in events[:-1]] == [
        (replies[0]["message"]["id"], 1), (replies[1]["message"]["id"], 1)]


def test_the_clis_own_message_whole() -> None:
    lines = read("subagent_cut", "subagent")
    synthetic = next(line for line in lines if line["type"] == "assistant" and line["message"]["model"] == "<synthetic>")
    synthetic["message"]["content"].append({"type": "text", "text": " (more)"})
    events = [item.event for item in run([synthetic], "toolu_x")]
    text = synthetic["message"]["content"][0]["text"] + " (more)"
    error = {"type": "max_output_tokens", "message": text}
    assert events == [
        {"type": "assistant/message", "eventId": synthetic["message"]["id"],
         "message": {"id": synthetic["message"]["id"], "content": [], "error": error},
         "source": {"format": "claude-code-transcript", "events": [synthetic]}},
        {"type": "turn/end", "eventId": f"{synthetic['agentId']}:end", "stopReason": "max_tokens", "error": error,
         "source": {"format": "claude-code-transcript", "events": []}}]


def test_a_tool_call_whole_and_only_subagent_tools_name_an_agent() -> None:
    session = read("subagent_split", "session.jsonl")
    call_line = [line for line in session if line["type"] == "assistant"][1]
    block = call_line["message"]["content"][0]
    (event,) = [item.event for item in run([call_line])]
    assert event["message"]["content"] == [{"type": "tool_call", "id": block["id"], "name": "Agent", "input": block["input"]}]
    block["name"] = "Bash"
    sub = read("subagent_split", "subagent")
    for line in sub:
        line.pop("attributionAgent", None)
    assert {item.agent for item in run([call_line, *sub], block["id"]) if item.child} == {None}


def test_usage_without_output_tokens_counts_zero() -> None:
    reply = [line for line in read("subagent_split", "subagent") if line["type"] == "assistant"][0]
    reply["message"]["usage"] = {"input_tokens": 3}
    (message,) = [item.event["message"] for item in run([reply], "toolu_x") if item.event["type"] == "assistant/message"]
    assert message["usage"] == {"inputTokens": 3, "outputTokens": 0}


@pytest.mark.parametrize(("line", "says"), [
    (changed(base_reply(), "message.content.0", {"text": "no type"}), "message.content.0: expected a block with a type"),
    (changed(base_reply(), "agentId", ""), "agentId: expected a non-empty string"),
    (changed(base_reply(), "message.usage.output_tokens", -1), "message.usage.output_tokens: expected a non-negative integer"),
    (changed(base_user(), "message.content", None), "message.content: expected a string or an array"),
])
def test_a_refusal_says_what_was_expected(line: dict[str, Any], says: str) -> None:
    with pytest.raises(NotTheFormat) as caught:
        run([{"type": "attachment"}, line], "toolu_x")
    assert str(caught.value).startswith(f"line 1: {says} (not a claude-code-transcript line)")
    assert caught.value.extra["index"] == 1


def test_an_unlinked_subagent_refusal_names_its_line() -> None:
    lines = read("subagent_split", "subagent")
    with pytest.raises(NotTheFormat) as caught:
        run(lines)
    assert str(caught.value).startswith(
        f"line 0: agentId: the subagent {lines[0]['agentId']!r} is linked to no tool call: send the session's "
        "transcript before it, or ?toolUseId= (not a claude-code-transcript line)")
