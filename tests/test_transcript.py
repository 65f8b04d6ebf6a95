"""The provider-safe transcript (SPEC §12), through ``lastword.rules.transcript`` only.

Examples pin each conversion; the property test generates logs from every kind of event and
block the SPEC allows and checks every invariant on both formats, that each left-out piece is
listed with a true reason, and that no substantive block is lost (count in, count out, in order).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lastword.rules.fold import BOOKKEEPING_BLOCK_TYPES, final_assistant_output, is_substantive
from lastword.rules.transcript import (
    ANTHROPIC_BLOCK_TYPES,
    ANTHROPIC_RESULT_BLOCK_TYPES,
    EMPTY_RESULT_TEXT,
    HISTORY_TYPES,
    INTERRUPTED_TEXT,
    LEADING_USER_TEXT,
    SUBSTANTIVE_LOSS,
    HistoryEvent,
    transcript,
)

from tests.transcript_checks import CHECKS, check_anthropic, check_openai, visible

Event = dict[str, Any]
RUN = "run-1"


def log(*turns: list[Event], run_id: str = RUN) -> list[HistoryEvent]:
    """Events of consecutive turns, numbered as the service would (a lifecycle event first)."""
    items: list[HistoryEvent] = []
    seq = 0
    for number, events in enumerate(turns, start=1):
        seq += 1  # subagent/start
        for event in events:
            seq += 1
            items.append(HistoryEvent(run_id, seq, number, event))
        seq += 1  # subagent/end
    return items


def text(value: str) -> Event:
    return {"type": "text", "text": value}


def call(call_id: str, name: str = "read_file", **args: Any) -> Event:
    return {"type": "tool_call", "id": call_id, "name": name, "input": args}


def assistant(*blocks: Event, **extra: Any) -> Event:
    return {"type": "assistant/message", "message": {"content": list(blocks), **extra}}


def result(call_id: str, content: Any = "ok", is_error: bool | None = None) -> Event:
    event: Event = {"type": "tool/result", "toolCallId": call_id, "content": content}
    if is_error is not None:
        event["isError"] = is_error
    return event


def user(content: Any) -> Event:
    return {"type": "user/message", "message": {"content": content}}


def chunk(value: str) -> Event:
    return {"type": "assistant/chunk", "delta": {"type": "text", "text": value}}


def both(items: list[HistoryEvent]) -> dict[str, dict[str, Any]]:
    """The transcript in each format, each checked against every invariant."""
    answers = {}
    for name, check in CHECKS.items():
        answer = transcript(items, name).as_json()  # type: ignore[arg-type]
        check(answer["messages"])
        answers[name] = answer
    return answers


def test_the_history_types_are_exactly_what_a_transcript_reads() -> None:
    """A log cut down to ``HISTORY_TYPES`` (what a fork inherits of its parent, what ``/messages``
    reads) gives the whole log's transcript, and leaving out any one of those types changes it."""
    whole = log(
        [{"type": "step/start"}, chunk("streamed only"), {"type": "step/finish"},
         {"type": "turn/end", "stopReason": "cancelled"}],
        [user("go on"), {"type": "x-vendor/note", "data": 1}, assistant(text("looking"), call("c1")),
         result("c1", "found it"), assistant(text("done"))],
    )
    answer = both(whole)
    assert both([item for item in whole if item.event["type"] in HISTORY_TYPES]) == answer
    for kind in HISTORY_TYPES:
        assert both([item for item in whole if item.event["type"] != kind]) != answer, kind


# -- the case of SPEC §1 ---------------------------------------------------------------------------

PARTIAL = "Found three call sites of parse_config; two pass a path, one passes a dict."
MAX_TOKENS_PARTIAL = [
    {"type": "step/start"},
    chunk("Found three call sites of parse_config; "),
    assistant(text(PARTIAL), call("call_1", path="app/config.py"),
              usage={"inputTokens": 1200, "outputTokens": 85}, stopReason="tool_use"),
    result("call_1", "def parse_config(source): ..."),
    {"type": "step/finish"},
    {"type": "step/start"},
    {"type": "assistant/chunk", "delta": {"type": "tool_call", "id": "call_2", "name": "edit_file"}},
    assistant(usage={"inputTokens": 1400, "outputTokens": 4096}, stopReason="max_tokens"),
    {"type": "step/finish"},
]


def test_max_tokens_partial_in_anthropic_format() -> None:
    """The usage-only message is left out as empty; the partial answer and its call stay."""
    answer = both(log(MAX_TOKENS_PARTIAL))["anthropic"]
    assert answer["messages"] == [
        {"role": "user", "content": [text(LEADING_USER_TEXT)]},
        {"role": "assistant", "content": [
            text(PARTIAL),
            {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "app/config.py"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "def parse_config(source): ..."},
        ]},
    ]
    assert answer["omitted"] == [{"runId": RUN, "seq": 9, "reason": "empty"}]
    assert answer["inserted"] == [{"index": 0, "reason": "leading_assistant"}]


def test_max_tokens_partial_in_openai_format() -> None:
    """Chat Completions: text as content, the call as a function tool call, its tool message."""
    answer = both(log(MAX_TOKENS_PARTIAL))["openai"]
    assert answer["messages"] == [
        {"role": "assistant", "content": PARTIAL, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path":"app/config.py"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "def parse_config(source): ..."},
    ]
    assert answer["omitted"] == [{"runId": RUN, "seq": 9, "reason": "empty"}]
    assert "inserted" not in answer


# -- examples of each conversion ------------------------------------------------------------------


def test_errored_empty_shell_and_bookkeeping_only_messages_are_left_out() -> None:
    """An errored empty message and a bookkeeping-only one convert to nothing and are listed."""
    items = log([user("go"), assistant(error={"message": "overloaded"}),
                 assistant({"type": "step-start"}, {"type": "patch", "hash": "x"}), assistant(text("done"))])
    for answer in both(items).values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 3, "reason": "empty"},
            {"runId": RUN, "seq": 4, "block": 0, "reason": "bookkeeping"},
            {"runId": RUN, "seq": 4, "block": 1, "reason": "bookkeeping"},
            {"runId": RUN, "seq": 4, "reason": "nothing_kept"},
        ]
    assert both(items)["openai"]["messages"] == [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": "done"}]


@pytest.mark.parametrize("blank", ["", " ", "\n\t "])
def test_blank_text_blocks_are_left_out_of_kept_messages(blank: str) -> None:
    """A blank text block is listed with its index; the message keeps its other blocks."""
    items = log([user("q"), assistant(text(blank), text("answer"))])
    answers = both(items)
    assert answers["anthropic"]["messages"][1] == {"role": "assistant", "content": [text("answer")]}
    for answer in answers.values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 3, "block": 0, "reason": "blank_text"}]


@pytest.mark.parametrize("blank,reason", [("", "empty"), ("  \n", "blank_text")])
def test_blank_user_message_is_left_out(blank: str, reason: str) -> None:
    """A user message whose text is empty or white space is left out whole."""
    for answer in both(log([user(blank), user("real")])).values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 2, "reason": reason}]
        assert len(answer["messages"]) == 1


def test_reasoning_with_a_signature_is_thinking_and_without_one_is_left_out() -> None:
    """Anthropic keeps signed reasoning (even empty) as thinking; unsigned is refused there."""
    items = log([user("q"), assistant({"type": "reasoning", "text": "", "signature": "sig"},
                                      {"type": "reasoning", "text": "hmm"}, text("a"))])
    answers = both(items)
    assert answers["anthropic"]["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "", "signature": "sig"}, text("a")]
    assert answers["anthropic"]["omitted"] == [{"runId": RUN, "seq": 3, "block": 1, "reason": "unsigned_reasoning"}]
    assert answers["openai"]["omitted"] == [
        {"runId": RUN, "seq": 3, "block": 0, "reason": "reasoning"},
        {"runId": RUN, "seq": 3, "block": 1, "reason": "reasoning"},
    ]
    assert answers["openai"]["messages"][1] == {"role": "assistant", "content": "a"}


def test_empty_signature_counts_as_unsigned() -> None:
    """A reasoning block whose signature is an empty string is not signed."""
    items = log([user("q"), assistant({"type": "reasoning", "text": "t", "signature": ""}, text("a"))])
    assert both(items)["anthropic"]["omitted"][0]["reason"] == "unsigned_reasoning"


def test_provider_blocks_are_kept_as_sent_for_anthropic_and_left_out_for_openai() -> None:
    """redacted_thinking and images pass through to Anthropic; OpenAI lists them as unsupported."""
    redacted = {"type": "redacted_thinking", "data": "abc"}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    items = log([user([text("look"), image]), assistant(redacted, text("seen"))])
    answers = both(items)
    assert answers["anthropic"]["messages"] == [
        {"role": "user", "content": [text("look"), image]},
        {"role": "assistant", "content": [redacted, text("seen")]},
    ]
    assert answers["anthropic"]["omitted"] == []
    assert answers["openai"]["omitted"] == [
        {"runId": RUN, "seq": 2, "block": 1, "reason": "unsupported_block"},
        {"runId": RUN, "seq": 3, "block": 0, "reason": "unsupported_block"},
    ]


def test_a_refusal_is_the_assistant_refusal_for_openai_and_left_out_for_anthropic() -> None:
    """An OpenAI refusal part becomes the message's refusal; Anthropic has no such block."""
    items = log([user("q"), assistant({"type": "refusal", "text": "I can't help with that."}),
                 assistant({"type": "refusal", "text": " "}, text("ok"))])
    answers = both(items)
    assert answers["openai"]["messages"][1:] == [
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        {"role": "assistant", "content": "ok"},
    ]
    assert answers["openai"]["omitted"] == [{"runId": RUN, "seq": 4, "block": 0, "reason": "blank_refusal"}]
    assert answers["anthropic"]["omitted"] == [
        {"runId": RUN, "seq": 3, "block": 0, "reason": "unsupported_block"},
        {"runId": RUN, "seq": 3, "reason": "nothing_kept"},
        {"runId": RUN, "seq": 4, "block": 0, "reason": "unsupported_block"},
    ]


def test_blocks_anthropic_does_not_know_are_left_out() -> None:
    """Only Anthropic's own block types are passed through as sent; a `file` block is not one."""
    items = log([user([text("q"), {"type": "file", "url": "file:///x"}]), assistant(text("a"))])
    assert both(items)["anthropic"]["omitted"] == [{"runId": RUN, "seq": 2, "block": 1, "reason": "unsupported_block"}]


def test_passed_through_types_are_the_sdk_block_params() -> None:
    """The pass-through list is the Anthropic SDK's request block types, less the ones converted."""
    import typing

    import anthropic.types

    def types_of(union: Any) -> set[str]:
        return {typing.get_type_hints(t)["type"].__args__[0] for t in typing.get_args(union)}

    converted = {"text", "thinking", "tool_use", "tool_result"}
    assert ANTHROPIC_BLOCK_TYPES == types_of(anthropic.types.ContentBlockParam) - converted
    result_content = typing.get_type_hints(anthropic.types.ToolResultBlockParam)["content"]
    parts = typing.get_args(typing.get_args(result_content)[1])[0]
    assert ANTHROPIC_RESULT_BLOCK_TYPES <= types_of(parts) - converted


def test_extra_fields_of_text_and_tool_blocks_are_not_sent() -> None:
    """Blocks are rebuilt with the provider's own fields only (providers refuse unknown ones)."""
    items = log([user("q"), assistant({"type": "text", "text": "a", "meta": 1},
                                      {**call("c1"), "providerData": {"x": 1}}), result("c1")])
    content = both(items)["anthropic"]["messages"][1]["content"]
    assert content == [text("a"), {"type": "tool_use", "id": "c1", "name": "read_file", "input": {}}]


def test_unanswered_call_gets_an_interrupted_error_result() -> None:
    """A call cut off by a cancel is answered with an error saying it was interrupted."""
    items = log([user("q"), assistant(text("let me look"), call("c1"), call("c2")), result("c2", "two")])
    answers = both(items)
    assert answers["anthropic"]["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "c2", "content": "two"},
        {"type": "tool_result", "tool_use_id": "c1", "content": INTERRUPTED_TEXT, "is_error": True},
    ]}
    assert answers["anthropic"]["inserted"] == [{"index": 2, "reason": "interrupted_tool_call", "toolCallId": "c1"}]
    assert answers["openai"]["messages"][2:] == [
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "tool", "tool_call_id": "c1", "content": INTERRUPTED_TEXT},
    ]
    assert answers["openai"]["inserted"] == [{"index": 3, "reason": "interrupted_tool_call", "toolCallId": "c1"}]


def test_unanswered_call_is_answered_before_the_next_assistant_message() -> None:
    """The interrupted result goes between the call and the next assistant message."""
    items = log([user("q"), assistant(call("c1")), assistant(text("moving on"))])
    assert [m["role"] for m in both(items)["openai"]["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_a_later_result_for_an_interrupted_call_is_already_answered() -> None:
    """Once a call got its interrupted answer, a late result is left out, not sent twice."""
    items = log([user("q"), assistant(call("c1")), assistant(text("next")), result("c1", "late")])
    for answer in both(items).values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 5, "reason": "already_answered"}]


def test_result_for_an_unknown_call_is_left_out() -> None:
    """A tool result whose call is not in the history is listed as unknown_tool_call."""
    items = log([user("q"), result("nowhere", "x"), assistant(text("a"))])
    for answer in both(items).values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 3, "reason": "unknown_tool_call"}]


def test_a_call_id_repeated_within_one_message_is_left_out() -> None:
    """Two calls with one id in the same message: the second is a duplicate."""
    items = log([user("q"), assistant(call("c1"), call("c1", other=1)), result("c1")])
    for answer in both(items).values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 3, "block": 1, "reason": "duplicate_tool_call"}]


def test_refusals_of_one_message_are_joined_by_a_blank_line() -> None:
    """Several refusal parts become one refusal string for OpenAI."""
    items = log([user("q"), assistant({"type": "refusal", "text": "No."}, {"type": "refusal", "text": "Sorry."})])
    assert both(items)["openai"]["messages"][1]["refusal"] == "No.\n\nSorry."


def test_a_repeated_call_id_is_left_out_with_its_result() -> None:
    """Providers refuse repeated tool call ids: the second call and its result are listed."""
    duplicate = log([user("q"), assistant(call("c1")), result("c1"), assistant(call("c1")), result("c1")])
    for answer in both(duplicate).values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 5, "block": 0, "reason": "duplicate_tool_call"},
            {"runId": RUN, "seq": 5, "reason": "nothing_kept"},
            {"runId": RUN, "seq": 6, "reason": "already_answered"},
        ]


def replacement(call_id: str) -> str:
    """The id SPEC §12's provider-safe rule gives an unsafe one, as docs/TRANSCRIPT.md states it."""
    return "lw_" + hashlib.sha256(call_id.encode()).hexdigest()[:32]


@pytest.mark.parametrize("unsafe", ["toolu.01", "call:1", "", "c" * 65, "ça", "c 1", "c1\n"])
def test_an_unsafe_call_id_is_replaced_for_the_call_and_its_result(unsafe: str) -> None:
    """An id a provider refuses is replaced by a safe one, the same in the call and its result,
    and listed in ``inserted`` with the original."""
    safe = replacement(unsafe)
    items = log([user("q"), assistant(text("looking"), call(unsafe)), result(unsafe, "found")])
    answers = both(items)
    assert answers["anthropic"]["messages"][1:] == [
        {"role": "assistant", "content": [text("looking"),
                                          {"type": "tool_use", "id": safe, "name": "read_file", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": safe, "content": "found"}]},
    ]
    assert answers["openai"]["messages"][1:] == [
        {"role": "assistant", "content": "looking", "tool_calls": [
            {"id": safe, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": safe, "content": "found"},
    ]
    entry = {"index": 1, "reason": "unsafe_tool_call_id", "toolCallId": safe, "original": unsafe}
    for answer in answers.values():
        assert answer["inserted"] == [entry]
        assert answer["omitted"] == []


def test_the_replacement_is_fixed() -> None:
    """The same unsafe id gets the same replacement on every request (a parent may ask twice)."""
    assert replacement("toolu.01") == "lw_2c92cd448b43b705ea8fbc530abf1853"
    items = log([user("q"), assistant(call("toolu.01")), result("toolu.01")])
    assert both(items) == both(items)
    assert both(items)["anthropic"]["messages"][1]["content"][0]["id"] == "lw_2c92cd448b43b705ea8fbc530abf1853"


@pytest.mark.parametrize("safe", ["c", "toolu_01A-b", "c" * 64, "lw_" + "0" * 32])
def test_a_safe_call_id_is_kept(safe: str) -> None:
    """Ids of letters, digits, ``_`` and ``-``, 1 to 64 of them, are sent as logged."""
    items = log([user("q"), assistant(call(safe)), result(safe)])
    for answer in both(items).values():
        assert "inserted" not in answer
    assert both(items)["openai"]["messages"][2]["tool_call_id"] == safe


def test_replaced_ids_answered_by_a_user_message_interrupted_or_repeated() -> None:
    """A result block in a user message names the logged id; an unanswered replaced call is
    interrupted under its new id; a repeat of a replaced id is a duplicate; the entries of a
    history that starts with the assistant are shifted with its messages."""
    items = log([assistant(call("a.1"), call("b.2")),
                 user([{"type": "tool_result", "toolCallId": "a.1", "content": "one"}]),
                 assistant(call("a.1"), text("again")), result("a.1", "late")])
    answers = both(items)
    a, b = replacement("a.1"), replacement("b.2")
    anthropic = answers["anthropic"]
    assert anthropic["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": a, "content": "one"},
        {"type": "tool_result", "tool_use_id": b, "content": INTERRUPTED_TEXT, "is_error": True},
    ]}
    assert anthropic["inserted"] == [
        {"index": 0, "reason": "leading_assistant"},
        {"index": 1, "reason": "unsafe_tool_call_id", "toolCallId": a, "original": "a.1"},
        {"index": 1, "reason": "unsafe_tool_call_id", "toolCallId": b, "original": "b.2"},
        {"index": 2, "reason": "interrupted_tool_call", "toolCallId": b},
    ]
    assert answers["openai"]["inserted"] == [
        {"index": 0, "reason": "unsafe_tool_call_id", "toolCallId": a, "original": "a.1"},
        {"index": 0, "reason": "unsafe_tool_call_id", "toolCallId": b, "original": "b.2"},
        {"index": 2, "reason": "interrupted_tool_call", "toolCallId": b},
    ]
    for answer in answers.values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 4, "block": 0, "reason": "duplicate_tool_call"},
            {"runId": RUN, "seq": 5, "reason": "already_answered"},
        ]


def test_a_call_with_an_empty_name_is_left_out_with_its_results() -> None:
    """No provider takes a nameless call: it and every result naming it are listed as
    unnamed_tool_call; the rest of its message stays, and an unknown result stays unknown."""
    items = log([user("q"), assistant(text("trying"), call("c1", name=""), call("c.2", name="")),
                 result("c1", "x"), user([{"type": "tool_result", "toolCallId": "c.2", "content": "y"}, text("go on")]),
                 result("c3", "z"), assistant(call("c4", name="")), assistant(text("done"))])
    answers = both(items)
    assert answers["anthropic"]["messages"] == [
        {"role": "user", "content": [text("q")]},
        {"role": "assistant", "content": [text("trying")]},
        {"role": "user", "content": [text("go on")]},
        {"role": "assistant", "content": [text("done")]},
    ]
    for answer in answers.values():
        assert "inserted" not in answer
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 3, "block": 1, "reason": "unnamed_tool_call"},
            {"runId": RUN, "seq": 3, "block": 2, "reason": "unnamed_tool_call"},
            {"runId": RUN, "seq": 4, "reason": "unnamed_tool_call"},
            {"runId": RUN, "seq": 5, "block": 0, "reason": "unnamed_tool_call"},
            {"runId": RUN, "seq": 6, "reason": "unknown_tool_call"},
            {"runId": RUN, "seq": 7, "block": 0, "reason": "unnamed_tool_call"},
            {"runId": RUN, "seq": 7, "reason": "nothing_kept"},
        ]


def test_a_named_call_keeps_its_results_when_an_unnamed_one_shares_its_id() -> None:
    """A result goes to the kept call with its id, even when a nameless call used the id too."""
    items = log([user("q"), assistant(call("c1", name=""), call("c1")), result("c1", "x")])
    answer = both(items)["openai"]
    assert answer["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "x"}
    assert answer["omitted"] == [{"runId": RUN, "seq": 3, "block": 0, "reason": "unnamed_tool_call"}]


def test_error_results_and_block_results() -> None:
    """isError sets is_error for Anthropic; block content is kept as blocks there, joined for OpenAI."""
    items = log([user("q"), assistant(call("c1")),
                 result("c1", [text("line one"), text(" "), text("line two")], is_error=True)])
    answers = both(items)
    assert answers["anthropic"]["messages"][2]["content"] == [{
        "type": "tool_result", "tool_use_id": "c1", "content": [text("line one"), text("line two")], "is_error": True,
    }]
    assert answers["openai"]["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "line one\n\nline two"}
    for answer in answers.values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 4, "block": 1, "reason": "blank_text"}]


@pytest.mark.parametrize("content", ["", "   ", []])
def test_empty_result_is_answered_with_a_fixed_text(content: Any) -> None:
    """A result with nothing visible still answers its call, with a placeholder listed in inserted."""
    items = log([user("q"), assistant(call("c1")), result("c1", content, is_error=False)])
    answers = both(items)
    assert answers["anthropic"]["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": EMPTY_RESULT_TEXT}]
    assert answers["openai"]["messages"][2]["content"] == EMPTY_RESULT_TEXT
    assert answers["anthropic"]["inserted"] == [{"index": 2, "reason": "empty_tool_result", "toolCallId": "c1"}]


def test_result_parts_that_a_tool_cannot_answer_are_left_out() -> None:
    """Reasoning or a call inside a tool result is misplaced; an image is kept for Anthropic."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    items = log([user("q"), assistant(call("c1")),
                 result("c1", [{"type": "reasoning", "text": "x"}, image, {"type": "step-start"}])])
    answers = both(items)
    assert answers["anthropic"]["messages"][2]["content"][0]["content"] == [image]
    assert answers["anthropic"]["omitted"] == [
        {"runId": RUN, "seq": 4, "block": 0, "reason": "misplaced_block"},
        {"runId": RUN, "seq": 4, "block": 2, "reason": "bookkeeping"},
    ]
    assert answers["openai"]["omitted"][1] == {"runId": RUN, "seq": 4, "block": 1, "reason": "unsupported_block"}


def test_user_message_between_call_and_result_is_placed_after_the_result() -> None:
    """Both formats need the answer right after the call: the user's words follow it."""
    items = log([user("q"), assistant(call("c1")), user("also this"), result("c1", "r")])
    answers = both(items)
    assert answers["anthropic"]["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "r"}, text("also this")]
    assert [m["role"] for m in answers["openai"]["messages"]] == ["user", "assistant", "tool", "user"]


def test_results_inside_a_user_message_answer_their_calls() -> None:
    """A user message carrying tool_result blocks answers the calls it names."""
    items = log([user("q"), assistant(call("c1")),
                 user([{"type": "tool_result", "toolCallId": "c1", "content": [text("r"), {"type": "tool_call"}]},
                       {"type": "tool_result", "toolCallId": "zz", "content": "x"}, text("thanks")])])
    answers = both(items)
    assert answers["anthropic"]["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": [text("r")]}, text("thanks")]
    for answer in answers.values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 4, "block": 0, "part": 1, "reason": "misplaced_block"},
            {"runId": RUN, "seq": 4, "block": 1, "reason": "unknown_tool_call"},
        ]


def test_a_repeated_result_block_in_a_user_message_is_already_answered() -> None:
    """A result block for a call answered before is listed with its block index."""
    items = log([user("q"), assistant(call("c1")), result("c1", "r"),
                 user([text("and"), {"type": "tool_result", "toolCallId": "c1", "content": "again"}])])
    for answer in both(items).values():
        assert answer["omitted"] == [{"runId": RUN, "seq": 5, "block": 1, "reason": "already_answered"}]


def test_error_flag_of_a_result_block_in_a_user_message_is_kept() -> None:
    """isError on a tool_result block of a user message is the Anthropic result's is_error."""
    items = log([user("q"), assistant(call("c1")),
                 user([{"type": "tool_result", "toolCallId": "c1", "content": "boom", "isError": True}])])
    assert both(items)["anthropic"]["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "boom", "is_error": True}]


@pytest.mark.parametrize("content,reason", [([], "empty"), ([{"type": "step-start"}], "nothing_kept")])
def test_user_message_of_blocks_that_convert_to_nothing_is_left_out(content: list[Event], reason: str) -> None:
    """A user message whose blocks all go (or that has none) is listed as left out whole."""
    for answer in both(log([user(content), user("real")])).values():
        assert {"runId": RUN, "seq": 2, "reason": reason} in answer["omitted"]
        assert len(answer["messages"]) == 1


def test_user_message_of_only_results_is_not_listed() -> None:
    """A user message made only of answers contributed them: it is not left out."""
    items = log([user("q"), assistant(call("c1")), user([{"type": "tool_result", "toolCallId": "c1", "content": "r"}])])
    for answer in both(items).values():
        assert answer["omitted"] == []


def test_what_a_user_message_cannot_hold_is_listed() -> None:
    """Bookkeeping, a tool call and reasoning in a user message are each left out with their reason."""
    items = log([user([{"type": "step-finish"}, call("c9"), {"type": "reasoning", "text": "r", "signature": "s"},
                       text("kept")])])
    for answer in both(items).values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 2, "block": 0, "reason": "bookkeeping"},
            {"runId": RUN, "seq": 2, "block": 1, "reason": "misplaced_block"},
            {"runId": RUN, "seq": 2, "block": 2, "reason": "misplaced_block"},
        ]


def test_what_a_tool_result_cannot_hold_is_listed() -> None:
    """Inside a result: a nested result or a call is misplaced, bookkeeping is bookkeeping."""
    nested = {"type": "tool_result", "toolCallId": "c1", "content": "x"}
    items = log([user("q"), assistant(call("c1")),
                 result("c1", [nested, {"type": "patch"}, call("c2"), text("fine")])])
    for answer in both(items).values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 4, "block": 0, "reason": "misplaced_block"},
            {"runId": RUN, "seq": 4, "block": 1, "reason": "bookkeeping"},
            {"runId": RUN, "seq": 4, "block": 2, "reason": "misplaced_block"},
        ]


def test_misplaced_blocks_in_messages() -> None:
    """A tool_result block in an assistant message, or reasoning in a user message, is misplaced."""
    items = log([user([text("q"), {"type": "reasoning", "text": "r"}]),
                 assistant({"type": "tool_result", "toolCallId": "c", "content": "x"}, text("a"))])
    for answer in both(items).values():
        assert answer["omitted"] == [
            {"runId": RUN, "seq": 2, "block": 1, "reason": "misplaced_block"},
            {"runId": RUN, "seq": 3, "block": 0, "reason": "misplaced_tool_result"},
        ]


def test_adjacent_same_role_messages_merge_for_anthropic_only() -> None:
    """Anthropic roles alternate (merged, blocks in order); OpenAI keeps each message."""
    items = log([user("a"), user([text("b")]), assistant(text("c")), assistant(text("d"))])
    answers = both(items)
    assert answers["anthropic"]["messages"] == [
        {"role": "user", "content": [text("a"), text("b")]},
        {"role": "assistant", "content": [text("c"), text("d")]},
    ]
    assert [m["content"] for m in answers["openai"]["messages"]] == ["a", "b", "c", "d"]


def test_text_blocks_of_one_message_are_joined_by_a_blank_line_for_openai() -> None:
    """OpenAI content is one string: the message's texts joined by a blank line."""
    items = log([user([text("one"), text("two")]), assistant(text("x"), text("y"))])
    assert [m["content"] for m in both(items)["openai"]["messages"]] == ["one\n\ntwo", "x\n\ny"]


def test_tool_call_arguments_are_compact_json_keeping_non_ascii() -> None:
    """OpenAI arguments are the input as a JSON string, as the provider itself writes them."""
    items = log([user("q"), assistant(call("c1", path="café/ü.py", n=1)), result("c1")])
    arguments = both(items)["openai"]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert arguments == '{"path":"café/ü.py","n":1}'
    assert json.loads(arguments) == {"path": "café/ü.py", "n": 1}


def test_chunk_only_turn_contributes_its_streamed_text() -> None:
    """A turn whose output is its streamed text adds it as one assistant message, at the turn's end."""
    items = log([user("q"), chunk("Draft: "), chunk("half"), {"type": "turn/end", "stopReason": "cancelled"}],
                [user("again"), chunk(" "), assistant(), chunk("second")])
    answers = both(items)
    assert answers["anthropic"]["messages"] == [
        {"role": "user", "content": [text("q")]},
        {"role": "assistant", "content": [text("Draft: half")]},
        {"role": "user", "content": [text("again")]},
        {"role": "assistant", "content": [text(" second")]},
    ]
    assert answers["openai"]["omitted"] == [{"runId": RUN, "seq": 10, "reason": "empty"}]


def test_streamed_text_is_not_added_when_a_message_was_selected() -> None:
    """Chunks of a turn with a substantive message are not history: the message is."""
    items = log([user("q"), chunk("draft"), assistant(text("final"))])
    assert both(items)["openai"]["messages"][1:] == [{"role": "assistant", "content": "final"}]


def test_white_space_streamed_text_adds_nothing() -> None:
    """Only-white-space streamed text is no output, so no assistant message."""
    assert both(log([user("q"), chunk("  \n")]))["anthropic"]["messages"] == [
        {"role": "user", "content": [text("q")]}]


def test_streamed_text_answers_open_calls_first() -> None:
    """A streamed-text message is an assistant message: pending calls are answered before it."""
    items = log([user("q"), assistant(call("c1"))], [chunk("later text")])
    assert [m["role"] for m in both(items)["openai"]["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_turns_are_told_apart_by_run_and_turn() -> None:
    """Inherited events of a parent and a fork's own events, both turn 1, are separate turns."""
    items = log([user("q"), chunk("parent text")], run_id="parent") + [
        HistoryEvent("fork", 10, 1, chunk("fork text"))]
    assert [m.get("content") for m in both(items)["openai"]["messages"]] == ["q", "parent text", "fork text"]


def test_empty_history_is_empty() -> None:
    """No events: no messages, nothing omitted, nothing inserted."""
    for name, answer in both([]).items():
        assert answer == {"format": name, "messages": [], "omitted": []}


def test_leading_assistant_shifts_inserted_indexes() -> None:
    """With the leading user placeholder, later inserted indexes count it."""
    answer = both(log([assistant(call("c1"))]))["anthropic"]
    assert answer["inserted"] == [
        {"index": 0, "reason": "leading_assistant"},
        {"index": 2, "reason": "interrupted_tool_call", "toolCallId": "c1"},
    ]


def test_input_events_are_not_changed() -> None:
    """Converting never mutates the logged events (the log is the truth)."""
    items = log(MAX_TOKENS_PARTIAL + [user([text("u")]), assistant(text("a"), text("b"))])
    before = json.dumps([item.event for item in items])
    both(items)
    both(items)
    assert json.dumps([item.event for item in items]) == before


# -- the property test ----------------------------------------------------------------------------

CALL_IDS = ["c1", "c2", "c3", "c.4", "", "c" * 65]
words = st.text(alphabet="ab \n", min_size=0, max_size=4)
visible_words = st.text(alphabet="abc", min_size=1, max_size=4)
blank = st.sampled_from(["", " ", "\n", " \t\n"])
texts = st.one_of(visible_words, blank, words)
image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


@st.composite
def blocks(draw: st.DrawFn) -> Event:
    kind = draw(st.sampled_from(
        ["text", "text", "reasoning", "tool_call", "tool_result", "bookkeeping", "redacted", "image", "refusal",
         "file"]))
    if kind == "refusal":
        return {"type": "refusal", "text": draw(texts)}
    if kind == "file":
        return {"type": "file", "url": "file:///x"}
    if kind == "text":
        return text(draw(texts))
    if kind == "reasoning":
        block: Event = {"type": "reasoning", "text": draw(words)}
        signature = draw(st.sampled_from([None, "", "sig"]))
        if signature is not None:
            block["signature"] = signature
        return block
    if kind == "tool_call":
        return call(draw(st.sampled_from(CALL_IDS)), draw(st.sampled_from(["read_file", "read_file", ""])),
                    q=draw(words))
    if kind == "tool_result":
        return {"type": "tool_result", "toolCallId": draw(st.sampled_from(CALL_IDS + ["zz"])),
                "content": draw(st.one_of(texts, st.lists(blocks(), max_size=3))),
                "isError": draw(st.booleans())}
    if kind == "bookkeeping":
        return {"type": draw(st.sampled_from(sorted(BOOKKEEPING_BLOCK_TYPES)))}
    if kind == "redacted":
        return {"type": "redacted_thinking", "data": "zz"}
    return dict(image)


@st.composite
def events(draw: st.DrawFn) -> Event:
    kind = draw(st.sampled_from([
        "message", "message", "message", "empty", "errored", "result", "result", "user", "chunk", "chunk",
        "other_chunk", "step", "x", "turn_end",
    ]))
    if kind == "message":
        extra: dict[str, Any] = draw(st.sampled_from(
            [{}, {"stopReason": "max_tokens"}, {"usage": {"inputTokens": 1, "outputTokens": 2}}]))
        return assistant(*draw(st.lists(blocks(), max_size=4)), **extra)
    if kind == "empty":
        return assistant(usage={"inputTokens": 5, "outputTokens": 7})
    if kind == "errored":
        return assistant(error={"message": "overloaded"})
    if kind == "result":
        content = draw(st.one_of(texts, st.lists(blocks(), max_size=3)))
        return result(draw(st.sampled_from(CALL_IDS + ["zz"])), content, draw(st.sampled_from([None, True, False])))
    if kind == "user":
        return user(draw(st.one_of(texts, st.lists(blocks(), max_size=3))))
    if kind == "chunk":
        return chunk(draw(texts))
    if kind == "other_chunk":
        return {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": draw(words)}}
    if kind == "step":
        return {"type": draw(st.sampled_from(["step/start", "step/finish"]))}
    if kind == "x":
        return {"type": "x-note", "anything": 1}
    return {"type": "turn/end", "stopReason": "cancelled"}


histories = st.lists(st.lists(events(), max_size=8), min_size=0, max_size=4)


def expected_units(items: list[HistoryEvent], answer: dict[str, Any]) -> list[Any]:
    """What must appear, in order, outside tool answers: every kept block of every kept message,
    and each streamed-text turn's text; checked independently of the module's passes."""
    dropped = {(e["runId"], e["seq"], e.get("block")) for e in answer["omitted"] if "part" not in e}
    units: list[Any] = []
    turn_events: list[Event] = []
    key = None

    def close_turn() -> None:
        if turn_events and not any(
            e["type"] == "assistant/message" and any(is_substantive(b) for b in e["message"]["content"])
            for e in turn_events
        ):
            output = final_assistant_output(turn_events)
            if output:
                units.append(("assistant", [output[0]["text"]]))

    for item in items:
        if (item.run_id, item.turn) != key:
            close_turn()
            key, turn_events = (item.run_id, item.turn), []
        event = dict(item.event)
        turn_events.append(event)
        if event["type"] not in ("assistant/message", "user/message"):
            continue
        role = "assistant" if event["type"] == "assistant/message" else "user"
        content = event["message"]["content"]
        if isinstance(content, str):
            kept = [] if (item.run_id, item.seq, None) in dropped else [content]
        else:
            kept = [
                block for index, block in enumerate(content)
                if block["type"] != "tool_result" and (item.run_id, item.seq, index) not in dropped
            ]
        if kept:
            units.append((role, kept))
    close_turn()
    return units


def as_anthropic(block: Any, ids: dict[str, str]) -> Any:
    """``block`` as Anthropic takes it; ``ids`` are the replaced call ids (original → new)."""
    if isinstance(block, str):
        return text(block)
    kind = block["type"]
    if kind == "text":
        return text(block["text"])
    if kind == "reasoning":
        return {"type": "thinking", "thinking": block["text"], "signature": block["signature"]}
    if kind == "tool_call":
        return {"type": "tool_use", "id": ids.get(block["id"], block["id"]), "name": block["name"],
                "input": block["input"]}
    return block


def justified(entry: dict[str, Any], event: Event, fmt: str) -> bool:
    """Whether an omitted entry's reason is true of what it names."""
    reason = entry["reason"]
    if "block" not in entry:
        if event["type"] == "tool/result":
            return reason in ("unknown_tool_call", "already_answered", "unnamed_tool_call")
        content = event["message"]["content"]
        if reason == "empty":
            return content in ([], "")
        if reason == "blank_text":
            return isinstance(content, str) and content.isspace()
        return reason == "nothing_kept" and isinstance(content, list) and content != []
    block = event["message"]["content"][entry["block"]] if event["type"] != "tool/result" else None
    if event["type"] == "tool/result" or (block is not None and "part" in entry):
        holder = event if event["type"] == "tool/result" else block
        assert holder is not None
        part = holder["content"][entry.get("part", entry["block"])]
        return reason in {"blank_text", "bookkeeping", "misplaced_block", "unsupported_block"} and (
            reason != "blank_text" or part["type"] == "text")
    assert block is not None
    if block["type"] == "tool_result" and event["type"] == "user/message":
        return reason in ("unknown_tool_call", "already_answered", "unnamed_tool_call")
    handled = {"text", "tool_call", "reasoning", "tool_result", *BOOKKEEPING_BLOCK_TYPES}
    return bool({
        "blank_text": block["type"] == "text" and not visible(block["text"]),
        "blank_refusal": block["type"] == "refusal" and not visible(block["text"])
        and fmt == "openai" and event["type"] == "assistant/message",
        "bookkeeping": block["type"] in BOOKKEEPING_BLOCK_TYPES,
        "unsigned_reasoning": fmt == "anthropic" and block["type"] == "reasoning" and not block.get("signature"),
        "reasoning": fmt == "openai" and block["type"] == "reasoning",
        "unsupported_block": (fmt == "openai" and block["type"] not in ("text", "tool_call", "reasoning", "refusal"))
        or (fmt == "openai" and block["type"] == "refusal" and event["type"] == "user/message")
        or (fmt == "anthropic" and block["type"] not in ANTHROPIC_BLOCK_TYPES | handled),
        "duplicate_tool_call": block["type"] == "tool_call" and block["name"] != "",
        "unnamed_tool_call": block["type"] == "tool_call" and block["name"] == ""
        and event["type"] == "assistant/message",
        "misplaced_tool_result": block["type"] == "tool_result" and event["type"] == "assistant/message",
        "misplaced_block": event["type"] == "user/message" and block["type"] in ("reasoning", "tool_call"),
    }.get(reason, False))


#: Examples of the property test; the mutation script lowers it (each mutant runs the test again).
EXAMPLES = int(os.environ.get("LASTWORD_TRANSCRIPT_EXAMPLES", "400"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories)
def test_every_invariant_holds_for_every_log(turns: list[list[Event]]) -> None:
    """For any log: provider-valid shapes, every §12 invariant, every omission listed with a true
    reason, and every substantive block of every kept message present, in order."""
    items = log(*turns)
    by_seq = {(item.run_id, item.seq): item.event for item in items}
    for fmt, answer in both(items).items():
        units = expected_units(items, answer)
        messages = answer["messages"]
        replaced = [e for e in answer.get("inserted", []) if e["reason"] == "unsafe_tool_call_id"]
        ids = {e["original"]: e["toolCallId"] for e in replaced}
        assert all(e["original"] in ("c.4", "", "c" * 65) for e in replaced)
        assert len(set(ids.values())) == len(ids)
        for entry in answer["omitted"]:
            event = dict(by_seq[(entry["runId"], entry["seq"])])
            assert event["type"] in ("assistant/message", "user/message", "tool/result")
            assert justified(entry, event, fmt), (entry, event)
        # Count in, count out: substantive blocks either appear or are omitted for a loss reason.
        substantive_in = sum(
            1 for item in items if item.event["type"] == "assistant/message"
            for block in item.event["message"]["content"] if is_substantive(block)
        )
        lost = sum(1 for e in answer["omitted"] if e["reason"] in SUBSTANTIVE_LOSS and "part" not in e
                   and by_seq[(e["runId"], e["seq"])]["type"] == "assistant/message")
        kept_assistant = sum(len(blocks_) for role, blocks_ in units if role == "assistant")
        streamed = sum(1 for role, blocks_ in units if role == "assistant" and isinstance(blocks_[0], str))
        assert substantive_in == kept_assistant - streamed + lost
        if fmt == "anthropic":
            got = [b for m in messages for b in m["content"] if b["type"] != "tool_result"]
            if answer.get("inserted") and answer["inserted"][0]["reason"] == "leading_assistant":
                got = got[1:]
            want = [as_anthropic(b, ids) for _, kept in units for b in kept]
            assert got == want
        else:
            got_units = [m for m in messages if m["role"] != "tool"]
            assert len(got_units) == len(units)
            for message, (role, kept) in zip(got_units, units):
                assert message["role"] == role
                joined = [b if isinstance(b, str) else b["text"] for b in kept if isinstance(b, str) or b["type"] == "text"]
                assert message["content"] == ("\n\n".join(joined) if joined else None)
                refusals = [b["text"] for b in kept if not isinstance(b, str) and b["type"] == "refusal"]
                assert message.get("refusal") == ("\n\n".join(refusals) if refusals else None)
                calls = [ids.get(b["id"], b["id"]) for b in kept if not isinstance(b, str) and b["type"] == "tool_call"]
                assert [c["id"] for c in message.get("tool_calls", [])] == calls
        # Every answer in the output answers a call; every inserted answer is a repair listed.
        repairs = {(e["index"], e.get("toolCallId")) for e in answer.get("inserted", [])}
        for index, message in enumerate(messages):
            if fmt == "openai" and message["role"] == "tool" and message["content"] in (INTERRUPTED_TEXT, EMPTY_RESULT_TEXT):
                assert (index, message["tool_call_id"]) in repairs


def test_checks_refuse_what_providers_refuse() -> None:
    """The invariant checks can fail: each refuses a history a provider answers with 400."""
    bad_anthropic: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": [text("q")]}, {"role": "assistant", "content": [
            {"type": "tool_use", "id": bad_id, "name": "n", "input": {}}]},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": bad_id, "content": "x"}]}]
        for bad_id in ("c.1", "", "c" * 65)
    ] + [
        [{"role": "user", "content": [text("q")]}, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c", "name": "", "input": {}}]},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "x"}]}],
        [{"role": "assistant", "content": [text("a")]}],
        [{"role": "user", "content": []}],
        [{"role": "user", "content": [text(" ")]}],
        [{"role": "user", "content": [text("q")]}, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c", "name": "n", "input": {}}]}],
        [{"role": "user", "content": [text("q"), {"type": "tool_result", "tool_use_id": "c", "content": "x"}]}],
        [{"role": "user", "content": [{"type": "reasoning", "text": "x"}]}],
    ]
    for messages in bad_anthropic:
        with pytest.raises((AssertionError, ValueError)):
            check_anthropic(messages)
    unsafe_openai: list[list[dict[str, Any]]] = [
        [{"role": "assistant", "content": None, "tool_calls": [
            {"id": bad_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": bad_id, "content": "x"}]
        for bad_id, name in (("c.1", "n"), ("", "n"), ("c" * 65, "n"), ("c", ""))
    ]
    bad_openai: list[list[dict[str, Any]]] = unsafe_openai + [
        [{"role": "user", "content": ""}],
        [{"role": "assistant", "content": None}],
        [{"role": "tool", "tool_call_id": "c", "content": "x"}],
        [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "n", "arguments": "{}"}}]},
         {"role": "user", "content": "q"}],
        [{"role": "user", "content": "q", "name": 3}],
    ]
    for messages in bad_openai:
        with pytest.raises((AssertionError, ValueError)):
            check_openai(messages)
