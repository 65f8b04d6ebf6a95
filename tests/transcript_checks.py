"""Checks of SPEC §12's invariants on a transcript, shared by the module and HTTP tests.

Shapes are validated with the providers' own SDK request types (``anthropic.types.MessageParam``,
``openai.types.chat.ChatCompletionMessageParam``) with extra keys forbidden, so an answer is
what those SDKs would send. The SDK types do not hold the providers' rules for tool call ids
(Anthropic refuses one outside ``^[a-zA-Z0-9_-]{1,64}$``) or names (empty): checked here. Pydantic validates ``Iterable`` fields lazily: :func:`_force` walks
the validated value so every nested block is really checked.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic.types
import openai.types.chat
from pydantic import ConfigDict, TypeAdapter

ANTHROPIC_MESSAGES: TypeAdapter[Any] = TypeAdapter(
    list[anthropic.types.MessageParam], config=ConfigDict(extra="forbid", strict=True)
)
OPENAI_MESSAGES: TypeAdapter[Any] = TypeAdapter(
    list[openai.types.chat.ChatCompletionMessageParam], config=ConfigDict(extra="forbid", strict=True)
)


#: A tool call id Anthropic's Messages API accepts (written here from its error text, not taken
#: from the module under test).
PROVIDER_CALL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def provider_call_id(value: Any) -> bool:
    return isinstance(value, str) and PROVIDER_CALL_ID.fullmatch(value) is not None


def _force(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _force(item) for key, item in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return [_force(item) for item in value]


def visible(text: Any) -> bool:
    return isinstance(text, str) and text.strip() != ""


def check_anthropic(messages: list[dict[str, Any]]) -> None:
    """Every §12 invariant of the ``anthropic`` format, and the SDK's own request type."""
    _force(ANTHROPIC_MESSAGES.validate_python(messages))
    for index, message in enumerate(messages):
        assert set(message) == {"role", "content"}, message
        assert message["role"] == ("user" if index % 2 == 0 else "assistant"), "roles alternate from user"
        content = message["content"]
        assert isinstance(content, list) and content, f"message {index} has empty content"
        seen_other = False
        for block in content:
            kind = block["type"]
            if kind == "text":
                assert set(block) == {"type", "text"} and visible(block["text"]), block
            elif kind == "thinking":
                assert message["role"] == "assistant" and block["signature"], block
            elif kind == "tool_use":
                assert message["role"] == "assistant"
                assert provider_call_id(block["id"]) and block["name"], block
            elif kind == "tool_result":
                assert message["role"] == "user"
                assert provider_call_id(block["tool_use_id"]), block
                assert not seen_other, "tool results come before any other block of their message"
                result = block["content"]
                if isinstance(result, str):
                    assert visible(result)
                else:
                    assert result and all(visible(b["text"]) for b in result if b["type"] == "text")
                continue
            seen_other = True
        if message["role"] == "assistant":
            calls = [b["id"] for b in content if b["type"] == "tool_use"]
            following = messages[index + 1]["content"] if index + 1 < len(messages) else []
            answers = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
            assert sorted(calls) == sorted(answers), "every call is answered in the very next message"
    calls_all = [b["id"] for m in messages for b in m["content"] if b["type"] == "tool_use"]
    assert len(calls_all) == len(set(calls_all)), "tool call ids are unique"


def check_openai(messages: list[dict[str, Any]]) -> None:
    """Every §12 invariant of the ``openai`` format, and the SDK's own request type."""
    _force(OPENAI_MESSAGES.validate_python(messages))
    open_calls: list[str] = []
    seen_calls: set[str] = set()
    for message in messages:
        role = message["role"]
        if role == "tool":
            assert set(message) == {"role", "tool_call_id", "content"}
            assert message["tool_call_id"] in open_calls, "a tool message follows the call it answers"
            open_calls.remove(message["tool_call_id"])
            assert visible(message["content"])
            continue
        assert not open_calls, "every call is answered before the next message"
        if role == "user":
            assert set(message) == {"role", "content"} and visible(message["content"])
        else:
            assert role == "assistant"
            assert set(message) <= {"role", "content", "tool_calls", "refusal"}
            content = message["content"]
            assert content is None or visible(content)
            assert "refusal" not in message or visible(message["refusal"])
            calls = message.get("tool_calls", [])
            assert content is not None or calls or "refusal" in message, "an assistant message says something"
            if "tool_calls" in message:
                assert calls
            for call in calls:
                assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
                assert provider_call_id(call["id"]) and call["function"]["name"], call
                assert call["id"] not in seen_calls, "tool call ids are unique"
                seen_calls.add(call["id"])
                open_calls.append(call["id"])
    assert not open_calls, "the last calls are answered too"


CHECKS = {"anthropic": check_anthropic, "openai": check_openai}
