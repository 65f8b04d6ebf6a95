"""The ``acp`` adapter through the module (SPEC §13): ACP v1 and v2 bodies in, §4 events out.

The bodies are the JSON-RPC messages a client saw, recorded with the protocol's own SDK
(``tests/acp_v2/record.mjs``: an SDK agent and an SDK client joined by pipes) for v1 and v2; the
v1 details use the Python SDK's schema types (``tests/provider_streams.py``). A case about input
the SDKs would not send takes a recorded message and changes the one field it is about.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lastword.adapters.acp import ACPAdapter
from lastword.adapters.base import Event, StreamStop
from lastword.errors import InvalidProviderEvent
from lastword.rules.fold import final_assistant_output
from lastword.rules.stop_reasons import normalise_stop_reason
from tests.provider_streams import acp_message, acp_prompt_response, acp_thought, acp_tool_call, acp_tool_call_done

FIXTURES = Path(__file__).parent / "acp_v2" / "fixtures"


def recorded(name: str) -> list[Event]:
    events: list[Event] = json.loads((FIXTURES / f"{name}.json").read_text())
    return events


def read(events: list[Event], *, version: int | None = None, key: str | None = "k") -> tuple[list[Event], StreamStop]:
    """What the adapter makes of a whole body, and how it stopped, as the endpoint runs it: the
    events still waiting for their id are taken after each call, and must be among what that
    call made (the endpoint pairs them so), then named when the body ends."""
    adapter = ACPAdapter(key, version=version)
    made: list[Event] = []
    waiting: list[tuple[Event, str | int]] = []

    def took(new: list[Event]) -> None:
        unnamed = adapter.take_unnamed()
        assert all(any(event is one for one in new) for event, _ in unnamed)
        waiting.extend(unnamed)
        made.extend(new)

    for index, event in enumerate(events):
        took(adapter.feed(index, event))
    took(adapter.finish())
    base = adapter.id_base("turn 1")
    for event, suffix in waiting:
        event["eventId"] = f"{base}:{suffix}"
    assert all("eventId" in event for event in made)
    return made, adapter.stop


def types(made: list[Event]) -> list[str]:
    return [event["type"] for event in made]


def of_type(made: list[Event], kind: str) -> list[Event]:
    return [event for event in made if event["type"] == kind]


def update_at(events: list[Event], index: int) -> Event:
    update: Event = events[index]["params"]["update"]
    return update


def refused(events: list[Event], field: str, says: str) -> None:
    """The body is refused (422) at its last event, naming ``field`` and saying ``says``."""
    with pytest.raises(InvalidProviderEvent) as caught:
        read(events)
    index = len(events) - 1
    assert caught.value.extra["field"] == field and caught.value.extra["index"] == index
    assert caught.value.detail == f"event {index}: {field}: {says} (not an acp stream event)"


TEXT = {"type": "text", "text": "The answer is 42."}


def _unknown(reason: str) -> str:
    try:
        normalise_stop_reason(reason)
    except ValueError as error:
        return str(error)
    raise AssertionError(reason)


UNKNOWN_PAUSED = _unknown("paused")


# -- v2: the turn ends at the idle state update ----------------------------------------------------

def test_v2_turn_ends_at_idle_state_update_not_at_the_prompts_acceptance() -> None:
    events = recorded("v2-basic")
    assert events[5]["result"] == {"messageId": "user-1"}  # the acceptance
    made, stop = read(events)
    assert stop == StreamStop("end_turn", "completed")
    end = made[-1]
    assert end == {"type": "turn/end", "stopReason": "completed", "eventId": "k:end",
                   "source": {"format": "acp", "events": [events[11]]}}
    assert types(made).count("turn/end") == 1
    assert made[5]["type"] == "x-acp-response" and made[5]["source"]["events"] == [events[5]]
    assert final_assistant_output(made) == [{"type": "text", "text": "The answer is 42."}]
    # Cut off after the acceptance: the turn stays open, nothing ends it.
    made, stop = read(events[:6])
    assert stop == StreamStop(None, None) and "turn/end" not in types(made)


def test_v2_messages_are_stored_at_the_end_with_their_chunks_before() -> None:
    events = recorded("v2-basic")
    made, _ = read(events)
    assert [(event["delta"], event["eventId"], event["source"]) for event in of_type(made, "assistant/chunk")] == [
        ({"type": "reasoning", "text": "Multiply."}, "k:8", {"format": "acp", "events": [events[8]]}),
        ({"type": "text", "text": "The answer"}, "k:9", {"format": "acp", "events": [events[9]]}),
        ({"type": "text", "text": " is 42."}, "k:10", {"format": "acp", "events": [events[10]]}),
    ]
    assert made[-2] == {"type": "assistant/message", "eventId": "k:message:0",
                        "message": {"id": "msg-1", "content": [TEXT]},
                        "source": {"format": "acp", "events": []}}
    # Cut off before its end, a turn's messages are stored all the same, and nothing ends it.
    made, stop = read(events[:11])
    assert of_type(made, "assistant/message")[0]["message"]["content"] == [TEXT]
    assert stop.stop_reason is None and made[-1]["type"] == "assistant/message"


@pytest.mark.parametrize(("name", "provider", "stop_reason", "error"), [
    ("v2-max-tokens", "max_tokens", "max_tokens", None),
    ("v2-error", "error", "error", {"code": -32603, "message": "model overloaded"}),
])
def test_v2_stop_reasons_map_as_v1s(name: str, provider: str, stop_reason: str, error: Any) -> None:
    made, stop = read(recorded(name))
    assert stop == StreamStop(provider, stop_reason, error)
    end = {"type": "turn/end", "stopReason": stop_reason}
    if error is not None:
        end["error"] = error
    assert {key: made[-1][key] for key in made[-1] if key not in ("eventId", "source")} == end
    assert final_assistant_output(made)  # the partial answer is kept


def test_v2_every_v1_stop_reason_ends_the_turn_as_v1_maps_it() -> None:
    events = recorded("v2-basic")
    for provider, stop_reason in [("end_turn", "completed"), ("max_tokens", "max_tokens"),
                                  ("max_turn_requests", "max_turns"), ("refusal", "refusal"),
                                  ("cancelled", "cancelled")]:
        body = copy.deepcopy(events)
        update_at(body, 11)["stopReason"] = provider
        made, stop = read(body)
        assert stop == StreamStop(provider, stop_reason)
        assert made[-1]["stopReason"] == stop_reason and "error" not in made[-1]


def test_v2_an_error_stop_without_details_and_an_error_beside_another_reason() -> None:
    body = recorded("v2-error")
    del update_at(body, 9)["error"]
    made, stop = read(body)
    assert stop == StreamStop("error", "error") and "error" not in made[-1]
    body = recorded("v2-error")
    update_at(body, 9)["stopReason"] = "refusal"  # an error object beside another reason is not the turn's error
    made, stop = read(body)
    assert stop == StreamStop("refusal", "refusal") and "error" not in made[-1]
    body = recorded("v2-error")
    update_at(body, 9)["error"] = "overloaded"  # not an error object: none is kept
    made, stop = read(body)
    assert stop == StreamStop("error", "error") and "error" not in made[-1]


# -- v2: upserts by id -----------------------------------------------------------------------------

def test_v2_message_upserts_chunks_append_content_replaces_omitted_keeps_null_clears() -> None:
    events = recorded("v2-upserts")
    made, stop = read(events)
    messages = of_type(made, "assistant/message")
    assert [(event["message"], event["eventId"]) for event in messages] == [
        ({"id": "msg-1", "content": [{"type": "text", "text": "Let me check."}]}, "k:message:0"),
        # "Draft: 41" replaced by the full update; the update with only _meta left it as it was.
        ({"id": "msg-2", "content": [TEXT]}, "k:message:1"),
        ({"id": "msg-3", "content": []}, "k:message:2"),  # cleared by null
    ]
    # Each raw event is in one stored event's source: the chunks' in theirs, the upserts' in the message's.
    assert [event["source"]["events"] for event in messages] == [[], [events[15], events[16]], [events[18]]]
    assert [event["delta"]["text"] for event in of_type(made, "assistant/chunk")] == [
        "Let me ", "check.", "Draft: 41", "Scratch that."]
    # The cleared message hides nothing; the replaced one is the output (§5).
    assert final_assistant_output(made) == [TEXT]
    assert stop.stop_reason == "completed"
    sources = [raw for event in made for raw in event["source"]["events"]]
    assert sorted(map(json.dumps, sources)) == sorted(map(json.dumps, events))


def test_v2_tool_call_upserts_carry_the_tool_calls_state() -> None:
    made, _ = read(recorded("v2-upserts"))
    calls = of_type(made, "x-acp-tool-call")
    pending = {"toolCallId": "tc-1", "name": "calculator", "title": "Multiply 6 by 7", "kind": "other",
               "status": "pending", "rawInput": {"a": 6, "b": 7}}
    output = [{"type": "content", "content": {"type": "text", "text": "42"}}]
    assert [event["toolCall"] for event in calls] == [
        pending,
        {**pending, "status": "in_progress"},  # omitted fields unchanged
        {**pending, "status": "in_progress", "content": output},  # a content chunk appends
        {key: value for key, value in {**pending, "status": "completed", "content": output, "rawOutput": 42}.items()
         if key != "title"},  # null clears
    ]
    assert [event["update"]["sessionUpdate"] for event in calls] == [
        "tool_call_update", "tool_call_update", "tool_call_content_chunk", "tool_call_update"]
    assert [event["eventId"] for event in calls] == ["k:10", "k:11", "k:12", "k:13"]


def test_v2_tool_calls_are_kept_apart_by_id_and_chunks_append_in_order() -> None:
    upserts, background = recorded("v2-upserts"), recorded("v2-background")
    second_chunk = copy.deepcopy(upserts[12])
    update_at([second_chunk], 0)["content"]["content"]["text"] = "and 42 again"
    never_set = copy.deepcopy(upserts[11])
    update_at([never_set], 0).update({"status": None, "locations": None})
    body = [*upserts[:11], background[8], upserts[12], second_chunk, never_set, background[12], upserts[-1]]
    made, _ = read(body)
    calls = [event["toolCall"] for event in of_type(made, "x-acp-tool-call")]
    assert [call["toolCallId"] for call in calls] == ["tc-1", "tc-bg", "tc-1", "tc-1", "tc-1", "tc-bg"]
    assert calls[3]["content"] == [{"type": "content", "content": {"type": "text", "text": "42"}},
                                   {"type": "content", "content": {"type": "text", "text": "and 42 again"}}]
    assert "status" not in calls[4] and "locations" not in calls[4] and calls[4]["title"] == "Multiply 6 by 7"
    assert calls[5] == {"toolCallId": "tc-bg", "name": "subagent", "title": "Research in background",
                        "status": "completed"}


def test_v2_content_other_than_text_idle_without_a_reason_a_custom_reason_and_meta_patches() -> None:
    events = recorded("v2-edge")
    made, stop = read(events)
    image = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    messages = of_type(made, "assistant/message")
    assert [event["message"] for event in messages] == [
        {"id": "msg-1", "content": [{"type": "text", "text": "Here is the plot: "}, image,
                                    {"type": "text", "text": "done."}]},
        {"id": "msg-2", "content": [image]},
    ]
    assert messages[0]["source"]["events"] == [events[9]]
    assert final_assistant_output(made) == [image]
    # The idle update without a stop reason (event 14) ends nothing; the turn ends at the last.
    assert [event["update"] for event in of_type(made, "x-acp-state-update")] == [
        update_at(events, 7), update_at(events, 14), update_at(events, 15)]
    assert types(made).count("turn/end") == 1
    assert stop == StreamStop("_handed_off", "error", made[-1]["error"])
    assert made[-1]["stopReason"] == "error"
    assert made[-1]["error"] == {"message": "the agent stopped for a reason ACP v2 does not define: _handed_off"}
    assert of_type(made, "x-acp-agent-thought")[0]["update"] == update_at(events, 11)  # logged: never the output
    assert [event["toolCall"] for event in of_type(made, "x-acp-tool-call")] == [
        {"toolCallId": "tc-1", "title": "plot", "_meta": {"a": 1, "b": 2}},
        {"toolCallId": "tc-1", "title": "plot", "_meta": {"b": 2, "c": 3}},  # patched by key, null removes
        {"toolCallId": "tc-1", "title": "plot"},  # null clears it all
    ]


def test_v2_message_upserts_that_are_not_content_leave_the_message_as_it_was() -> None:
    events = recorded("v2-upserts")
    update_at(events, 15)["content"] = "The answer is 42."  # not an array: treated as not sent
    made, _ = read(events)
    assert of_type(made, "assistant/message")[1]["message"]["content"] == [{"type": "text", "text": "Draft: 41"}]
    events = recorded("v2-upserts")
    update_at(events, 15)["content"] = [TEXT, "loose", {"text": "no type"}, {"type": 7}, {"type": "text"},
                                        {"type": "text", "text": None}, {"type": "resource_link", "uri": "file:///a"}]
    made, _ = read(events)
    # Items a receiver cannot read are skipped, as the protocol says.
    assert of_type(made, "assistant/message")[1]["message"]["content"] == [
        TEXT, {"type": "resource_link", "uri": "file:///a"}]
    events = recorded("v2-edge")
    update_at(events, 9)["content"] = {"type": "image"}
    update_at(events, 9)["content"].pop("type")
    made, _ = read(events)
    assert of_type(made, "assistant/message")[0]["message"]["content"] == [
        {"type": "text", "text": "Here is the plot: done."}]  # a skipped item splits no text


def test_v2_chunks_of_one_message_join_around_other_content_and_interleave_by_id() -> None:
    events = recorded("v2-upserts")
    # msg-1's chunks, then msg-2's, then msg-1's again: each message keeps its own text.
    body = [*events[:10], events[14], copy.deepcopy(events[9]), events[-1]]
    update_at(body, 11)["content"]["text"] = " Done."
    made, _ = read(body)
    assert [event["message"] for event in of_type(made, "assistant/message")] == [
        {"id": "msg-1", "content": [{"type": "text", "text": "Let me check. Done."}]},
        {"id": "msg-2", "content": [{"type": "text", "text": "Draft: 41"}]},
    ]


def test_v2_a_state_update_that_is_not_idle_or_has_no_string_reason_ends_nothing() -> None:
    events = recorded("v2-basic")
    for change in ({"state": "running"}, {"state": "requires_action"}, {"stopReason": 3}, {"stopReason": None}):
        body = copy.deepcopy(events)
        update_at(body, 11).update(change)
        made, stop = read(body)
        assert stop == StreamStop(None, None) and "turn/end" not in types(made)
        assert made[-2]["type"] == "x-acp-state-update" and made[-1]["type"] == "assistant/message"


# -- v2: updates outside the turn ------------------------------------------------------------------

def test_v2_updates_after_the_turn_are_kept_and_neither_end_nor_change_it() -> None:
    events = recorded("v2-background")
    made, stop = read(events)
    assert types(made)[-5:] == ["assistant/message", "x-acp-agent-message-chunk", "x-acp-tool-call",
                                "x-acp-state-update", "turn/end"]
    assert made[-1]["source"]["events"] == [events[10]] and made[-1]["eventId"] == "k:end"
    assert made[-4]["update"] == update_at(events, 11) and made[-4]["eventId"] == "k:11"
    assert made[-4]["source"] == {"format": "acp", "events": [events[11]]}
    assert made[-3]["toolCall"]["status"] == "completed" and made[-3]["toolCall"]["name"] == "subagent"
    assert stop == StreamStop("end_turn", "completed")
    # The background subagent's words are neither a chunk nor a message of the turn.
    assert final_assistant_output(made) == [{"type": "text", "text": "Started a researcher; the answer is 42."}]
    assert [event["delta"]["text"] for event in of_type(made, "assistant/chunk")] == [
        "Started a researcher; the answer is 42."]


def test_v2_requests_responses_and_messages_after_the_turn_are_kept_too() -> None:
    events = recorded("v2-background")
    message_update = {**events[9], "params": {**events[9]["params"], "update": {
        **update_at(events, 9), "sessionUpdate": "agent_message", "content": [TEXT]}}}
    body = [*events, events[4], events[5], message_update, acp_prompt_response(2, "end_turn"),
            {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "gone"}}]
    made, stop = read(body)
    assert types(made)[-6:] == ["x-acp-session-prompt", "x-acp-response", "x-acp-agent-message",
                                "x-acp-response", "x-acp-error", "turn/end"]
    assert stop == StreamStop("end_turn", "completed")
    assert final_assistant_output(made) == [{"type": "text", "text": "Started a researcher; the answer is 42."}]


def test_v2_a_refused_prompt_and_a_stop_reason_in_a_response_end_nothing() -> None:
    events = recorded("v2-basic")
    refusal = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "empty prompt"}}
    made, stop = read([*events[:5], refusal])
    assert types(made)[-1] == "x-acp-error" and stop == StreamStop(None, None)
    made, stop = read([*events[:5], acp_prompt_response(2, "end_turn")])
    assert types(made)[-1] == "x-acp-response" and stop == StreamStop(None, None)


def test_v2_chunk_without_its_message_id_is_refused() -> None:
    events = recorded("v2-basic")[:10]
    del update_at(events, 9)["messageId"]
    refused(events, "params.update.messageId", "expected a string")
    events = recorded("v2-basic")[:10]
    update_at(events, 9)["content"] = "The answer"
    refused(events, "params.update.content", "expected an object")
    events = recorded("v2-basic")[:10]
    update_at(events, 9)["content"]["text"] = 42
    refused(events, "params.update.content.text", "expected a string")
    events = recorded("v2-upserts")[:11]
    del update_at(events, 10)["toolCallId"]
    refused(events, "params.update.toolCallId", "expected a string")


@pytest.mark.parametrize("name", sorted(path.stem for path in FIXTURES.glob("*.json")))
def test_without_a_key_every_event_is_named_once_from_the_body(name: str) -> None:
    made, _ = read(recorded(name), key=None)
    ids = [event["eventId"] for event in made]
    base = ids[0].rsplit(":", 1)[0]
    assert base.startswith("body-") and all(event_id.startswith(f"{base}:") for event_id in ids)
    assert len(set(ids)) == len(ids)
    assert [event["eventId"] for event in read(recorded(name), key=None)[0]] == ids


def test_without_a_key_different_bodies_have_different_ids() -> None:
    bases = {read(recorded(path.stem), key=None)[0][0]["eventId"] for path in FIXTURES.glob("*.json")}
    assert len(bases) == len(list(FIXTURES.glob("*.json")))


# -- which version ---------------------------------------------------------------------------------

def test_the_version_comes_from_the_initialize_response_else_from_the_query() -> None:
    events = recorded("v2-basic")
    without_initialize = events[2:]
    made, stop = read(without_initialize, version=2)
    assert stop == StreamStop("end_turn", "completed") and made[-1]["type"] == "turn/end"
    # Read as v1 (the default), a v2 body never ends: its acceptance holds no stop reason.
    for version in (None, 1):
        made, stop = read(without_initialize, version=version)
        assert stop == StreamStop(None, None) and "turn/end" not in types(made)
        assert "assistant/message" not in types(made)
    # The initialize response names the version agreed, whatever the query said.
    assert read(events, version=1)[1] == StreamStop("end_turn", "completed")
    made, stop = read(recorded("v1-basic"), version=2)
    assert stop == StreamStop("end_turn", "completed") and made[-1]["usage"] == {"inputTokens": 12, "outputTokens": 5}
    # Only the initialize response's own integer counts (the request is the client's offer).
    body = copy.deepcopy(events)
    body[1]["result"]["protocolVersion"] = "2"
    assert read(body)[1] == StreamStop(None, None)
    body = [events[0], *events[2:]]
    assert read(body)[1] == StreamStop(None, None)
    body = copy.deepcopy(events)
    body[1]["result"]["protocolVersion"] = 3
    assert read(body)[1] == StreamStop(None, None)  # only v2 is read as v2


# -- v1: unchanged ---------------------------------------------------------------------------------

def test_v1_recorded_body_ends_at_the_prompts_response() -> None:
    events = recorded("v1-basic")
    made, stop = read(events)
    assert types(made) == ["x-acp-initialize", "x-acp-response", "x-acp-session-new", "x-acp-response",
                           "x-acp-session-prompt", "assistant/chunk", "assistant/chunk", "x-acp-tool-call",
                           "x-acp-tool-call", "assistant/chunk", "turn/end"]
    assert made[-1] == {"type": "turn/end", "stopReason": "completed", "usage": {"inputTokens": 12, "outputTokens": 5},
                        "eventId": "k:10", "source": {"format": "acp", "events": [events[10]]}}
    assert stop == StreamStop("end_turn", "completed")
    assert made[7] == {"type": "x-acp-tool-call", "update": update_at(events, 7), "eventId": "k:7",
                       "source": {"format": "acp", "events": [events[7]]}}
    assert made[0] == {"type": "x-acp-initialize", "eventId": "k:0", "source": {"format": "acp", "events": [events[0]]}}
    assert final_assistant_output(made) == [{"type": "text", "text": "The answer is 42."}]
    refused([*events, events[9]], "id", "a message after the prompt response (event 10)")


def test_v1_updates_and_their_event_ids() -> None:
    events = [acp_thought("Reading."), acp_message("Hi"), acp_tool_call("t1", "Read"), acp_tool_call_done("t1"),
              acp_prompt_response(1, "end_turn")]
    made, _ = read(events, key=None)
    base = made[0]["eventId"].rsplit(":", 1)[0]
    assert base.startswith("body-") and [event["eventId"] for event in made] == [f"{base}:{n}" for n in range(5)]
    assert made[0]["delta"] == {"type": "reasoning", "text": "Reading."}
    assert made[1]["delta"] == {"type": "text", "text": "Hi"}
    assert made[2]["update"] == events[2]["params"]["update"] and "toolCall" not in made[2]
    other: dict[str, Any] = {"jsonrpc": "2.0", "method": "session/update", "params": {"update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "x", "mimeType": "image/png"}}}}
    plan = {"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "current_mode_update"}}}
    made, _ = read([other, plan, {"jsonrpc": "2.0", "method": "session/set_mode", "params": {}}])
    assert types(made) == ["x-acp-agent-message-chunk", "x-acp-current-mode-update", "x-acp-session-set-mode"]
    assert made[0]["update"] == other["params"]["update"]


@pytest.mark.parametrize(("usage", "expected"), [
    ({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7, "cachedReadTokens": 1, "cachedWriteTokens": 2},
     {"inputTokens": 3, "outputTokens": 4, "cacheReadTokens": 1, "cacheWriteTokens": 2}),
    ({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}, {"inputTokens": 3, "outputTokens": 4}),
])
def test_v1_usage(usage: dict[str, int], expected: dict[str, int]) -> None:
    made, stop = read([acp_prompt_response(1, "max_turn_requests", usage)])
    assert made[0]["usage"] == expected and stop == StreamStop("max_turn_requests", "max_turns")


def test_v1_usage_left_out_or_incomplete() -> None:
    made, _ = read([{"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn", "usage": None}}])
    assert "usage" not in made[0]
    made, _ = read([{"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn", "usage": {"inputTokens": 3}}}])
    assert "usage" not in made[0]
    made, _ = read([{"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn", "usage": {"outputTokens": 3}}}])
    assert "usage" not in made[0]


def test_v1_errors_end_the_turn_only_for_the_prompt_in_the_body() -> None:
    prompt = recorded("v1-basic")[4]
    error = {"code": -32603, "message": "boom"}
    made, stop = read([prompt, {"jsonrpc": "2.0", "id": 2, "error": error}])
    assert made[-1] == {"type": "turn/end", "stopReason": "error", "error": error, "eventId": "k:1",
                        "source": {"format": "acp", "events": [{"jsonrpc": "2.0", "id": 2, "error": error}]}}
    assert stop == StreamStop("error", "error", error)
    refused([prompt, {"jsonrpc": "2.0", "id": 2, "error": error}, acp_message("More")], "id",
            "a message after the prompt response (event 1)")
    for other in ({"jsonrpc": "2.0", "id": 3, "error": error}, {"jsonrpc": "2.0", "id": None, "error": error},
                  {"jsonrpc": "2.0", "error": error}):
        made, stop = read([prompt, other])
        assert types(made) == ["x-acp-session-prompt", "x-acp-error"] and stop == StreamStop(None, None)
        assert made[1] == {"type": "x-acp-error", "eventId": "k:1", "source": {"format": "acp", "events": [other]}}
    unnumbered = {**prompt}
    del unnumbered["id"]
    made, stop = read([unnumbered, {"jsonrpc": "2.0", "id": None, "error": error}])
    assert types(made)[-1] == "x-acp-error"
    made, _ = read([{"jsonrpc": "2.0", "id": 1, "result": "ok"}, {"jsonrpc": "2.0", "id": 2, "result": {}}])
    assert types(made) == ["x-acp-response", "x-acp-response"]


@pytest.mark.parametrize(("event", "field", "says"), [
    ({"jsonrpc": "1.0", "method": "x"}, "jsonrpc", 'expected "2.0"'),
    ({"jsonrpc": "2.0", "method": 5}, "method", "expected a string"),
    ({"jsonrpc": "2.0", "id": 1}, "method", "a JSON-RPC message has a method, a result or an error"),
    ({"jsonrpc": "2.0", "id": 1, "error": "boom"}, "error", "expected an object"),
    ({"jsonrpc": "2.0", "method": "session/update"}, "params", "expected an object"),
    ({"jsonrpc": "2.0", "method": "session/update", "params": {}}, "params.update", "expected an object"),
    ({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {}}}, "params.update.sessionUpdate",
     "expected a string"),
    ({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "agent_message_chunk"}}},
     "params.update.content", "expected an object"),
    ({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {
        "sessionUpdate": "agent_thought_chunk", "content": {"type": "text"}}}}, "params.update.content.text",
     "expected a string"),
    ({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": 3}}, "result.stopReason", "expected a string"),
    ({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "paused"}}, "result.stopReason", UNKNOWN_PAUSED),
    ({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn", "usage": []}}, "result.usage",
     "expected an object"),
    *[({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn", "usage": {
        "inputTokens": 1, "outputTokens": 1, key: bad}}}, f"result.usage.{key}", "expected a non-negative integer")
      for key in ("inputTokens", "outputTokens", "cachedReadTokens", "cachedWriteTokens") for bad in (-1, "1", 1.5)],
])
def test_v1_refusals_name_the_field(event: Event, field: str, says: str) -> None:
    refused([acp_message("Hi"), event], field, says)
