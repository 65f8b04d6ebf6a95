"""The tests' own reference of the rule (``tests.reference``) gives the answers SPEC §4–§5 name.

The fold, the state machine and the restart benchmark are all checked against this reference,
so it is pinned here by the SPEC's own examples, independently of ``lastword``.
"""

from __future__ import annotations

from tests.builders import chunk, message, reasoning, text, tool_call, tool_result_block, turn_end, usage
from tests.reference import expected_output, expected_usage, reference_turn


def test_the_spec_consequences() -> None:
    """Each consequence SPEC §5 lists, by the reference."""
    answer, call = text("answer"), tool_call()
    assert expected_output([message(answer), message()]) == [answer]  # empty never hides
    assert expected_output([chunk("streamed"), message(call)]) == [call]  # textless beats text
    assert expected_output([chunk("streamed"), message(reasoning(""))]) == [reasoning("")]
    assert expected_output([message(answer), chunk("later")]) == [answer]  # message beats later text
    assert expected_output([message(tool_result_block())]) == []  # tool results never output
    assert expected_output([chunk("kept "), chunk("text")]) == [text("kept text")]  # cancelled keeps text
    assert expected_output([chunk(" "), chunk("\n")]) == []


def test_kept_blocks_and_unchanged_concatenation() -> None:
    """Blank text, tool results and bookkeeping are dropped, order kept; streamed text is not trimmed."""
    content = [text(" "), text("a"), tool_result_block(), {"type": "patch"}, call := tool_call(), text("b")]
    assert expected_output([message(*content)]) == [text("a"), call, text("b")]
    assert expected_output([chunk("\n x "), chunk(" \t")]) == [text("\n x  \t")]
    assert reference_turn([message("a")]).from_message
    assert not reference_turn([chunk("a")]).from_message


def test_usage_sums_messages_else_turn_end() -> None:
    """Usage sums every message, empty ones too; turn/end usage counts only without messages."""
    events = [message("a", usage=usage(1, 2)), message(usage=usage(3, 4, cacheReadTokens=5)), message()]
    assert expected_usage([*events, turn_end(usage=usage(100, 100))]) == {
        "inputTokens": 4, "outputTokens": 6, "cacheReadTokens": 5, "cacheWriteTokens": 0,
    }
    assert expected_usage([chunk("x"), turn_end(usage=usage(7, 8))])["inputTokens"] == 7
