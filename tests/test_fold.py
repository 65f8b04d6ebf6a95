"""The selection rule (SPEC §5), through ``lastword.rules.fold`` only: ``TurnFold`` and ``final_assistant_output``.

Every example is checked on both entry points (``output_of``) against ``tests.reference``, the
rule written again from the SPEC's words without ``lastword``; the property tests at the end
compare both entry points with that reference for random event sequences.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.rules.fold import TurnFold, final_assistant_output

from tests.builders import Block, Event, chunk, message, reasoning, text, tool_call, tool_result_block, usage
from tests.reference import expected_output, expected_usage, reference_turn


def fold_of(events: list[Event]) -> TurnFold:
    fold = TurnFold()
    for event in events:
        fold.push(event)
    return fold


def output_of(events: list[Event]) -> list[Block]:
    """The output by both entry points, each checked against the independent reference."""
    expected = expected_output(events)
    incremental = fold_of(events).collect()
    assert incremental == expected
    assert final_assistant_output(events) == expected
    return incremental


# -- the consequences SPEC §5 lists --------------------------------------------------------------


def test_empty_terminal_message_never_hides_an_earlier_non_empty_one() -> None:
    """An empty-content last message leaves the earlier non-empty message selected."""
    events = [message(text("the real answer")), message()]
    assert output_of(events) == [text("the real answer")]


@pytest.mark.parametrize("block", [reasoning("weighing options"), tool_call()], ids=["reasoning", "tool_call"])
@pytest.mark.parametrize("streamed_first", [True, False], ids=["text-before", "text-after"])
def test_textless_message_is_selected_over_streamed_text(block: Block, streamed_first: bool) -> None:
    """A reasoning-only or tool-call-only message wins over streamed text, before or after it."""
    streamed = [chunk("Let me "), chunk("look that up.")]
    events = [*streamed, message(block)] if streamed_first else [message(block), *streamed]
    assert output_of(events) == [block]


def test_message_is_selected_over_text_streamed_after_it() -> None:
    """A child cancelled mid-step reports its last complete message, not the newer partial text."""
    events = [message(text("step one done")), chunk("Now step two is half"), chunk("-written")]
    assert output_of(events) == [text("step one done")]


def test_tool_results_never_become_output() -> None:
    """tool/result events and tool_result blocks are never selected, even when they are the last word."""
    events = [
        message(text("calling"), tool_call()),
        {"type": "tool/result", "toolCallId": "call_1", "content": "the tool's answer"},
        message(tool_result_block()),
    ]
    assert output_of(events) == [text("calling"), tool_call()]


def test_cancelled_child_with_only_streamed_text_keeps_it() -> None:
    """Without a substantive message the streamed text is the output, not []."""
    events = [chunk("Partial "), chunk("answer before the cancel")]
    assert output_of(events) == [text("Partial answer before the cancel")]


# -- further cases -------------------------------------------------------------------------------


def test_no_message_and_no_text_gives_empty_output() -> None:
    """A turn with nothing substantive outputs []."""
    assert output_of([]) == []
    assert output_of([message(), {"type": "step/start"}, {"type": "turn/end", "stopReason": "cancelled"}]) == []


def test_usage_only_terminal_message_keeps_earlier_output_and_counts_its_usage() -> None:
    """An empty usage-only message after a real one: the output is the earlier one, the usage includes both."""
    events = [
        message(text("answer"), usage=usage(100, 20, cacheReadTokens=5)),
        message(usage=usage(30, 7, cacheWriteTokens=2)),
    ]
    fold = fold_of(events)
    assert fold.collect() == [text("answer")]
    assert fold.usage == {"inputTokens": 130, "outputTokens": 27, "cacheReadTokens": 5, "cacheWriteTokens": 2}


def test_streamed_text_is_the_whole_concatenation_unchanged() -> None:
    """The fallback keeps leading, inner and trailing white space of the concatenation as sent."""
    pieces = ["\n  ", "Hello", ",  ", "world", " \t", "\n\n"]
    assert output_of([chunk(piece) for piece in pieces]) == [text("".join(pieces))]


def test_last_substantive_message_wins() -> None:
    """Of several substantive messages the last one is selected."""
    events = [message(text("first")), message(text("second")), message(reasoning("third"))]
    assert output_of(events) == [reasoning("third")]


def test_only_the_selected_message_contributes_blocks() -> None:
    """Blocks of earlier messages are not merged into the output."""
    events = [message(text("a"), tool_call("c1")), message(text("b"))]
    assert output_of(events) == [text("b")]


def test_tool_result_blocks_are_removed_from_the_selected_message() -> None:
    """A selected message keeps its other blocks, in order, without its tool_result blocks."""
    events = [message(text("before"), tool_result_block(), tool_call(), tool_result_block("c2"), text("after"))]
    assert output_of(events) == [text("before"), tool_call(), text("after")]


def test_message_whose_only_block_is_a_tool_result_is_not_substantive() -> None:
    """A message of tool results alone selects nothing: the streamed text stays the output."""
    events = [chunk("streamed words"), message(tool_result_block())]
    assert output_of(events) == [text("streamed words")]


def test_tool_result_and_user_message_events_are_never_output() -> None:
    """tool/result and user/message events, with text or blocks, never select and never feed the fallback."""
    events: list[Event] = [
        {"type": "user/message", "message": {"content": "please answer"}},
        {"type": "user/message", "message": {"content": [text("more please")]}},
        {"type": "tool/result", "toolCallId": "c1", "content": [text("tool text")], "isError": False},
        {"type": "tool/result", "toolCallId": "c2", "content": "tool string"},
    ]
    assert output_of(events) == []
    assert output_of([chunk("mine"), *events]) == [text("mine")]


@pytest.mark.parametrize("blank", ["", " ", "\n", " \t\r\n ", "\u00a0\u2003"])
def test_blank_text_blocks_are_removed(blank: str) -> None:
    """Empty and white-space-only text blocks are left out of the selected message's output."""
    events = [message(text(blank), text("kept"), text(blank), reasoning("r"), text(blank))]
    assert output_of(events) == [text("kept"), reasoning("r")]


@pytest.mark.parametrize("blank", ["", " ", "\n\n", "\t "])
def test_message_of_only_blank_text_is_not_substantive(blank: str) -> None:
    """A message whose text is all blank does not hide an earlier message nor the streamed text."""
    assert output_of([message(text("earlier")), message(text(blank), text(blank))]) == [text("earlier")]
    assert output_of([chunk("streamed"), message(text(blank))]) == [text("streamed")]


@pytest.mark.parametrize("kind", ["step-start", "step-finish", "patch"])
def test_bookkeeping_only_message_is_not_substantive(kind: str) -> None:
    """A message of bookkeeping blocks selects nothing, and such blocks never reach an output."""
    bookkeeping = {"type": kind, "snapshot": "abc", "files": ["a.py"]}
    assert output_of([message(text("answer")), message(bookkeeping)]) == [text("answer")]
    assert output_of([message(bookkeeping, text("answer"), bookkeeping)]) == [text("answer")]
    assert output_of([message(bookkeeping)]) == []


def test_unknown_block_type_is_preserved_as_the_same_object() -> None:
    """An image (or any other type) is substantive and returned as the very object sent, every field kept."""
    image = {"type": "image", "source": {"type": "base64", "mediaType": "image/png", "data": "iVBOR"}, "alt": "x"}
    sent = copy.deepcopy(image)
    events = [chunk("streamed"), message(image)]
    for output in (fold_of(events).collect(), final_assistant_output(events)):
        assert output == [sent]
        assert output[0] is image


def test_reasoning_with_empty_text_is_substantive() -> None:
    """A reasoning block counts even when its text is empty (e.g. a redacted, signed thought)."""
    block = reasoning("", signature="sig-abc")
    assert output_of([message(text("earlier")), message(block)]) == [block]
    assert output_of([chunk("streamed"), message(block)]) == [block]


@pytest.mark.parametrize(
    "delta",
    [
        {"type": "reasoning", "text": "secret thoughts"},
        {"type": "tool_call", "id": "c1", "name": "search", "inputJson": '{"q":'},
    ],
    ids=["reasoning", "tool_call"],
)
def test_non_text_deltas_never_feed_the_fallback(delta: dict[str, Any]) -> None:
    """Only text deltas are accumulated; reasoning and tool-call deltas are not output."""
    assert output_of([{"type": "assistant/chunk", "delta": delta}]) == []
    events = [chunk("a"), {"type": "assistant/chunk", "delta": delta}, chunk("b")]
    assert output_of(events) == [text("ab")]


def test_white_space_only_streamed_text_gives_empty_output() -> None:
    """Streamed text with no visible character is not an output."""
    assert output_of([chunk(" "), chunk("\n\n"), chunk("\t"), chunk("")]) == []


def test_extension_and_step_events_are_ignored() -> None:
    """x- events and step/start, step/finish change neither output nor usage."""
    noise: list[Event] = [
        {"type": "x-vendor/trace", "text": "looks like text", "usage": usage(9, 9)},
        {"type": "x-assistant/message", "message": {"content": [text("not a message")], "usage": usage(5, 5)}},
        {"type": "step/start", "step": 1},
        {"type": "step/finish", "usage": usage(3, 3)},
    ]
    assert output_of(noise) == []
    events = [message(text("answer"), usage=usage(1, 2))]
    interleaved = [noise[0], noise[2], *events, noise[1], noise[3]]
    assert output_of(interleaved) == output_of(events)
    assert fold_of(interleaved).usage == fold_of(events).usage


def test_push_text_is_the_same_as_text_chunks() -> None:
    """push_text(s) folds exactly like an assistant/chunk text delta of s."""
    pieces = [" lead", "", "ing ", "\n", "text "]
    by_text, by_chunk = TurnFold(), TurnFold()
    for piece in pieces:
        by_text.push_text(piece)
        by_chunk.push(chunk(piece))
    assert by_text.collect() == by_chunk.collect() == [text("".join(pieces))]
    assert by_text.usage == by_chunk.usage


def test_push_text_and_chunks_interleave_into_one_text() -> None:
    """Bare text and chunk events accumulate into the same concatenation, in push order."""
    fold = TurnFold()
    fold.push_text("one ")
    fold.push(chunk("two "))
    fold.push_text("three")
    assert fold.collect() == [text("one two three")]


def test_collect_is_repeatable_and_follows_later_pushes() -> None:
    """collect() can be called any number of times, also between pushes, and always reflects all pushes."""
    fold = TurnFold()
    assert fold.collect() == []
    fold.push_text("Hel")
    assert fold.collect() == fold.collect() == [text("Hel")]
    fold.push_text("lo")
    assert fold.collect() == [text("Hello")]
    fold.push(message(tool_call()))
    assert fold.collect() == fold.collect() == [tool_call()]
    fold.push(message())
    assert fold.collect() == [tool_call()]
    fold.push(message(text("done")))
    assert fold.collect() == [text("done")]


def test_collect_returns_a_new_list_each_time() -> None:
    """Changing a returned output does not change the fold's next answer."""
    fold = fold_of([message(text("a"), text("b"))])
    first = fold.collect()
    first.clear()
    assert fold.collect() == [text("a"), text("b")]
    streamed = fold_of([chunk("x")])
    streamed.collect().append(text("y"))
    assert streamed.collect() == [text("x")]


def test_selected_blocks_are_not_rewritten() -> None:
    """Selected blocks come back as the same objects, equal to what was sent, extra fields and all."""
    blocks = [
        text("answer", citations=[{"url": "https://example.org"}], cacheControl={"type": "ephemeral"}),
        reasoning("why", signature="s1", providerData={"id": 7}),
        tool_call("c9", "run", providerExecuted=True),
        {"type": "file", "mediaType": "text/csv", "url": "s3://bucket/a.csv"},
    ]
    sent = copy.deepcopy(blocks)
    events = [message(*blocks, usage=usage(1, 1), id="msg_1", stopReason="end_turn")]
    for output in (fold_of(events).collect(), final_assistant_output(events)):
        assert output == sent
        assert all(got is original for got, original in zip(output, blocks, strict=True))
    assert blocks == sent  # nothing was mutated either


def test_input_events_are_not_mutated() -> None:
    """Folding leaves the events exactly as they were."""
    events = [chunk("a"), message(text(" "), tool_result_block(), text("b"), usage=usage(1, 2)), message()]
    sent = copy.deepcopy(events)
    output_of(events)
    assert events == sent


# -- usage ---------------------------------------------------------------------------------------


def test_usage_sums_every_assistant_message_and_treats_missing_fields_as_zero() -> None:
    """Usage is the field-wise sum over all messages, substantive or not; absent fields count 0."""
    events = [
        message(text("a"), usage=usage(10, 1)),
        message(tool_result_block(), usage=usage(5, 2, cacheReadTokens=3)),
        message(),  # no usage at all
        message(usage=usage(1, 1, cacheWriteTokens=4)),
        chunk("text"),
    ]
    assert fold_of(events).usage == {"inputTokens": 16, "outputTokens": 4, "cacheReadTokens": 3, "cacheWriteTokens": 4}


def test_usage_of_an_empty_turn_is_zero() -> None:
    """A fresh fold reports zero for every usage field."""
    assert TurnFold().usage == {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def test_turn_end_usage_counts_only_without_assistant_messages() -> None:
    """turn/end usage is the turn's usage for chunk-only transports, and is not added on top of messages."""
    end = {"type": "turn/end", "stopReason": "cancelled", "usage": usage(7, 8)}
    assert fold_of([chunk("x"), end]).usage["inputTokens"] == 7
    assert fold_of([message(usage=usage(1, 2)), end]).usage == {
        "inputTokens": 1,
        "outputTokens": 2,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
    }


def test_usage_is_a_copy() -> None:
    """Changing the returned usage does not change the fold."""
    fold = fold_of([message(usage=usage(1, 1))])
    fold.usage["inputTokens"] = 999
    assert fold.usage["inputTokens"] == 1


def test_push_records_the_last_seq() -> None:
    """push(event, seq) keeps the last sequence number; push without seq leaves it."""
    fold = TurnFold(last_seq=3)
    fold.push(chunk("a"), seq=4)
    fold.push(chunk("b"))
    assert fold.last_seq == 4


# -- cost ----------------------------------------------------------------------------------------


def test_many_small_deltas_are_joined_once() -> None:
    """200k deltas are kept as parts and joined once by collect(), which then reuses the joined text."""
    count = 200_000
    fold = TurnFold()
    for _ in range(count // 2):
        fold.push_text("ab")
    for _ in range(count // 2):
        fold.push(chunk("c"))
    # Until a read, nothing has been concatenated: every delta is one part.
    assert len(fold._text_parts) == count
    first = fold.collect()[0]["text"]
    assert first == "ab" * (count // 2) + "c" * (count // 2)
    assert len(fold._text_parts) == 1
    # A second read does not join again: it hands out the very same string.
    assert fold.collect()[0]["text"] is first
    fold.push_text("!")
    assert fold.collect()[0]["text"] == first + "!"
    assert len(fold._text_parts) == 1


# -- properties ----------------------------------------------------------------------------------

# Text that is often blank, so that blank blocks and white-space-only streams are common.
_texts = st.one_of(
    st.sampled_from(["", " ", "\n", "\t \n", "\u00a0", "a", " b ", "\nc\n"]),
    st.text(alphabet=st.sampled_from(" \t\nxyz\u2003é"), max_size=6),
)
_small = st.integers(min_value=0, max_value=1000)
_usages = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"inputTokens": _small, "outputTokens": _small},
        optional={"cacheReadTokens": _small, "cacheWriteTokens": _small},
    ),
)
_blocks = st.one_of(
    st.builds(text, _texts),
    st.builds(lambda t, s: reasoning(t, **s), _texts, st.sampled_from([{}, {"signature": "sig"}])),
    st.builds(tool_call, st.sampled_from(["c1", "c2"]), st.sampled_from(["search", "edit"])),
    st.builds(tool_result_block, st.sampled_from(["c1", "c2"]), st.one_of(_texts, st.just([text("inner")]))),
    st.builds(lambda alt: {"type": "image", "source": {"data": "AAAA"}, "alt": alt}, _texts),
    st.builds(lambda kind: {"type": kind, "note": "bk"}, st.sampled_from(["step-start", "step-finish", "patch"])),
)
_messages = st.builds(
    lambda blocks, use: message(*blocks, usage=use),
    st.lists(_blocks, max_size=4),
    _usages,
)
_deltas = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _texts),
    st.builds(lambda t: {"type": "reasoning", "text": t}, _texts),
    st.just({"type": "tool_call", "id": "c1", "name": "search", "inputJson": "{"}),
)
_events = st.one_of(
    _messages,
    st.builds(lambda d: {"type": "assistant/chunk", "delta": d}, _deltas),
    st.builds(lambda t: {"type": "tool/result", "toolCallId": "c1", "content": t}, _texts),
    st.builds(lambda b: {"type": "user/message", "message": {"content": b}}, st.lists(_blocks, max_size=2)),
    st.sampled_from([{"type": "step/start"}, {"type": "step/finish"}, {"type": "x-trace", "text": "x"}]),
    st.builds(lambda u: {"type": "turn/end", "stopReason": "completed", "usage": u}, _usages.filter(bool)),
)
# An operation is an event to push, bare text for push_text, or a collect() checkpoint.
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("push"), _events),
        st.tuples(st.just("text"), _texts),
        st.tuples(st.just("collect"), st.none()),
    ),
    max_size=25,
)


def _as_events(operations: list[tuple[str, Any]]) -> list[Event]:
    """The event list the operations amount to (push_text is a text chunk)."""
    return [op if kind == "push" else chunk(op) for kind, op in operations if kind != "collect"]


def _assert_matches_reference(output: list[Block], events: list[Event]) -> None:
    reference = reference_turn(events)
    expected = reference.output()
    assert output == expected
    if reference.from_message:
        # A selected message's blocks are handed out as they are, not copied.
        assert all(got is want for got, want in zip(output, expected, strict=True))


@settings(max_examples=300, deadline=None)
@given(_operations)
def test_incremental_fold_equals_batch_rule_equals_naive_reference(operations: list[tuple[str, Any]]) -> None:
    """For any event sequence, push/push_text/collect, final_assistant_output and the reference agree."""
    fold = TurnFold()
    seen: list[Event] = []
    for kind, op in operations:
        if kind == "push":
            fold.push(op)
            seen.append(op)
        elif kind == "text":
            fold.push_text(op)
            seen.append(chunk(op))
        else:
            _assert_matches_reference(fold.collect(), seen)
            assert fold.usage == expected_usage(seen)
    events = _as_events(operations)
    _assert_matches_reference(fold.collect(), events)
    _assert_matches_reference(final_assistant_output(events), events)
    assert fold.usage == expected_usage(events) == fold_of(events).usage


@settings(max_examples=300, deadline=None)
@given(_operations)
def test_output_never_holds_tool_results_bookkeeping_or_blank_text(operations: list[tuple[str, Any]]) -> None:
    """No output contains a tool_result block, a bookkeeping block or a blank text block."""
    output = final_assistant_output(_as_events(operations))
    for block in output:
        assert block["type"] not in ("tool_result", "step-start", "step-finish", "patch")
        if block["type"] == "text":
            assert block["text"].strip()


def _pushed_in_runs(events: list[Event], cuts: list[int], join: bool) -> TurnFold:
    """A fold given ``events`` through ``push_many``, in runs cut at ``cuts``."""
    fold = TurnFold(join_continuations=join)
    bounds = sorted({0, len(events), *(min(cut, len(events)) for cut in cuts)})
    for start, end in zip(bounds, bounds[1:]):
        fold.push_many(events[start:end], end)
    return fold


@settings(max_examples=400, deadline=None)
@given(st.lists(_events, max_size=25), st.lists(st.integers(min_value=0, max_value=25), max_size=5), st.booleans())
def test_pushing_events_in_runs_is_pushing_them_one_by_one(events: list[Event], cuts: list[int], join: bool) -> None:
    """push_many (what the store's append calls) leaves a fold exactly as push of each event
    would, however a turn's events are cut into runs, with or without joined continuations."""
    one_by_one = TurnFold(join_continuations=join)
    for seq, event in enumerate(events, 1):
        one_by_one.push(event, seq)
    in_runs = _pushed_in_runs(events, cuts, join)
    assert in_runs.collect() == one_by_one.collect()
    assert in_runs.usage == one_by_one.usage
    assert in_runs.streamed_text() == one_by_one.streamed_text()
    assert in_runs.last_seq == one_by_one.last_seq == len(events)
    if not join:
        _assert_matches_reference(in_runs.collect(), events)


def test_push_many_without_a_seq_leaves_last_seq() -> None:
    """Like push without one: folding from a list that carries no seqs keeps the fold's."""
    fold = TurnFold(last_seq=4)
    fold.push_many([chunk("a"), message(text("b"))])
    assert fold.last_seq == 4
    fold.push_many([], 9)
    assert fold.last_seq == 9


def test_a_fresh_fold_starts_before_the_first_seq() -> None:
    """A new fold has seen no event: last_seq is 0 unless given."""
    assert TurnFold().last_seq == 0
    assert TurnFold(last_seq=7).last_seq == 7


def test_a_text_delta_without_text_adds_nothing() -> None:
    """A text delta that carries no text (not valid input, but as stored) adds nothing to the fallback."""
    events = [chunk("a"), {"type": "assistant/chunk", "delta": {"type": "text"}}, chunk("b")]
    assert fold_of(events).collect() == [text("ab")]
    assert fold_of([{"type": "assistant/chunk", "delta": {"type": "text"}}]).collect() == []
