"""The OpenAI Agents SDK's stream events of one agent run, as the session events of SPEC §4.

The SDK streams an agent's run as ``raw_response_event``\\ s (the Responses API's own stream
events, which it also makes from Chat Completions chunks), ``run_item_stream_event``\\ s (items
the run produced: tool outputs, handoffs) and ``agent_updated_stream_event``\\ s. What lastword
needs of them:

* ``response.output_text.delta`` (and the reasoning deltas) → ``assistant/chunk``, so a run cut
  before its message is complete still has its streamed text (§5 rule 2);
* ``response.completed`` / ``response.incomplete`` → one ``assistant/message`` per model response:
  its text, reasoning and function calls as blocks, its usage, and its finish reason
  (``incomplete_details.reason``: ``max_output_tokens`` → ``max_tokens``, ``content_filter`` →
  ``refusal``), so a response cut by the output-token ceiling is kept with its stop reason;
* a ``tool_output`` item → ``tool/result``;
* a new agent (a handoff inside the run) → ``x-openai-agents-agent``, kept and never interpreted.

Everything else the SDK streams (item added/done, content parts, argument deltas) is already in
the completed response. The module is pure: it reads the SDK's objects through their documented
attributes and ``model_dump()``, and does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Event = dict[str, Any]

#: ``incomplete_details.reason`` of a response → its stop reason (SPEC §6).
_INCOMPLETE = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}
_TEXT_DELTAS = {"response.output_text.delta": "text", "response.reasoning_text.delta": "reasoning",
                "response.reasoning_summary_text.delta": "reasoning"}


def _plain(value: Any) -> Any:
    """An SDK model (pydantic) as plain data; plain data as it is."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else value


def _arguments(raw: Any) -> dict[str, Any]:
    """A function call's arguments (a JSON text) as the tool call's input object."""
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        return {"arguments": raw}  # a call cut mid-arguments: kept as sent, not guessed at
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def response_blocks(output: list[Any]) -> list[dict[str, Any]]:
    """A response's output items as content blocks (§3), in order."""
    blocks: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    blocks.append({"type": "text", "text": str(part.get("text", ""))})
                elif isinstance(part, Mapping) and part.get("type") == "refusal":
                    blocks.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "function_call":
            blocks.append({"type": "tool_call", "id": str(item.get("call_id") or item.get("id")),
                           "name": str(item.get("name", "")), "input": _arguments(item.get("arguments"))})
        elif kind == "reasoning":
            text = "".join(str(part.get("text", "")) for part in item.get("summary") or [] if isinstance(part, Mapping))
            blocks.append({"type": "reasoning", "text": text})
    return blocks


def usage_of(usage: Any) -> dict[str, int] | None:
    """A Responses usage as §4's: cached input tokens are reads, not input."""
    if not isinstance(usage, Mapping):
        return None
    cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    return {"inputTokens": max(0, int(usage.get("input_tokens") or 0) - cached),
            "outputTokens": int(usage.get("output_tokens") or 0), "cacheReadTokens": cached}


class AgentRunEvents:
    """Turns one agent run's stream events into §4 events; remembers the last response's stop."""

    def __init__(self) -> None:
        #: The stop reason of the last model response (None: completed, or none seen yet).
        self.last_stop: str | None = None

    def events(self, stream_event: Any) -> list[Event]:
        kind = getattr(stream_event, "type", None)
        if kind == "raw_response_event":
            return self._raw(_plain(getattr(stream_event, "data", None)))
        if kind == "run_item_stream_event" and getattr(stream_event, "name", None) == "tool_output":
            item = getattr(stream_event, "item", None)
            raw = _plain(getattr(item, "raw_item", None))
            call_id = raw.get("call_id") if isinstance(raw, Mapping) else None
            if not isinstance(call_id, str):
                return []
            output = getattr(item, "output", None)
            return [{"type": "tool/result", "toolCallId": call_id,
                     "content": output if isinstance(output, str) else json.dumps(_plain(output), default=str)}]
        if kind == "agent_updated_stream_event":
            agent = getattr(stream_event, "new_agent", None)
            return [{"type": "x-openai-agents-agent", "agent": str(getattr(agent, "name", ""))}]
        return []

    def _raw(self, data: Any) -> list[Event]:
        if not isinstance(data, Mapping):
            return []
        kind = data.get("type")
        if kind in _TEXT_DELTAS:
            delta = data.get("delta")
            if isinstance(delta, str) and delta:
                return [{"type": "assistant/chunk", "delta": {"type": _TEXT_DELTAS[kind], "text": delta}}]
            return []
        if kind in ("response.completed", "response.incomplete"):
            response = data.get("response")
            if not isinstance(response, Mapping):
                return []
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, Mapping) else None
            self.last_stop = _INCOMPLETE.get(str(reason)) if kind == "response.incomplete" else None
            message: dict[str, Any] = {"content": response_blocks(list(response.get("output") or []))}
            if isinstance(response.get("id"), str):
                message["id"] = response["id"]
            usage = usage_of(response.get("usage"))
            if usage is not None:
                message["usage"] = usage
            if self.last_stop is not None:
                message["stopReason"] = self.last_stop
            return [{"type": "assistant/message", "message": message}]
        return []
