"""Validation of ingested events (SPEC §3–§4), through ``lastword.rules.events.validate_events``.

A refused batch raises ``Unprocessable`` (422) whose problem names the offending event's
position in the batch (``index``) and the field (``message.content[0].text``).
"""

from __future__ import annotations

import calendar
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.errors import Unprocessable
from lastword.rules.events import is_plain_text_delta, validate_events

from tests.builders import chunk

Event = dict[str, Any]

OK_MESSAGE: Event = {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "hi"}]}}


def message_with(*blocks: Any, **body: Any) -> Event:
    return {"type": "assistant/message", "message": {"content": list(blocks), **body}}


def refusal(events: list[Any], **kwargs: Any) -> tuple[int, str]:
    """Validate, expecting a refusal; return its (index, field)."""
    with pytest.raises(Unprocessable) as caught:
        validate_events(events, **kwargs)
    error = caught.value
    assert error.status == 422
    problem = error.problem()
    assert problem["status"] == 422 and problem["index"] == error.extra["index"]
    assert str(error.extra["index"]) in error.detail and error.extra["field"] in error.detail
    return error.extra["index"], error.extra["field"]


# -- accepted ------------------------------------------------------------------------------------

VALID_EVENTS: dict[str, Event] = {
    "text-chunk": {"type": "assistant/chunk", "delta": {"type": "text", "text": "He"}},
    "empty-text-chunk": {"type": "assistant/chunk", "delta": {"type": "text", "text": ""}},
    "reasoning-chunk": {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": "hmm"}},
    "tool-call-chunk": {"type": "assistant/chunk", "delta": {"type": "tool_call", "id": "c1", "inputJson": "{"}},
    "message": {
        "type": "assistant/message",
        "eventId": "e-1",
        "ts": "2024-05-01T12:00:00Z",
        "message": {
            "id": "msg_1",
            "content": [
                {"type": "text", "text": "answer", "citations": []},
                {"type": "text", "text": ""},
                {"type": "reasoning", "text": "", "signature": "sig"},
                {"type": "tool_call", "id": "c1", "name": "search", "input": {"q": 1}},
                {"type": "tool_result", "toolCallId": "c1", "content": "found", "isError": False},
                {"type": "tool_result", "toolCallId": "c1", "content": [{"type": "text", "text": "x"}]},
                {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
                {"type": "step-start"},
                {"type": "step-finish", "reason": "stop"},
                {"type": "patch", "files": ["a.py"]},
            ],
            "usage": {"inputTokens": 0, "outputTokens": 5, "cacheReadTokens": 1, "cacheWriteTokens": 0},
            "stopReason": "end_turn",
            "error": None,
        },
    },
    "usage-only-message": {
        "type": "assistant/message",
        "message": {"content": [], "usage": {"inputTokens": 10, "outputTokens": 3}},
    },
    "tool-result-string": {"type": "tool/result", "toolCallId": "c1", "content": "ok"},
    "tool-result-blocks": {
        "type": "tool/result",
        "toolCallId": "c1",
        "content": [{"type": "text", "text": "ok"}, {"type": "image", "source": {}}],
        "isError": True,
    },
    "user-string": {"type": "user/message", "message": {"content": "go on"}},
    "user-blocks": {"type": "user/message", "message": {"content": [{"type": "text", "text": "go"}]}},
    "step-start": {"type": "step/start"},
    "step-finish": {"type": "step/finish", "anything": {"goes": [1, 2]}},
    "turn-end": {"type": "turn/end", "stopReason": "completed"},
    "turn-end-alias": {
        "type": "turn/end",
        "stopReason": "Max-Output-Tokens",
        "error": {"message": "cut"},
        "usage": {"inputTokens": 1, "outputTokens": 2},
    },
    "turn-end-string-error": {"type": "turn/end", "stopReason": "failed", "error": "boom"},
    "x-event": {"type": "x-vendor/trace", "whatever": [1, {"a": None}], "ts": "2024-05-01T12:00:00.5+02:00"},
    "x-event-bare": {"type": "x-"},
    "extra-fields": {
        "type": "assistant/chunk",
        "delta": {"type": "text", "text": "a", "index": 0},
        "producer": {"name": "p", "version": 2},
    },
    "event-id-200": {"type": "step/start", "eventId": "e" * 200},
    "ts-lowercase-and-space": {"type": "step/start", "ts": "2024-05-01 12:00:00.123456789z"},
    "ts-leap-second": {"type": "step/start", "ts": "2016-12-31T23:59:60Z"},
    "ts-negative-offset": {"type": "step/start", "ts": "2024-02-29T00:00:00-08:00"},
}


@pytest.mark.parametrize("event", list(VALID_EVENTS.values()), ids=list(VALID_EVENTS))
def test_valid_event_is_accepted(event: Event) -> None:
    """Every event type of SPEC §4, with optional and extra fields, passes validation."""
    validate_events([event])


def test_valid_batch_is_accepted_and_left_unchanged() -> None:
    """A batch of every valid event passes, and validation does not touch the events."""
    events = copy.deepcopy(list(VALID_EVENTS.values()))
    validate_events(events)
    assert events == list(VALID_EVENTS.values())
    assert list(events[4]["message"]) == ["id", "content", "usage", "stopReason", "error"]


def test_empty_batch_is_accepted() -> None:
    """An empty batch is nothing to refuse."""
    validate_events([])


# -- refused -------------------------------------------------------------------------------------

BAD_EVENTS: dict[str, tuple[Any, str]] = {
    # the type itself
    "unknown-type": ({"type": "assistant/msg"}, "type"),
    "type-missing": ({"delta": {"type": "text", "text": "a"}}, "type"),
    "type-not-a-string": ({"type": 5}, "type"),
    "type-x-uppercase": ({"type": "X-trace"}, "type"),
    "not-an-object": ("assistant/chunk", "type"),
    # missing fields
    "chunk-without-delta": ({"type": "assistant/chunk"}, "delta"),
    "delta-without-type": ({"type": "assistant/chunk", "delta": {"text": "a"}}, "delta"),
    "delta-unknown-type": ({"type": "assistant/chunk", "delta": {"type": "image"}}, "delta"),
    "text-delta-without-text": ({"type": "assistant/chunk", "delta": {"type": "text"}}, "delta.text"),
    "message-without-message": ({"type": "assistant/message"}, "message"),
    "message-without-content": ({"type": "assistant/message", "message": {}}, "message.content"),
    "text-block-without-text": (message_with({"type": "text"}), "message.content[0].text"),
    "tool-call-without-id": (message_with({"type": "tool_call", "name": "n", "input": {}}), "message.content[0].id"),
    "tool-call-without-input": (message_with({"type": "tool_call", "id": "c", "name": "n"}), "message.content[0].input"),
    "tool-result-block-without-call-id": (
        message_with({"type": "tool_result", "content": "x"}),
        "message.content[0].toolCallId",
    ),
    "tool-result-without-call-id": ({"type": "tool/result", "content": "x"}, "toolCallId"),
    "tool-result-without-content": ({"type": "tool/result", "toolCallId": "c"}, "content"),
    "user-without-content": ({"type": "user/message", "message": {}}, "message.content"),
    "turn-end-without-stop-reason": ({"type": "turn/end"}, "stopReason"),
    "usage-without-output-tokens": (message_with(usage={"inputTokens": 1}), "message.usage.outputTokens"),
    # blocks without a type
    "block-without-type": (message_with({"type": "text", "text": "a"}, {"text": "b"}), "message.content[1]"),
    "block-type-not-a-string": (message_with({"type": None}), "message.content[0]"),
    "block-not-an-object": (message_with("just text"), "message.content[0]"),
    "tool-result-event-block-without-type": ({"type": "tool/result", "toolCallId": "c", "content": [{}]}, "content[0]"),
    "user-block-without-type": ({"type": "user/message", "message": {"content": [{"text": "a"}]}}, "message.content[0]"),
    # wrong JSON types
    "text-not-a-string": (message_with({"type": "text", "text": 5}), "message.content[0].text"),
    "text-null": (message_with({"type": "text", "text": None}), "message.content[0].text"),
    "delta-text-not-a-string": ({"type": "assistant/chunk", "delta": {"type": "text", "text": 1}}, "delta.text"),
    "content-a-string": ({"type": "assistant/message", "message": {"content": "hi"}}, "message.content"),
    "message-a-string": ({"type": "assistant/message", "message": "hi"}, "message"),
    "tool-input-a-list": (
        message_with({"type": "tool_call", "id": "c", "name": "n", "input": []}),
        "message.content[0].input",
    ),
    "signature-a-number": (message_with({"type": "reasoning", "text": "", "signature": 1}), "message.content[0].signature"),
    "tokens-a-string": (message_with(usage={"inputTokens": "10", "outputTokens": 1}), "message.usage.inputTokens"),
    "tokens-a-bool": (message_with(usage={"inputTokens": 1, "outputTokens": True}), "message.usage.outputTokens"),
    "tokens-a-fraction": (message_with(usage={"inputTokens": 1.5, "outputTokens": 1}), "message.usage.inputTokens"),
    "usage-a-list": (message_with(usage=[1, 2]), "message.usage"),
    "is-error-a-string": ({"type": "tool/result", "toolCallId": "c", "content": "x", "isError": "yes"}, "isError"),
    "tool-result-content-a-number": ({"type": "tool/result", "toolCallId": "c", "content": 5}, "content"),
    "nested-tool-result-text": (
        message_with({"type": "tool_result", "toolCallId": "c", "content": [{"type": "text", "text": 3}]}),
        "message.content[0].content[0].text",
    ),
    "stop-reason-a-number": ({"type": "turn/end", "stopReason": 1}, "stopReason"),
    "event-id-a-number": ({"type": "step/start", "eventId": 7}, "eventId"),
    "ts-a-number": ({"type": "step/start", "ts": 1714564800}, "ts"),
    # negative usage
    "negative-input-tokens": (message_with(usage={"inputTokens": -1, "outputTokens": 0}), "message.usage.inputTokens"),
    "negative-cache-read": (
        message_with(usage={"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": -5}),
        "message.usage.cacheReadTokens",
    ),
    "negative-turn-end-usage": (
        {"type": "turn/end", "stopReason": "completed", "usage": {"inputTokens": 0, "outputTokens": -1}},
        "usage.outputTokens",
    ),
    # eventId, ts, stopReason
    "event-id-201": ({"type": "step/start", "eventId": "e" * 201}, "eventId"),
    "ts-words": ({"type": "step/start", "ts": "yesterday"}, "ts"),
    "ts-date-only": ({"type": "step/start", "ts": "2024-05-01"}, "ts"),
    "ts-without-offset": ({"type": "step/start", "ts": "2024-05-01T12:00:00"}, "ts"),
    "ts-basic-format": ({"type": "step/start", "ts": "20240501T120000Z"}, "ts"),
    "ts-week-date": ({"type": "step/start", "ts": "2024-W18-3T12:00:00Z"}, "ts"),
    "ts-month-13": ({"type": "step/start", "ts": "2024-13-01T00:00:00Z"}, "ts"),
    "ts-feb-30": ({"type": "step/start", "ts": "2023-02-29T00:00:00Z"}, "ts"),
    "ts-hour-24": ({"type": "step/start", "ts": "2024-05-01T24:00:00Z"}, "ts"),
    "ts-bad-offset": ({"type": "step/start", "ts": "2024-05-01T12:00:00+25:00"}, "ts"),
    "ts-non-ascii-digits": ({"type": "step/start", "ts": "٢٠٢٤-05-01T12:00:00Z"}, "ts"),
    "unknown-stop-reason": ({"type": "turn/end", "stopReason": "done"}, "stopReason"),
    "empty-stop-reason": ({"type": "turn/end", "stopReason": ""}, "stopReason"),
}


@pytest.mark.parametrize(("event", "field"), list(BAD_EVENTS.values()), ids=list(BAD_EVENTS))
def test_bad_event_is_refused_naming_its_field(event: Any, field: str) -> None:
    """A bad event is refused with 422, its index and the offending field's path."""
    assert refusal([event]) == (0, field)


@pytest.mark.parametrize(("event", "field"), list(BAD_EVENTS.values()), ids=list(BAD_EVENTS))
def test_index_is_the_bad_events_position_in_the_batch(event: Any, field: str) -> None:
    """Behind valid events the refusal names the bad event's own position, and the same field."""
    events = [OK_MESSAGE, VALID_EVENTS["text-chunk"], VALID_EVENTS["x-event"], event, OK_MESSAGE]
    assert refusal(events) == (3, field)


def test_first_bad_event_is_named() -> None:
    """With several bad events the first one in the batch is named."""
    events = [OK_MESSAGE, message_with({"type": "text", "text": 1}), {"type": "turn/end", "stopReason": "done"}, {"type": "?"}]
    assert refusal(events) == (1, "message.content[0].text")


def test_index_offset_shifts_the_index() -> None:
    """With index_offset (NDJSON lines) the index counts from the offset."""
    assert refusal([OK_MESSAGE, {"type": "nope"}], index_offset=40) == (41, "type")


def test_refusal_lists_the_problems() -> None:
    """The problem document carries the code and a list of errors with index, field and message."""
    with pytest.raises(Unprocessable) as caught:
        validate_events([OK_MESSAGE, {"type": "turn/end", "stopReason": "done"}])
    problem = caught.value.problem()
    assert problem["code"] == "invalid_event"
    assert problem["errors"]
    first = problem["errors"][0]
    assert (first["index"], first["field"]) == (1, "stopReason")
    assert "done" in first["message"]


# RFC 3339 timestamps of every form the models accept (lower-case t and z, a space, fractions of
# any length, offsets, the leap second, 29 February of a leap year), and near misses: one part a
# step out of its range or form (year 0000, month 13, 29 February of a common year, hour 24, second
# 61, offset +24:00, an offset without its colon, a newline after it), or one character changed,
# added or cut.
def _digits(low: int, high: int, width: int = 2) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(lambda n: str(n).zfill(width))


@st.composite
def _timestamp_parts(draw: st.DrawFn) -> list[str]:
    """The parts of a valid timestamp, one string each: date, separator, time, fraction, offset."""
    year = draw(st.one_of(st.sampled_from([1, 1900, 2000, 2023, 2024, 9999]), st.integers(1, 9999)))
    month = draw(st.integers(1, 12))
    last = calendar.monthrange(year, month)[1]
    day = draw(st.one_of(st.integers(28, last), st.integers(1, last)))
    fraction = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=12).map(lambda d: "." + d)))
    offset = draw(st.one_of(st.sampled_from(["Z", "z"]),
                            st.tuples(st.sampled_from("+-"), _digits(0, 23), _digits(0, 59))
                            .map(lambda part: f"{part[0]}{part[1]}:{part[2]}")))
    return ["", f"{year:04d}", f"-{month:02d}", f"-{day:02d}", draw(st.sampled_from("Tt ")), draw(_digits(0, 23)),
            f":{draw(_digits(0, 59))}", f":{draw(st.one_of(st.just('60'), _digits(0, 59)))}", fraction, offset]


#: For each part of :func:`_timestamp_parts`, values a step outside what the models accept.
_NEAR_PARTS: list[list[str]] = [
    [" ", "\ufeff", "x"],
    ["0000", "999", "10000", "\u0662\u0660\u0662\u0664", "+2024"],
    ["-00", "-13", "-1", "-001", "/01"],
    ["-00", "-32", "-29", "-30", "-31", "-1"],  # 29-31 overflow a month now and then (-02-29 of 2023)
    ["_", "", "TT", "\t", "T "],
    ["24", "25", "1", "\uff11\uff12"],
    [":60", ":99", ":1", "-00"],
    [":61", ":99", ":6", ":006"],
    [".", ",5", ".5.5", ". 5", ".\u0663"],
    ["", "+0100", "-2359", "+01", "+1:00", "+01:0", "+24:00", "+00:60", "UTC", "Z\n", "+01:00\n", "ZZ", "+01:00Z",
     " Z", "-00:00 "],
]


@st.composite
def _near_timestamps(draw: st.DrawFn) -> str:
    parts = draw(_timestamp_parts())
    where = draw(st.integers(0, len(parts) - 1))
    parts[where] = draw(st.sampled_from(_NEAR_PARTS[where]))
    return "".join(parts)


@st.composite
def _spoiled_timestamps(draw: st.DrawFn) -> str:
    ts = "".join(draw(_timestamp_parts()))
    at = draw(st.one_of(st.sampled_from([0, len(ts) - 1, len(ts)]), st.integers(0, len(ts))))
    other = draw(st.one_of(st.sampled_from(list("0129:-+.TtZz \n\u0663\uff12")), st.characters()))
    how = draw(st.sampled_from(["change", "add", "cut"]))
    if how == "add":
        return ts[:at] + other + ts[at:]
    return ts[:at] + (other if how == "change" else "") + ts[at + 1:]


_valid_timestamps = _timestamp_parts().map("".join)
_timestamps = st.one_of(_valid_timestamps, _near_timestamps(), _spoiled_timestamps())


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_near_text_deltas = st.fixed_dictionaries(
    {"type": st.sampled_from(["assistant/chunk", "assistant/message", "x-chunk"]),
     "delta": st.one_of(_json_values, st.fixed_dictionaries(
         {"type": st.sampled_from(["text", "reasoning", "tool_call"]), "text": _json_values},
         optional={"extra": _json_values}))},
    optional={"eventId": st.one_of(st.none(), st.integers(), st.text(max_size=205)),
              "ts": st.one_of(st.sampled_from(["yesterday", 1]), _timestamps), "other": _json_values},
)


@settings(max_examples=400, deadline=None)
@given(_near_text_deltas)
def test_fast_path_accepts_only_what_the_full_check_accepts(event: dict[str, Any]) -> None:
    """The text-delta shortcut never lets through an event that the full check would refuse."""
    from lastword.rules.events import _EVENT, is_plain_text_delta

    if is_plain_text_delta(event):
        _EVENT.validate_python(event)


# -- timestamps (RFC 3339 bounds) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "ts",
    [
        "2024-01-01T00:00:60Z",  # a leap second
        "2024-01-01T23:59:59+23:00",  # the largest offset hour
        "2024-01-01T23:59:59-00:59",  # the largest offset minute
        "2024-02-29T00:00:00Z",  # a leap day
        "2000-02-29T00:00:00Z",  # a leap day of a century
        "0001-01-01t00:00:00z",  # the first year; lower case
        "9999-12-31 23:59:59.123456789012+05:30",  # the last day; a space; a long fraction
    ],
)
def test_timestamps_at_the_bounds_are_accepted(ts: str) -> None:
    """ts at the edges of RFC 3339's ranges is accepted, on a text chunk and on any other event."""
    validate_events([{"type": "step/start", "ts": ts}, {**chunk("a"), "ts": ts}])


@pytest.mark.parametrize(
    "ts",
    [
        "2024-01-01T00:75:00Z",  # minute 75
        "2024-01-01T00:00:61Z",  # second 61
        "2024-01-01T24:00:00Z",  # hour 24
        "2023-02-29T00:00:00Z",  # no such day
        "2024-01-01T00:00:00+24:00",  # offset hour 24
        "2024-01-01T00:00:00+00:60",  # offset minute 60
        "2024-01-01T00:00:00Zjunk",  # trailing junk
        "2024-01-01T00:00:00Z\n",  # a trailing newline
        "2024-01-01T00:00:00+0100",  # an offset without its colon
        "2024-01-01T00:00:00.Z",  # a point without digits
        "1900-02-29T00:00:00Z",  # a century not a leap year
        "0000-01-01T00:00:00Z",  # year 0
        "2024-01-01T00:00:00",  # no offset
        " 2024-01-01T00:00:00Z",  # leading space
    ],
)
def test_timestamps_out_of_range_are_refused(ts: str) -> None:
    """ts past RFC 3339's ranges, or with anything around it, is refused naming ts, on any event."""
    for event in ({"type": "step/start", "ts": ts}, {**chunk("a"), "ts": ts}):
        with pytest.raises(Unprocessable) as caught:
            validate_events([event])
        assert (caught.value.extra["index"], caught.value.extra["field"]) == (0, "ts")
        assert caught.value.detail == "event 0: ts: Value error, ts must be an RFC 3339 timestamp"


# -- the text-chunk fast path --------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [chunk("a"), chunk(""), chunk("a", "e"), chunk("a", "e" * 200), {**chunk("a"), "eventId": None},
     {**chunk("a"), "ts": "2024-01-01T00:00:00Z"}, {**chunk("a", "e"), "ts": "2024-12-31t23:59:60.123456789+05:30"},
     {**chunk("a"), "ts": None}],
    ids=["plain", "empty", "event-id", "event-id-200", "event-id-null", "ts", "ts-and-id", "ts-null"],
)
def test_plain_text_chunks_take_the_fast_path(event: Event) -> None:
    """A text chunk with at most an eventId and a ts skips the full check (most of a stream is these)."""
    assert is_plain_text_delta(event)


@pytest.mark.parametrize(
    "event",
    [
        {**chunk("a"), "ts": "2024-02-29T00:00:00Z"},
        {**chunk("a"), "ts": "2024-01-01T00:00:00+0100"},
        {**chunk("a"), "ts": 1},
        {**chunk("a"), "extra": 1},
        {**chunk("a"), "eventId": ""},
        {**chunk("a"), "eventId": "e" * 201},
        {**chunk("a"), "eventId": 7},
        {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": "a"}},
        {"type": "assistant/chunk", "delta": {"type": "text", "text": 5}},
        {"type": "assistant/chunk", "delta": {"type": "text"}},
        {"type": "assistant/chunk", "delta": "a"},
        {"type": "assistant/chunk"},
        {"type": "assistant/message", "delta": {"type": "text", "text": "a"}},
        ["assistant/chunk"],
    ],
    ids=["ts-29-february", "ts-no-colon", "int-ts",
         "extra", "empty-id", "long-id", "int-id", "reasoning", "int-text", "no-text", "str-delta",
         "no-delta", "other-type", "not-an-object"],
)
def test_everything_else_takes_the_full_check(event: Any) -> None:
    """Anything beyond a bare text chunk (a ts on 29 February or not RFC 3339, extra fields, another id
    or delta) is checked in full."""
    assert not is_plain_text_delta(event)


@pytest.mark.parametrize(
    ("event_id", "accepted"),
    [("e", True), ("e" * 200, True), ("", False), ("e" * 201, False), (7, False), (None, True)],
)
def test_a_text_chunks_event_id_is_checked(event_id: Any, accepted: bool) -> None:
    """eventId on a text chunk is held to 1-200 characters like on any event (SPEC §4)."""
    event = {**chunk("a"), "eventId": event_id}
    if accepted:
        validate_events([event])
    else:
        assert refusal([chunk("fine"), event]) == (1, "eventId")


def test_a_text_chunks_extra_fields_are_checked_and_kept() -> None:
    """A text chunk with extra fields goes through the full check, and stays as it was sent."""
    event = {**chunk("a", "e1"), "producer": {"v": 2}}
    validate_events([event])
    assert event == {**chunk("a", "e1"), "producer": {"v": 2}}


# -- the problem document ------------------------------------------------------------------------


def test_an_unknown_type_is_named_with_the_known_ones() -> None:
    """An unknown event type is refused at 'type' with the list of known types, not as a bad x- event."""
    with pytest.raises(Unprocessable) as caught:
        validate_events([{"type": "assistant/nonsense"}])
    assert caught.value.extra["field"] == "type"
    assert "must be one of assistant/chunk" in caught.value.detail and "'x-'" in caught.value.detail


def test_the_deepest_problem_of_the_first_bad_event_is_named() -> None:
    """Of several problems in one event the most specific (deepest) location is named."""
    event = message_with(id=5, usage={"inputTokens": -1, "outputTokens": 0})
    assert refusal([event]) == (0, "message.usage.inputTokens")


def test_the_problem_lists_at_most_twenty_errors() -> None:
    """A batch of many bad events is refused with the first twenty errors listed."""
    with pytest.raises(Unprocessable) as caught:
        validate_events([{"type": "turn/end", "stopReason": "done"}] * 25)
    errors = caught.value.extra["errors"]
    assert len(errors) == 20
    assert [error["index"] for error in errors] == list(range(20))


@pytest.mark.parametrize("value", [2.0, 0.0])
def test_whole_number_floats_count_as_token_counts(value: float) -> None:
    """A token count sent as 2.0 is the JSON number 2 and is accepted; 2.5 is not."""
    validate_events([message_with(usage={"inputTokens": value, "outputTokens": 1})])
    assert refusal([message_with(usage={"inputTokens": value + 0.5, "outputTokens": 1})]) == (
        0, "message.usage.inputTokens")


# -- every required field, limit and type ------------------------------------------------------

_TOOL_CALL = {"type": "tool_call", "id": "c1", "name": "search", "input": {}}
_TOOL_RESULT_BLOCK = {"type": "tool_result", "toolCallId": "c1", "content": "found"}
_USAGE = {"inputTokens": 1, "outputTokens": 2}

#: A valid event, and the path (as a list of keys) of one of its required fields.
_REQUIRED: dict[str, tuple[Event, list[Any], str]] = {
    "chunk.delta": (chunk("a"), ["delta"], "delta"),
    "chunk.delta.text": ({**chunk("a"), "eventId": "e"}, ["delta", "text"], "delta.text"),
    "reasoning-delta.text": ({"type": "assistant/chunk", "delta": {"type": "reasoning", "text": "r"}},
                             ["delta", "text"], "delta.text"),
    "message": (message_with(), ["message"], "message"),
    "message.content": (message_with(), ["message", "content"], "message.content"),
    "text.text": (message_with({"type": "text", "text": "a"}), ["message", "content", 0, "text"],
                  "message.content[0].text"),
    "reasoning.text": (message_with({"type": "reasoning", "text": "a"}), ["message", "content", 0, "text"],
                       "message.content[0].text"),
    "tool_call.id": (message_with(_TOOL_CALL), ["message", "content", 0, "id"], "message.content[0].id"),
    "tool_call.name": (message_with(_TOOL_CALL), ["message", "content", 0, "name"], "message.content[0].name"),
    "tool_call.input": (message_with(_TOOL_CALL), ["message", "content", 0, "input"], "message.content[0].input"),
    "tool_result.toolCallId": (message_with(_TOOL_RESULT_BLOCK), ["message", "content", 0, "toolCallId"],
                               "message.content[0].toolCallId"),
    "tool_result.content": (message_with(_TOOL_RESULT_BLOCK), ["message", "content", 0, "content"],
                            "message.content[0].content"),
    "usage.inputTokens": (message_with(usage=dict(_USAGE)), ["message", "usage", "inputTokens"],
                          "message.usage.inputTokens"),
    "usage.outputTokens": (message_with(usage=dict(_USAGE)), ["message", "usage", "outputTokens"],
                           "message.usage.outputTokens"),
    "tool/result.toolCallId": ({"type": "tool/result", "toolCallId": "c", "content": "x"}, ["toolCallId"],
                               "toolCallId"),
    "tool/result.content": ({"type": "tool/result", "toolCallId": "c", "content": "x"}, ["content"], "content"),
    "user.content": ({"type": "user/message", "message": {"content": "go"}}, ["message", "content"],
                     "message.content"),
    "turn/end.stopReason": ({"type": "turn/end", "stopReason": "completed"}, ["stopReason"], "stopReason"),
}


def _replaced(event: Event, path: list[Any], value: Any) -> Event:
    changed = copy.deepcopy(event)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


@pytest.mark.parametrize(("event", "path", "field"), list(_REQUIRED.values()), ids=list(_REQUIRED))
def test_a_required_field_may_be_neither_null_nor_missing(event: Event, path: list[Any], field: str) -> None:
    """Every required field of SPEC §3–§4 is refused as null and as missing, naming it."""
    validate_events([event])
    assert refusal([_replaced(event, path, None)])[1] == field
    missing = copy.deepcopy(event)
    target = missing
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    assert refusal([missing])[1] == field


@pytest.mark.parametrize(
    ("event", "path", "value", "field"),
    [
        (message_with(usage=dict(_USAGE)), ["message", "usage", "inputTokens"], -1, "message.usage.inputTokens"),
        (message_with(usage=dict(_USAGE)), ["message", "usage", "outputTokens"], 2**53, "message.usage.outputTokens"),
        (message_with(usage={**_USAGE, "cacheReadTokens": 0}), ["message", "usage", "cacheReadTokens"], -1,
         "message.usage.cacheReadTokens"),
        (message_with(usage={**_USAGE, "cacheWriteTokens": 0}), ["message", "usage", "cacheWriteTokens"], "3",
         "message.usage.cacheWriteTokens"),
        (message_with(usage=dict(_USAGE)), ["message", "usage", "inputTokens"], "1", "message.usage.inputTokens"),
        (message_with(usage=dict(_USAGE)), ["message", "usage", "inputTokens"], True, "message.usage.inputTokens"),
        (message_with(_TOOL_CALL), ["message", "content", 0, "input"], "{}", "message.content[0].input"),
        (message_with(_TOOL_CALL), ["message", "content", 0, "id"], 1, "message.content[0].id"),
        (message_with({"type": "reasoning", "text": "a", "signature": "s"}), ["message", "content", 0, "signature"],
         1, "message.content[0].signature"),
        (message_with(_TOOL_RESULT_BLOCK), ["message", "content", 0, "isError"], "no", "message.content[0].isError"),
        (message_with(), ["message", "id"], 1, "message.id"),
        (message_with(), ["message", "stopReason"], 1, "message.stopReason"),
        (message_with(), ["message", "content"], "text", "message.content"),
        ({"type": "tool/result", "toolCallId": "c", "content": "x"}, ["isError"], "yes", "isError"),
        ({"type": "tool/result", "toolCallId": "c", "content": "x"}, ["content"], 5, "content"),
        ({"type": "step/start"}, ["eventId"], "e" * 201, "eventId"),
        ({"type": "step/start"}, ["eventId"], "", "eventId"),
        ({"type": "step/start"}, ["ts"], 1700000000, "ts"),
        ({"type": "turn/end", "stopReason": "completed"}, ["stopReason"], 1, "stopReason"),
        ({"type": "turn/end", "stopReason": "completed", "usage": dict(_USAGE)}, ["usage", "inputTokens"], -5,
         "usage.inputTokens"),
    ],
)
def test_limits_and_types_are_held(event: Event, path: list[Any], value: Any, field: str) -> None:
    """Token counts are whole numbers in 0…2**53-1, ids and texts are strings, flags booleans, input an object."""
    validate_events([event])
    assert refusal([_replaced(event, path, value)])[1] == field


def test_optional_fields_may_be_null() -> None:
    """Optional fields sent as null are accepted (and kept)."""
    validate_events([
        {"type": "step/start", "eventId": None, "ts": None},
        message_with({"type": "reasoning", "text": "", "signature": None}, id=None, usage=None, stopReason=None),
        message_with(usage={**_USAGE, "cacheReadTokens": None, "cacheWriteTokens": None}),
        {"type": "tool/result", "toolCallId": "c", "content": "x", "isError": None},
        {"type": "turn/end", "stopReason": "completed", "usage": None, "error": None},
    ])


# -- the msgspec fast check ----------------------------------------------------------------------

def _mostly(good: list[Any] | st.SearchStrategy[Any],
            bad: list[Any] | st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly one of ``good``, now and then one of ``bad`` (values or a strategy each)."""
    good_values = good if isinstance(good, st.SearchStrategy) else st.sampled_from(good)
    bad_values = bad if isinstance(bad, st.SearchStrategy) else st.sampled_from(bad)
    return st.integers(0, 7).flatmap(lambda n: bad_values if n == 7 else good_values)


# Values at and around each bound the fast check and the models draw, most of them accepted by
# both, so that a batch of several is often accepted whole by the fast check.
_counts = _mostly([0, 7, 2**53 - 1, None], [2**53, -1, True, 2.0, 2.5, "1"])
_texts = _mostly(st.text(max_size=3), [5, None, ["a"]])
_usages = _mostly(
    st.fixed_dictionaries({"inputTokens": _counts, "outputTokens": _counts},
                          optional={"cacheReadTokens": _counts, "cacheWriteTokens": _counts, "extra": _json_values}),
    _json_values)
_near_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _texts}),
    st.fixed_dictionaries({"type": st.just("tool_call"), "id": _texts, "name": _texts,
                           "input": _mostly(st.just({"q": 1}), _json_values)}),
    st.fixed_dictionaries(
        {"type": _mostly(["text", "reasoning", "tool_call"], ["tool_result", "step-start", 3])},
        optional={"text": _texts, "signature": st.sampled_from([None, "s", 1]), "id": _texts, "name": _texts,
                  "input": st.one_of(st.just({}), _json_values), "toolCallId": st.text(max_size=2),
                  "content": _texts, "extra": _json_values}))
_event_ids = _mostly([None, "e", "e" * 200, "😀" * 200], ["", "e" * 201, "😀" * 201, 7, True])
_common = {"eventId": _event_ids, "ts": _mostly(st.one_of(st.none(), _valid_timestamps),
                                                  st.one_of(st.sampled_from(["yesterday", 1]), _timestamps)),
           "extra": _json_values}
_near_chunks = st.fixed_dictionaries(
    {"type": _mostly(["assistant/chunk"], ["assistant/message", "x-c"]),
     "delta": _mostly(
         st.fixed_dictionaries({"type": _mostly(["text", "reasoning", "tool_call"], ["other", None])},
                               optional={"text": _texts, "id": _texts, "extra": _json_values}),
         _json_values)},
    optional=_common)
_near_messages = st.fixed_dictionaries(
    {"type": _mostly(["assistant/message"], ["assistant/chunk", "x-m", "turn/end"]),
     "message": _mostly(
         st.fixed_dictionaries({"content": _mostly(st.lists(_near_blocks, max_size=3), _texts)},
                               optional={"id": _texts, "usage": _usages, "stopReason": _texts,
                                         "error": _json_values, "extra": _json_values}),
         _json_values)},
    optional={**_common, "stopReason": st.sampled_from(["completed", "done"])})
_near_events = _mostly(st.one_of(_near_chunks, _near_messages), st.one_of(_near_text_deltas, _json_values))


# Events the fast check accepts, then one of their values replaced (or removed) by a value near
# a bound of some field: every way to step just outside what it should accept.
_fast_chunks = st.fixed_dictionaries(
    {"type": st.just("assistant/chunk"),
     "delta": st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["text", "reasoning"]),
                                               "text": st.text(max_size=3)}),
                        st.fixed_dictionaries({"type": st.just("tool_call")}, optional={"id": st.text(max_size=2)}))},
    optional={"eventId": st.sampled_from([None, "e", "e" * 200, "😀" * 200]),
              "ts": st.one_of(st.none(), _valid_timestamps), "extra": _json_values})
_fast_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "text": st.text(max_size=3)},
                          optional={"signature": st.one_of(st.none(), st.text(max_size=2))}),
    st.fixed_dictionaries({"type": st.just("tool_call"), "id": st.text(max_size=2), "name": st.text(max_size=2),
                           "input": st.dictionaries(st.text(max_size=2), _json_values, max_size=2)}))
_fast_counts = st.sampled_from([0, 7, 2**53 - 1])
_fast_messages = st.fixed_dictionaries(
    {"type": st.just("assistant/message"),
     "message": st.fixed_dictionaries(
         {"content": st.lists(_fast_blocks, max_size=3)},
         optional={"id": st.one_of(st.none(), st.text(max_size=2)),
                   "stopReason": st.one_of(st.none(), st.text(max_size=2)),
                   "error": _json_values,
                   "usage": st.one_of(st.none(), st.fixed_dictionaries(
                       {"inputTokens": _fast_counts, "outputTokens": _fast_counts},
                       optional={"cacheReadTokens": st.one_of(st.none(), _fast_counts),
                                 "cacheWriteTokens": st.one_of(st.none(), _fast_counts)}))})},
    optional={"eventId": st.sampled_from([None, "e", "e" * 200, "😀" * 200]),
              "ts": st.one_of(st.none(), _valid_timestamps)})
_HAZARDS: list[Any] = [None, "", "e" * 201, "😀" * 201, -1, 2**53, True, False, 2.0, 2.5, "x", "text", "tool_result",
            "step-start", "x-e", "turn/end", "2026-01-01T00:00:00Z", "yesterday", [], {}, [{}], 7,
            "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:61Z", "2026-01-01T00:00:00+0100", "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00Z\n"]
_REMOVED = object()


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (dict keys and list positions)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            found += _places(item, (*path, position))
    return found


@st.composite
def _spoiled_events(draw: st.DrawFn) -> Any:
    event = copy.deepcopy(draw(st.one_of(_fast_chunks, _fast_messages)))
    places = _places(event)
    path = draw(st.sampled_from(places))
    value = draw(st.sampled_from([*_HAZARDS, _REMOVED]))
    parent = event
    for step in path[:-1]:
        parent = parent[step]
    if value is _REMOVED:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return event


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.one_of(_fast_chunks, _fast_messages, _spoiled_events()), min_size=1, max_size=3))
def test_the_fast_check_accepts_no_event_a_step_outside(events: list[Any]) -> None:
    """Events the fast check accepts, each possibly with one value replaced by one near a bound (or
    removed): validation answers exactly as the models alone."""
    from lastword.rules.events import fast_accepts, validate_in_full

    assert _outcome(validate_events, events) == _outcome(validate_in_full, events)
    if fast_accepts(events):
        validate_in_full(events)


def _outcome(check: Any, events: list[Any]) -> dict[str, Any] | None:
    try:
        check(events)
    except Unprocessable as error:
        return error.problem()
    return None


@settings(max_examples=2500, deadline=None)
@given(st.lists(_near_events, min_size=1, max_size=2))
def test_the_fast_check_changes_no_answer(events: list[Any]) -> None:
    """For any batch, validation with the msgspec fast check accepts, or refuses with the same
    problem, exactly as the models alone (the fast check only ever accepts what they accept)."""
    from lastword.rules.events import fast_accepts, validate_in_full

    assert _outcome(validate_events, events) == _outcome(validate_in_full, events)
    if fast_accepts(events):
        validate_in_full(events)


def test_the_common_events_take_the_fast_check() -> None:
    """Text, reasoning and tool-call chunks and assistant messages with usage, ids and a ts (but on
    29 February) are accepted by the fast check (so a streamed session skips the models)."""
    from lastword.rules.events import fast_accepts

    events = [chunk("a"), chunk("", "e" * 200), {**chunk("a"), "ts": None, "extra": [1]},
              {**chunk("a"), "ts": "2026-01-01T00:00:00Z"}, {**chunk("a"), "ts": "2026-12-31 23:59:60.5-12:30"},
              {**message_with(), "ts": "0001-03-31t00:00:00.123456789012z"},
              VALID_EVENTS["reasoning-chunk"], VALID_EVENTS["tool-call-chunk"],
              message_with({"type": "text", "text": "x"}, {"type": "reasoning", "text": "", "signature": "s"},
                           {"type": "tool_call", "id": "c", "name": "n", "input": {}},
                           id="m", usage={"inputTokens": 1, "outputTokens": 2**53 - 1, "cacheReadTokens": None},
                           stopReason="end_turn", error=None)]
    assert fast_accepts(events)
    for refused_or_left in ({**chunk("a"), "ts": "2024-02-29T00:00:00Z"},
                            {**chunk("a"), "ts": "2026-01-01T00:00:00+0100"}, {**chunk("a"), "eventId": "e" * 201},
                            message_with(usage={"inputTokens": True, "outputTokens": 1}),
                            message_with({"type": "step-start"}), {"type": "turn/end", "stopReason": "completed"}):
        assert not fast_accepts([*events, refused_or_left])


@settings(max_examples=1500, deadline=None)
@given(_timestamps)
def test_the_fast_checks_take_a_ts_only_when_the_models_do(ts: str) -> None:
    """Any timestamp, valid or a near miss: on a text chunk and on a message, the fast check and the
    text-delta shortcut accept it only if the models do, and validation answers as the models alone."""
    from lastword.rules.events import _EVENT, fast_accepts, validate_in_full

    for event in ({**chunk("a"), "ts": ts}, {**OK_MESSAGE, "ts": ts}):
        assert _outcome(validate_events, [event]) == _outcome(validate_in_full, [event])
        if fast_accepts([event]) or is_plain_text_delta(event):
            _EVENT.validate_python(event)


@settings(max_examples=500, deadline=None)
@given(_valid_timestamps)
def test_a_valid_ts_takes_the_fast_checks_but_on_29_february(ts: str) -> None:
    """Every RFC 3339 form a producer may stamp takes the fast check and the text-delta shortcut;
    29 February (a leap year or not) is left to the models."""
    from lastword.rules.events import fast_accepts

    taken = ts[4:10] != "-02-29"
    assert fast_accepts([{**chunk("a"), "ts": ts}, {**OK_MESSAGE, "ts": ts}]) == taken
    assert is_plain_text_delta({**chunk("a"), "ts": ts}) == taken


# -- the models decide only the events the fast check leaves -------------------------------------

_TS = "2024-02-29T00:00:00Z"  # a ts the fast check leaves to the models


def test_only_the_events_the_fast_check_refuses_are_left_to_the_models() -> None:
    """A batch of common events with a few the fast check does not describe (an ``x-`` event, a
    ``ts`` on 29 February, a step, a ``turn/end`` at its end) leaves only those to the models."""
    from lastword.rules.events import left_to_models

    events: list[Any] = [chunk(str(n)) for n in range(40)]
    events[3] = {"type": "x-note"}
    events[4] = message_with({"type": "text", "text": "m"})
    events[17] = {**chunk("t"), "ts": _TS}
    events[18] = {"type": "step/start"}
    events[39] = {"type": "turn/end", "stopReason": "completed"}
    assert left_to_models(events) == [3, 17, 18, 39]
    assert left_to_models(events[:39]) == [3, 17, 18]
    assert left_to_models(events[4:17]) == []
    assert left_to_models([]) == []
    validate_events(events)


@pytest.mark.parametrize("size", [8, 27, 30, 40, 100])
def test_past_its_resumes_the_rest_goes_as_without_the_fast_check(size: int) -> None:
    """The fast check goes on after FAST_RESUMES refused events and one more per RESUME_SPACING
    events; from the next refusal on, every event but a plain text delta is left to the models."""
    from lastword.rules.events import FAST_RESUMES, RESUME_SPACING, left_to_models

    resumes = FAST_RESUMES + size // RESUME_SPACING
    # Pairs of an x- event and a message (which the fast check accepts, a plain delta check not),
    # then plain text deltas.
    events: list[Any] = []
    while len(events) < size:
        events += [{"type": "x-note"}, message_with({"type": "text", "text": "m"}), chunk("c")]
    events = events[:size]
    refused = [index for index, event in enumerate(events) if event["type"] == "x-note"]
    if len(refused) <= resumes:
        expected = refused
    else:
        cut = refused[resumes]
        expected = refused[:resumes] + [index for index in range(cut, size) if not is_plain_text_delta(events[index])]
    assert left_to_models(events) == expected
    # Each way is taken: 27 events refuse exactly as many as resume (9), 30 one more.
    assert (len(refused) > resumes) == (size >= 30)


_batch_events = st.one_of(_fast_chunks, _fast_messages, _spoiled_events(), _near_events,
                          st.just({"type": "x-note"}), st.just({**chunk("t"), "ts": _TS}),
                          st.just({"type": "turn/end", "stopReason": "completed"}))


@settings(max_examples=600, deadline=None)
@given(st.lists(_batch_events, max_size=40))
def test_the_models_see_exactly_the_events_the_fast_check_refuses(events: list[Any]) -> None:
    """For any batch, each event left to the models (before the resumes run out) is one the fast
    check refuses alone, each other one it accepts alone; and the answer is the models' alone."""
    from lastword.rules.events import FAST_RESUMES, RESUME_SPACING, fast_accepts, left_to_models, validate_in_full

    left = left_to_models(events)
    assert left == sorted(set(left))
    refused_alone = [index for index, event in enumerate(events) if not fast_accepts([event])]
    resumes = FAST_RESUMES + len(events) // RESUME_SPACING
    if len(refused_alone) <= resumes:
        assert left == refused_alone
    else:
        cut = refused_alone[resumes]
        assert left == refused_alone[:resumes] + [
            index for index in range(cut, len(events)) if not is_plain_text_delta(events[index])]
    assert _outcome(validate_events, events) == _outcome(validate_in_full, events)
