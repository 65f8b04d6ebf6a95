"""The parent model's tool result for a subagent turn (SPEC §9), in MCP ``CallToolResult`` shape.

Its content is never empty and never holds an empty text: a provider refuses both, and the
parent model must always learn how the child ended and what it said before it stopped.
"""

from __future__ import annotations

import json
from typing import Any

from lastword.rules.fold import is_visible_text
from lastword.rules.stop_reasons import is_error

NO_TEXT_OUTPUT = "The subagent finished without text output."

_WHAT_HAPPENED = {
    "max_tokens": "it reached its output-token limit",
    "max_turns": "it reached its turn limit",
    "refusal": "it refused",
    "cancelled": "it was cancelled",
    "error": "it failed",
    "timeout": "it stopped reporting before its lease ran out",
}


def output_text(output: list[dict[str, Any]]) -> str:
    """The text blocks of a selected output, joined by a blank line."""
    texts = (block.get("text") for block in output if block.get("type") == "text")
    return "\n\n".join(text for text in texts if is_visible_text(text))


def error_message(error: Any) -> str | None:
    """The error's message on one line, or None when it has none worth showing.

    A string is used as it is; any other JSON value (a non-string ``message``, or an error that
    is not an object) is shown as JSON, as the producer sent it, never as a Python repr.
    """
    if isinstance(error, dict):
        error = error.get("message")
    if error is None or error == {} or error == []:
        return None  # an empty string, or one of white space only, comes out as None below
    text = error if isinstance(error, str) else json.dumps(error, ensure_ascii=False, separators=(",", ":"))
    return " ".join(text.split()) or None


def headline(stop_reason: str, error: Any) -> str:
    line = f"The subagent did not complete (stopReason: {stop_reason}): {_WHAT_HAPPENED[stop_reason]}."
    message = error_message(error)
    if message:
        line += " Error: " + message
    return line


def tool_result(stop_reason: str, output: list[dict[str, Any]], error: Any) -> dict[str, Any]:
    """``{content: [{type: "text", text}], isError}`` for an ended turn."""
    text = output_text(output)
    if not is_error(stop_reason):
        return {"content": [{"type": "text", "text": text or NO_TEXT_OUTPUT}], "isError": False}
    full = headline(stop_reason, error)
    if text:
        full += "\n\n" + text
    return {"content": [{"type": "text", "text": full}], "isError": True}
