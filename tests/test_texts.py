"""``texts`` (SPEC §19): every visible text the assistant wrote in a turn, in order — beside the
output, never instead of it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.rules.fold import assistant_texts, final_assistant_output, is_visible_text

from tests.builders import Event, chunk, message, reasoning, text, tool_call, usage
from tests.test_fold import _events


def test_each_message_tells_its_texts_in_order_and_a_pointer_back_keeps_the_findings() -> None:
    """claude-code#88580's shape: the last message points back; texts still holds the findings."""
    events = [
        chunk("Found "), chunk("three bugs."), message("Found three bugs.", " ", tool_call()),
        {"type": "tool/result", "toolCallId": "call_1", "content": "not a text of the assistant"},
        message(text("Details:"), reasoning("private"), text("see above")),
        message("The findings are in my prior message."),
    ]
    assert assistant_texts(events) == ["Found three bugs.", "Details:", "see above",
                                       "The findings are in my prior message."]
    assert final_assistant_output(events) == [text("The findings are in my prior message.")]


def test_text_streamed_before_a_usage_only_message_is_kept_and_kept_apart() -> None:
    """SPEC §1: text streamed, then the empty max-tokens record, then more streamed text: both
    pieces are texts, each whole, in order (the empty message tells neither)."""
    events = [chunk("first "), chunk("half"), message(usage=usage(3, 9), stopReason="max_tokens"),
              chunk("second"), chunk(" half")]
    assert assistant_texts(events) == ["first half", "second half"]


def test_a_step_cut_before_its_message_adds_its_streamed_text_last() -> None:
    events = [message("complete step"), chunk("cut "), chunk("step")]
    assert assistant_texts(events) == ["complete step", "cut step"]


def test_blank_text_and_other_deltas_are_no_texts() -> None:
    events = [chunk("  "), {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": "hmm"}},
              message(text(" \n"), tool_call()), chunk("\t")]
    assert assistant_texts(events) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(_events, max_size=12))
def test_texts_hold_the_outputs_text_and_only_visible_text(events: list[Event]) -> None:
    """For every event list: no text is blank; each text block of a selected message is one of
    the texts; an output made of streamed text (rule 2) is the texts joined (up to the blank
    pieces streamed between textless messages, which are no texts)."""
    texts = assistant_texts(events)
    assert all(is_visible_text(item) for item in texts)
    output = final_assistant_output(events)
    streamed_rule = not any(event["type"] == "assistant/message" and final_assistant_output([event])
                            for event in events)
    if streamed_rule and output:
        assert re.sub(r"\s", "", "".join(texts)) == re.sub(r"\s", "", output[0]["text"])
    else:
        for block in output:
            if block["type"] == "text":
                assert block["text"] in texts


def test_a_blank_piece_between_textless_messages_is_no_text() -> None:
    events = [chunk("  "), message(usage=usage(1, 1)), chunk("abc")]
    assert assistant_texts(events) == ["abc"]
