"""Codex's ``codex exec --json`` standard output (SPEC §16, ``codex``).

Codex prints ``thread.started`` → ``turn.started`` → items → ``turn.completed`` (with the turn's
usage) or ``turn.failed``; an item is printed whole by ``item.completed`` (no text deltas), and
retries and failures are top-level ``error`` lines.

* ``item.completed`` of an ``agent_message`` → ``assistant/message`` holding its text.
* A ``reasoning`` item is held and becomes a ``reasoning`` block placed first in the next
  ``agent_message``'s message. One that no ``agent_message`` follows before the turn's end (a
  ``turn.completed``/``turn.failed`` line, or the end of the body) is kept as
  ``x-codex-reasoning``: it is not output, so a turn cut after its reasoning does not answer
  with the reasoning alone. A reasoning item with blank text is kept as ``x-codex-reasoning``
  at once, and an ``agent_message`` with blank text does not take the reasoning held (it
  waits for the next one), for the same reason: a reasoning block is substantive even when
  empty, and a message holding only reasoning would hide the answer before it.
* ``command_execution`` → an ``assistant/message`` holding one ``tool_call`` (``id`` the item
  id, ``name`` ``shell``, ``input`` ``{command}``), then a ``tool/result`` (the aggregated
  output, ``isError`` when the exit code is not 0, a missing exit code included).
  ``mcp_tool_call`` likewise: ``name`` ``<server>__<tool>`` (how Codex names an MCP tool to the
  model), ``input`` its arguments, the result its ``result.content`` or its ``error.message``.
* Any other item (``file_change``, ``web_search``, ``todo_list``, an ``error`` item, …) →
  ``x-codex-<item type>``.
* ``turn.completed`` → an empty, usage-only ``assistant/message`` holding the turn's usage, then
  ``turn/end`` ``completed``. Codex reports usage per turn, not per message, and the turn's usage
  is the sum over its messages (SPEC §4; a ``turn/end``'s own usage counts only in a turn
  without messages), so the usage goes in a message of its own, which never hides an earlier
  output (§5). ``input_tokens`` − ``cached_input_tokens`` → ``inputTokens`` (uncached input, as in
  the other formats), ``cached_input_tokens`` → ``cacheReadTokens``, ``cache_write_input_tokens``
  → ``cacheWriteTokens`` when printed, ``output_tokens`` (reasoning included, as OpenAI counts
  it) → ``outputTokens``.
* ``turn.failed`` → ``turn/end`` ``max_tokens`` when its message names ``max_output_tokens``
  (Codex 0.171 prints "Incomplete response returned, reason: max_output_tokens"), else
  ``error`` with ``error: {message}``.
* ``error`` lines ("Reconnecting... 1/1 (…)", then the final error) → ``x-codex-error``;
  ``thread.started`` and ``turn.started`` → ``x-codex-thread.started``/``x-codex-turn.started``
  (small, and the only record of the thread id); any other line kind → ``x-codex-<type>``.

``item.started`` and ``item.updated`` are skipped: they announce an item that ``item.completed``
then holds whole, so keeping them would store every command twice. An item started but never
completed (the child was killed mid-command) therefore leaves no event.

Event ids: ``<thread_id>:<item id>`` for an item's event, ``…:result`` for its ``tool/result``;
a line without an id of its own gets ``<thread_id>:<type>:<position among that type>``, and the
``turn/end`` of a ``turn.completed`` that id plus ``:end``. Every event's ``source`` holds the
line(s) it was made from; a ``tool/result`` and the ``turn/end`` after a usage message list no
line, theirs is in the message just before them.
"""

from __future__ import annotations

from typing import Any

from lastword.adapters.base import usage_of
from lastword.adapters.cli_base import CliAdapter, Event, Made, StreamStop

#: Line kinds that only announce what ``item.completed`` holds: skipped.
SKIPPED = frozenset({"item.started", "item.updated"})

class CodexAdapter(CliAdapter):
    format = "codex"
    command = "codex"

    def __init__(self) -> None:
        super().__init__()
        self._thread: str | None = None
        #: Reasoning items waiting for the next agent message: (block, raw line, item id).
        self._reasoning: list[tuple[dict[str, Any], Event, str]] = []

    def feed(self, index: int, line: Event) -> list[Made]:
        self.lines_read += 1
        kind = self.need(index, line, "type", str)
        if kind in SKIPPED:
            item = self.need(index, line, "item", dict)
            self.need(index, item, "id", str, "item.")
            return []
        if kind == "item.completed":
            return self._completed(index, line)
        if kind == "thread.started":
            thread = self.need(index, line, "thread_id", str)
            self._thread = self._thread or thread
            return [self.extension(kind, self.positional_id(self._thread, kind), line)]
        if kind == "turn.completed":
            return self._turn_completed(index, line)
        if kind == "turn.failed":
            return self._turn_failed(index, line)
        if kind == "error":
            self.need(index, line, "message", str)
        return [self.extension(kind, self.positional_id(self._thread, kind), line)]

    def assembled(self) -> list[Made]:
        return self._unanswered_reasoning()

    # Items.

    def _completed(self, index: int, line: Event) -> list[Made]:
        item = self.need(index, line, "item", dict)
        item_id = self.need(index, item, "id", str, "item.")
        kind = self.need(index, item, "type", str, "item.")
        event_id = f"{self._thread or self.format}:{item_id}"
        if kind == "agent_message":
            text = self.need(index, item, "text", str, "item.")
            if not text.strip():  # no answer to carry the reasoning: it waits for the next
                return [self._message([{"type": "text", "text": text}], event_id, [line])]
            blocks = [block for block, _, _ in self._reasoning] + [{"type": "text", "text": text}]
            raw = [held for _, held, _ in self._reasoning] + [line]
            self._reasoning = []
            return [self._message(blocks, event_id, raw)]
        if kind == "reasoning":
            text = self.need(index, item, "text", str, "item.")
            if not text.strip():
                return [self.extension("reasoning", event_id, line)]
            self._reasoning.append(({"type": "reasoning", "text": text}, line, item_id))
            return []
        if kind == "command_execution":
            command = self.need(index, item, "command", str, "item.")
            output = item.get("aggregated_output")
            exit_code = item.get("exit_code")
            if output is not None and not isinstance(output, str):
                raise self.refuse(index, "item.aggregated_output", "expected a string")
            if exit_code is not None and (type(exit_code) is not int):
                raise self.refuse(index, "item.exit_code", "expected an integer")
            call = {"type": "tool_call", "id": item_id, "name": "shell", "input": {"command": command}}
            return [self._message([call], event_id, [line]),
                    self._result(item_id, output or "", exit_code != 0, event_id)]
        if kind == "mcp_tool_call":
            server = self.need(index, item, "server", str, "item.")
            tool = self.need(index, item, "tool", str, "item.")
            arguments = item.get("arguments")
            call = {"type": "tool_call", "id": item_id, "name": f"{server}__{tool}",
                    "input": arguments if isinstance(arguments, dict) else {"arguments": arguments}}
            content, is_error = _mcp_result(item)
            return [self._message([call], event_id, [line]), self._result(item_id, content, is_error, event_id)]
        return [self.extension(kind, event_id, line)]

    def _message(self, content: list[dict[str, Any]], event_id: str, raw: list[Event]) -> Made:
        return Made({"type": "assistant/message", "message": {"content": content}, "eventId": event_id,
                     "source": self.source(raw)})

    def _result(self, call_id: str, content: Any, is_error: bool, event_id: str) -> Made:
        return Made({"type": "tool/result", "toolCallId": call_id, "content": content, "isError": is_error,
                     "eventId": f"{event_id}:result", "source": self.source([])})

    def _unanswered_reasoning(self) -> list[Made]:
        made = [self.extension("reasoning", f"{self._thread or self.format}:{item_id}", raw)
                for _, raw, item_id in self._reasoning]
        self._reasoning = []
        return made

    # The turn's end.

    def _turn_completed(self, index: int, line: Event) -> list[Made]:
        usage = self.need(index, line, "usage", dict)
        for key in ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens"):
            value = usage.get(key)
            if value is not None and (type(value) is not int or value < 0):
                raise self.refuse(index, f"usage.{key}", "expected a non-negative integer")
        total, cached = usage.get("input_tokens"), usage.get("cached_input_tokens")
        if isinstance(total, int) and isinstance(cached, int) and cached > total:
            raise self.refuse(index, "usage.cached_input_tokens", "more cached tokens than input tokens")
        made = self._unanswered_reasoning()
        event_id = self.positional_id(self._thread, "turn.completed")
        message: dict[str, Any] = {"content": []}
        counted = usage_of((
            ("inputTokens", total - cached if isinstance(total, int) and isinstance(cached, int) else total),
            ("outputTokens", usage.get("output_tokens")),
            ("cacheReadTokens", cached),
            ("cacheWriteTokens", usage.get("cache_write_input_tokens")),
        ))
        if counted is not None:
            message["usage"] = counted
        made.append(Made({"type": "assistant/message", "message": message, "eventId": event_id,
                          "source": self.source([line])}))
        made.append(Made({"type": "turn/end", "stopReason": "completed", "eventId": f"{event_id}:end",
                          "source": self.source([])}))
        self._stop = StreamStop("turn.completed", "completed")
        return made

    def _turn_failed(self, index: int, line: Event) -> list[Made]:
        failure = self.need(index, line, "error", dict)
        text = self.need(index, failure, "message", str, "error.")
        made = self._unanswered_reasoning()
        turn_end: Event = {"type": "turn/end"}
        if "max_output_tokens" in text:
            turn_end["stopReason"] = "max_tokens"
            self._stop = StreamStop("turn.failed", "max_tokens")
        else:
            turn_end["stopReason"] = "error"
            turn_end["error"] = {"message": text}
            self._stop = StreamStop("turn.failed", "error", {"message": text})
        turn_end["eventId"] = self.positional_id(self._thread, "turn.failed")
        turn_end["source"] = self.source([line])
        made.append(Made(turn_end))
        return made


def _mcp_result(item: dict[str, Any]) -> tuple[Any, bool]:
    """An MCP call's ``tool/result`` content and whether it failed."""
    error = item.get("error")
    if isinstance(error, dict) and error.get("message") is not None:
        return str(error["message"]), True
    result = item.get("result")
    content = result.get("content") if isinstance(result, dict) else None
    failed = item.get("status") == "failed" or error is not None
    if isinstance(content, list) and all(isinstance(block, dict) and isinstance(block.get("type"), str)
                                         for block in content):
        return content, failed
    return ("" if result is None else str(result)), failed
