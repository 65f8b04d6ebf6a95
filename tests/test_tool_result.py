"""The parent model's tool result (SPEC §9 "The tool result"), through ``lastword.rules.tool_result.tool_result``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.rules.fold import final_assistant_output
from lastword.rules.tool_result import NO_TEXT_OUTPUT, tool_result

from tests.builders import text

NOT_COMPLETED = ["max_tokens", "max_turns", "refusal", "cancelled", "error", "timeout"]


def only_text(result: dict[str, Any]) -> str:
    """The single text of a result, after checking the CallToolResult shape."""
    assert set(result) == {"content", "isError"}
    assert len(result["content"]) == 1
    block = result["content"][0]
    assert set(block) == {"type", "text"} and block["type"] == "text"
    assert isinstance(block["text"], str)
    return str(block["text"])


def test_completed_joins_text_blocks_with_a_blank_line() -> None:
    """A completed turn's text blocks are joined by a blank line; other blocks are left out."""
    output = [
        text("First part."),
        {"type": "reasoning", "text": "hidden thoughts"},
        {"type": "tool_call", "id": "c1", "name": "search", "input": {}},
        text("Second part.\n"),
        {"type": "image", "source": {"data": "AAAA"}},
        text("Third."),
    ]
    result = tool_result("completed", output, None)
    assert result["isError"] is False
    assert only_text(result) == "First part.\n\nSecond part.\n\n\nThird."


def test_completed_single_text_is_unchanged() -> None:
    """One text block is passed through exactly, white space included."""
    assert only_text(tool_result("completed", [text("  answer\n")], None)) == "  answer\n"


@pytest.mark.parametrize(
    "output",
    [[], [{"type": "reasoning", "text": "r"}], [{"type": "tool_call", "id": "c", "name": "n", "input": {}}]],
    ids=["empty", "reasoning-only", "tool-call-only"],
)
def test_completed_without_text_gives_the_fixed_sentence(output: list[dict[str, Any]]) -> None:
    """A completed turn without text says that the subagent finished without text output."""
    result = tool_result("completed", output, None)
    assert result["isError"] is False
    assert only_text(result) == NO_TEXT_OUTPUT
    assert "without text output" in NO_TEXT_OUTPUT


@pytest.mark.parametrize("stop_reason", NOT_COMPLETED)
def test_not_completed_is_an_error_with_headline_then_partial_text(stop_reason: str) -> None:
    """A turn that did not complete: isError, a one-line headline naming the stop reason, a blank line, the text."""
    result = tool_result(stop_reason, [text("partial"), text("answer")], None)
    assert result["isError"] is True
    headline, separator, rest = only_text(result).partition("\n\n")
    assert separator == "\n\n"
    assert "\n" not in headline and headline.strip() == headline != ""
    assert stop_reason in headline
    assert rest == "partial\n\nanswer"


@pytest.mark.parametrize("stop_reason", NOT_COMPLETED)
def test_not_completed_without_text_is_the_headline_alone(stop_reason: str) -> None:
    """Without partial text the result is just the one-line headline, no trailing blank line."""
    body = only_text(tool_result(stop_reason, [{"type": "reasoning", "text": "r"}], None))
    assert "\n" not in body
    assert stop_reason in body
    assert body.strip() == body


@pytest.mark.parametrize(
    "error",
    ["upstream 529: overloaded", {"message": "upstream 529: overloaded"}, {"message": "upstream 529: overloaded", "code": 529}],
    ids=["string", "object", "object-with-extra"],
)
def test_headline_carries_the_error_message(error: Any) -> None:
    """The error message, given as a string or as {message}, is named in the headline."""
    body = only_text(tool_result("error", [text("half an answer")], error))
    headline, _, rest = body.partition("\n\n")
    assert "error" in headline
    assert "upstream 529: overloaded" in headline
    assert rest == "half an answer"


def test_multi_line_error_message_keeps_the_headline_on_one_line() -> None:
    """An error message with line breaks does not break the one-line headline."""
    body = only_text(tool_result("error", [text("partial")], "line one\nline two\r\n  line three"))
    headline, separator, rest = body.partition("\n\n")
    assert "\n" not in headline
    assert "line one" in headline and "line three" in headline
    assert (separator, rest) == ("\n\n", "partial")


@pytest.mark.parametrize("error", [None, "", {}, {"message": ""}, {"code": 5}])
def test_missing_error_message_gives_a_plain_headline(error: Any) -> None:
    """No message, an empty one, or an object without one gives the headline without an error part."""
    body = only_text(tool_result("cancelled", [], error))
    assert body == only_text(tool_result("cancelled", [], None))
    assert "cancelled" in body


def test_error_is_ignored_for_a_completed_turn() -> None:
    """A completed turn is not an error, whatever error value accompanies it."""
    result = tool_result("completed", [text("fine")], "spurious")
    assert result == {"content": [{"type": "text", "text": "fine"}], "isError": False}


# -- properties ----------------------------------------------------------------------------------

_STOP_REASONS = st.sampled_from(["completed", *NOT_COMPLETED])
_ERRORS = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.fixed_dictionaries({}, optional={"message": st.text(max_size=20), "code": st.integers()}),
)
_ANY_TEXT = st.text(alphabet=st.sampled_from(" \n\tab"), max_size=8)
_OTHER_BLOCKS = st.sampled_from(
    [
        {"type": "reasoning", "text": ""},
        {"type": "tool_call", "id": "c", "name": "n", "input": {}},
        {"type": "image", "source": {}},
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    _STOP_REASONS,
    st.lists(st.one_of(st.builds(text, _ANY_TEXT), _OTHER_BLOCKS), max_size=4),
    _ERRORS,
)
def test_content_is_never_empty(stop_reason: str, output: list[dict[str, Any]], error: Any) -> None:
    """For any output, stop reason and error: exactly one text block, never empty, isError iff not completed."""
    result = tool_result(stop_reason, output, error)
    assert only_text(result) != ""
    assert result["isError"] is (stop_reason != "completed")


# What the fold can hand the formatter: a selected message's blocks or the streamed text.
_MESSAGES = st.lists(st.one_of(st.builds(text, _ANY_TEXT), _OTHER_BLOCKS), max_size=4).map(
    lambda blocks: {"type": "assistant/message", "message": {"content": blocks}}
)
_CHUNKS = _ANY_TEXT.map(lambda t: {"type": "assistant/chunk", "delta": {"type": "text", "text": t}})


@settings(max_examples=300, deadline=None)
@given(_STOP_REASONS, st.lists(st.one_of(_MESSAGES, _CHUNKS), max_size=6), _ERRORS)
def test_text_of_a_fold_output_is_never_blank(stop_reason: str, events: list[dict[str, Any]], error: Any) -> None:
    """On any output the fold selects, the tool result's text has a visible character."""
    result = tool_result(stop_reason, final_assistant_output(events), error)
    assert only_text(result).strip() != ""


# -- the headline, word for word -----------------------------------------------------------------

#: What the headline says happened, for each stop reason that is not ``completed``.
EXPLANATIONS = {
    "max_tokens": "it reached its output-token limit",
    "max_turns": "it reached its turn limit",
    "refusal": "it refused",
    "cancelled": "it was cancelled",
    "error": "it failed",
    "timeout": "it stopped reporting before its lease ran out",
}


def test_every_stop_reason_but_completed_has_an_explanation() -> None:
    """The explanations cover exactly the wire values that are not completed."""
    assert sorted(EXPLANATIONS) == sorted(NOT_COMPLETED)


@pytest.mark.parametrize(("stop_reason", "explanation"), list(EXPLANATIONS.items()))
def test_the_headline_names_the_stop_reason_and_what_it_means(stop_reason: str, explanation: str) -> None:
    """Each stop reason gets its own explanation; the error message follows after 'Error:'."""
    plain = f"The subagent did not complete (stopReason: {stop_reason}): {explanation}."
    assert only_text(tool_result(stop_reason, [], None)) == plain
    with_error = only_text(tool_result(stop_reason, [text("so far")], {"message": "upstream\n 529"}))
    assert with_error == plain + " Error: upstream 529\n\nso far"


def test_blank_text_blocks_are_left_out_of_the_joined_text() -> None:
    """Blank text blocks add no empty paragraph; non-text blocks and odd text values are skipped."""
    output = [text("a"), text("  \n"), {"type": "text", "text": 5}, {"type": "text"}, text("b")]
    assert only_text(tool_result("completed", output, None)) == "a\n\nb"
    assert only_text(tool_result("completed", [text(" ")], None)) == NO_TEXT_OUTPUT


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ({"message": {"detail": "disk full", "ok": False}}, '{"detail":"disk full","ok":false}'),
        ({"message": ["a", 1, None]}, '["a",1,null]'),
        ({"message": True}, "true"),
        ({"message": 0}, "0"),
        (["quota", {"left": 0}], '["quota",{"left":0}]'),
        (False, "false"),
        (2.5, "2.5"),
    ],
)
def test_non_string_errors_are_shown_as_json(error: Any, shown: str) -> None:
    """A non-string error (or message) is rendered as JSON in the headline, never as a Python repr."""
    headline = only_text(tool_result("error", [], error)).split("\n")[0]
    assert headline.endswith(" Error: " + shown)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(NOT_COMPLETED),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet=" \t\r\n\x0b\x0c\x1c\u2028\u3000ab"),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["message", "code"]), inner, max_size=2),
        max_leaves=6,
    ),
)
def test_headline_never_ends_with_a_bare_error_label(stop_reason: str, error: Any) -> None:
    """Whatever the error, the headline never ends in "Error: " with nothing after it, nor holds a repr."""
    headline = only_text(tool_result(stop_reason, [], error)).split("\n")[0]
    assert not headline.rstrip().endswith("Error:")
    assert "None" not in headline and "True" not in headline and "False" not in headline


@pytest.mark.parametrize("error", [{"message": {}}, {"message": []}, {}, [], {"message": ""}, {"message": " \n "}])
def test_empty_errors_add_no_error_text(error: Any) -> None:
    """An empty object, list or string as the error (or its message) adds nothing to the headline."""
    headline = only_text(tool_result("error", [], error)).split("\n")[0]
    assert "Error:" not in headline


def test_non_ascii_in_a_json_error_is_shown_as_written() -> None:
    """A non-string error's text keeps its non-ASCII characters, not \\u escapes."""
    headline = only_text(tool_result("error", [], {"message": {"détail": "délai dépassé"}})).split("\n")[0]
    assert headline.endswith(' Error: {"détail":"délai dépassé"}')
