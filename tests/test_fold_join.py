"""Joined continuations (SPEC §14) through ``lastword.rules.fold`` only: examples and properties.

The HTTP side (runs created with ``selection: {joinContinuations: true}``) is in
``tests/test_api_join_continuations.py``; this module is pure, so the mutation script runs it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.rules.fold import TurnFold, final_assistant_output

Event = dict[str, Any]
Block = dict[str, Any]


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def call(call_id: str = "c1") -> Block:
    return {"type": "tool_call", "id": call_id, "name": "search", "input": {}}


def segment(*blocks: Block, stop: str | None = "max_tokens", **extra: Any) -> Event:
    body: dict[str, Any] = {"content": list(blocks), **extra}
    if stop is not None:
        body["stopReason"] = stop
    return {"type": "assistant/message", "message": body}


def joined(events: list[Event]) -> list[Block]:
    """The output with the option, by both entry points (which must agree)."""
    fold = TurnFold(join_continuations=True)
    for event in events:
        fold.push(event)
    batch = final_assistant_output(events, join_continuations=True)
    assert fold.collect() == batch
    return batch


TOOL_RESULT = {"type": "tool/result", "toolCallId": "c1", "content": "r"}
USER = {"type": "user/message", "message": {"content": "more"}}
EMPTY = {"type": "assistant/message", "message": {"content": [], "usage": {"inputTokens": 1, "outputTokens": 9}}}


def test_three_max_tokens_segments_are_joined_in_order() -> None:
    """A reply split over three segments is one output, in order; §5 alone gives the last."""
    events = [segment(text("one ")), segment(text("two ")), segment(text("three"), stop="end_turn")]
    assert joined(events) == [text("one "), text("two "), text("three")]
    assert final_assistant_output(events) == [text("three")]


def test_every_segment_may_have_ended_at_max_tokens() -> None:
    """When the last segment hit the ceiling too, all of them are still joined."""
    assert joined([segment(text("a")), segment(text("b"))]) == [text("a"), text("b")]


@pytest.mark.parametrize("alias", ["length", "max_output_tokens", "MAX-TOKENS"])
def test_max_tokens_aliases_count(alias: str) -> None:
    """A message-level stop reason is read with the aliases of SPEC §6."""
    assert joined([segment(text("a"), stop=alias), segment(text("b"), stop=None)]) == [text("a"), text("b")]


@pytest.mark.parametrize("stop", [None, "end_turn", "tool_use", "not-a-reason", 7])
def test_a_message_that_did_not_hit_the_ceiling_is_not_continued(stop: Any) -> None:
    """Only segments cut by the ceiling are joined to what follows them."""
    events = [segment(text("a"), stop=None), segment(text("b"), stop=None)]
    events[0]["message"]["stopReason"] = stop
    if stop is None:
        del events[0]["message"]["stopReason"]
    assert joined(events) == [text("b")]


@pytest.mark.parametrize("between", [TOOL_RESULT, USER], ids=["tool_result", "user_message"])
def test_a_tool_result_or_user_message_between_segments_stops_the_join(between: Event) -> None:
    """What the model saw between two segments makes them two replies."""
    events = [segment(text("a")), between, segment(text("b")), segment(text("c"), stop=None)]
    assert joined(events) == [text("b"), text("c")]


def test_a_segment_holding_a_tool_call_stops_the_join() -> None:
    """A segment with a tool call is not joined, nor is what precedes it."""
    events = [segment(text("a")), segment(text("b"), call()), segment(text("c")), segment(text("d"), stop=None)]
    assert joined(events) == [text("c"), text("d")]
    assert joined(events[:2]) == [text("b"), call()]


def test_empty_usage_only_messages_neither_join_nor_stop() -> None:
    """Usage-only messages between segments change nothing."""
    events = [segment(text("a")), EMPTY, segment(stop="max_tokens"), segment(text("b"), stop=None), EMPTY]
    assert joined(events) == [text("a"), text("b")]


def test_chunks_and_steps_between_segments_change_nothing() -> None:
    """Streamed deltas and step events are not what stops a join."""
    events = [segment(text("a")), {"type": "assistant/chunk", "delta": {"type": "text", "text": "zz"}},
              {"type": "step/finish"}, {"type": "step/start"}, segment(text("b"), stop=None)]
    assert joined(events) == [text("a"), text("b")]


def test_blocks_of_joined_segments_are_their_output_blocks() -> None:
    """Each segment contributes its output blocks: blank text, bookkeeping and results removed."""
    events = [segment(text(" "), text("a"), {"type": "step-finish"}), segment(text("b"), stop=None)]
    assert joined(events) == [text("a"), text("b")]


def test_reading_between_segments_does_not_change_later_reads() -> None:
    """collect() after each push answers the join so far, and later pushes go on from it."""
    fold = TurnFold(join_continuations=True)
    fold.push(segment(text("a")))
    first = fold.collect()
    fold.push(segment(text("b"), stop=None))
    assert first == [text("a")]
    assert fold.collect() == [text("a"), text("b")]
    fold.push(segment(text("c"), stop=None))
    assert fold.collect() == [text("c")]


# -- properties ----------------------------------------------------------------------------------

_texts = st.sampled_from(["", " ", "a", "b c", "\n"])
_blocks = st.one_of(
    st.builds(text, _texts),
    st.builds(lambda t: {"type": "reasoning", "text": t}, _texts),
    st.builds(call, st.sampled_from(["c1", "c2"])),
    st.just({"type": "tool_result", "toolCallId": "c1", "content": "x"}),
    st.just({"type": "step-start"}),
)
_stops = st.sampled_from([None, "max_tokens", "length", "max_output_tokens", "end_turn", "tool_use", "bogus"])
_events = st.one_of(
    st.builds(lambda blocks, stop: segment(*blocks, stop=stop), st.lists(_blocks, max_size=3), _stops),
    st.builds(lambda t: {"type": "assistant/chunk", "delta": {"type": "text", "text": t}}, _texts),
    st.just(TOOL_RESULT), st.just(USER), st.just(EMPTY), st.just({"type": "step/start"}),
    st.just({"type": "turn/end", "stopReason": "completed"}),
)


def _kept(event: Event) -> list[Block]:
    return [b for b in event["message"]["content"] if b["type"] not in ("tool_result", "step-start")
            and not (b["type"] == "text" and not b["text"].strip())]


def _ceiling(event: Event) -> bool:
    return event["message"].get("stopReason") in ("max_tokens", "length", "max_output_tokens")


def reference(events: list[Event], join: bool) -> list[Block]:
    """SPEC §5 read literally, and §14 read backwards from the selected message."""
    positions = [i for i, e in enumerate(events) if e["type"] == "assistant/message" and _kept(e)]
    if not positions:
        streamed = "".join(e["delta"]["text"] for e in events if e["type"] == "assistant/chunk")
        return [text(streamed)] if streamed.strip() else []
    selected = positions[-1]
    output = _kept(events[selected])
    if not join or any(b["type"] == "tool_call" for b in output):
        return output
    for event in reversed(events[:selected]):
        if event["type"] in ("tool/result", "user/message"):
            break
        if event["type"] != "assistant/message" or not _kept(event):
            continue
        earlier = _kept(event)
        if not _ceiling(event) or any(b["type"] == "tool_call" for b in earlier):
            break
        output = earlier + output
    return output


@settings(max_examples=400, deadline=None)
@given(st.lists(_events, max_size=14))
def test_without_the_option_the_rule_is_unchanged(events: list[Event]) -> None:
    """For any log, a fold without the option answers exactly §5 (the literal reference)."""
    plain = TurnFold()
    off = TurnFold(join_continuations=False)
    for event in events:
        plain.push(event)
        off.push(event)
        assert plain.collect() == off.collect()
    assert plain.collect() == final_assistant_output(events) == reference(events, join=False)
    assert final_assistant_output(events, join_continuations=False) == reference(events, join=False)


@settings(max_examples=400, deadline=None)
@given(st.lists(_events, max_size=14))
def test_with_the_option_the_join_matches_the_reference(events: list[Event]) -> None:
    """For any log, the incremental joining fold, the batch rule and the reference agree at every step."""
    fold = TurnFold(join_continuations=True)
    for index, event in enumerate(events):
        fold.push(event)
        assert fold.collect() == reference(events[: index + 1], join=True)
    assert final_assistant_output(events, join_continuations=True) == reference(events, join=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(_events, max_size=14))
def test_without_ceiling_segments_the_option_changes_nothing(events: list[Event]) -> None:
    """A log with no max-tokens message gives the same output with or without the option."""
    for event in events:
        if event["type"] == "assistant/message":
            event["message"].pop("stopReason", None)
    assert final_assistant_output(events, join_continuations=True) == final_assistant_output(events)
