"""OpenAI Responses API streams (SPEC §13, ``openai-responses``).

One body is one response: ``response.created``, output items (``response.output_item.added``,
their deltas, ``response.output_item.done``) and one terminal event (``response.completed``,
``response.incomplete``, ``response.failed``, or ``error``).

* ``response.output_text.delta`` becomes an ``assistant/chunk`` text delta as it arrives,
  ``response.reasoning_summary_text.delta`` a reasoning delta.
* The end of the body makes one ``assistant/message`` of the finished output items, in output
  order: a ``message`` item's ``output_text`` parts → ``text`` blocks and ``refusal`` parts →
  ``{type: "refusal", text}``; a ``function_call`` → ``tool_call`` (``id`` is its
  ``call_id``; dropped when its arguments do not parse to an object); a ``reasoning`` item →
  ``reasoning`` holding its summary texts joined by a blank line, no signature (none when it
  has no summary text: see ``_blocks``); any other item
  kept as sent. An item that was added but never finished adds nothing, so a response that
  finished none gives an empty, usage-only message.
* Usage: ``input_tokens`` minus ``input_tokens_details.cached_tokens`` is ``inputTokens``
  (uncached input, as in the other formats), ``cached_tokens`` is ``cacheReadTokens``,
  ``cache_write_tokens`` ``cacheWriteTokens``.

The events that only repeat what the finished items hold (``response.in_progress``,
``response.content_part.*``, ``response.output_text.done``, …) are skipped, so a long answer
is not stored four times over. Event ids: ``<response id or Idempotency-Key>:<sequence_number>``,
``…:message`` and ``…:end``; the events before ``response.created`` take the response id too
(named when the body ends), and a body that never gives one (only an ``error`` event) a
digest of itself (see ``base.py``).
"""

from __future__ import annotations

from typing import Any

import orjson

from lastword.adapters.base import Event, ProviderAdapter, RawEvents, StreamStop, check_exact_text, usage_of

#: Known events that add nothing beyond the finished items (SPEC §13): skipped.
SKIPPED = frozenset({
    "response.in_progress",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.done",
    "response.output_text.annotation.added",
    "response.function_call_arguments.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.refusal.delta",
    "response.refusal.done",
})

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: ``incomplete_details.reason`` → §6; any other reason is an ``error`` naming it.
INCOMPLETE_REASONS = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}


class OpenAIResponsesAdapter(ProviderAdapter):
    format = "openai-responses"

    def __init__(self, idempotency_key: str | None = None) -> None:
        super().__init__(idempotency_key)
        self._response_id: str | None = None
        self._items: dict[int, tuple[int, dict[str, Any]]] = {}  # output index → (event index, item)
        self._terminal: tuple[str, dict[str, Any]] | None = None
        self._error: dict[str, Any] | None = None
        self._raw = RawEvents()  # the message's source, as JSON (see ``kept_raw``)
        self._stop = StreamStop(None, None)

    @property
    def stop(self) -> StreamStop:
        return self._stop

    def feed(self, index: int, event: Event) -> list[Event]:
        self.read(event)
        kind = self.need(index, event, "type", str)
        if kind in SKIPPED:
            return []
        number = event.get("sequence_number")
        position = number if isinstance(number, int) and not isinstance(number, bool) else index
        if kind == "response.output_text.delta":
            text = self.need(index, event, "delta", str)
            return [self.chunk("text", text, position, event)]
        if kind == "response.reasoning_summary_text.delta":
            text = self.need(index, event, "delta", str)
            return [self.chunk("reasoning", text, position, event)]
        if kind in ("response.created", "response.queued") or kind in _TERMINAL:
            response = self.need(index, event, "response", dict)
            response_id = self.need(index, response, "id", str, "response.")
            if self._response_id is None:
                self._response_id = response_id
                self.found_id(response_id)
            if kind in _TERMINAL:
                if self._terminal is not None:
                    raise self.refuse(index, "type", f"{kind} after {self._terminal[0]}: one body is one response")
                self._terminal = (kind, response)
                usage = response.get("usage")
                if isinstance(usage, dict):
                    self.counts(index, usage, ("input_tokens", "output_tokens"), "response.usage.")
                    details = usage.get("input_tokens_details")
                    if isinstance(details, dict):
                        self.counts(index, details, ("cached_tokens", "cache_write_tokens"),
                                    "response.usage.input_tokens_details.")
                        cached, total = details.get("cached_tokens"), usage.get("input_tokens")
                        if isinstance(cached, int) and isinstance(total, int) and cached > total:
                            raise self.refuse(index, "response.usage.input_tokens_details.cached_tokens",
                                              "more cached tokens than input tokens")
        elif kind == "response.output_item.done":
            at = self.need(index, event, "output_index", int)
            item = self.need(index, event, "item", dict)
            self.need(index, item, "type", str, "item.")
            self._items[at] = (index, item)
        elif kind == "error":
            self._error = {key: event[key] for key in ("code", "message", "param") if event.get(key) is not None}
            self.need(index, event, "message", str)
        elif kind not in ("response.output_item.added", "response.function_call_arguments.delta"):
            return [self.extension(kind, position, event)]
        self._raw.append(self.kept_raw(index, event))
        return []

    def finish(self, *, end: bool = False) -> list[Event]:
        if self._response_id is None and self._error is None and not self._items:
            return []
        provider, stop_reason, error = self._stopped()
        self._stop = StreamStop(provider, stop_reason, error)
        content: list[dict[str, Any]] = []
        for _, (index, item) in sorted(self._items.items()):
            content.extend(_blocks(index, item))
        message: dict[str, Any] = {"content": content}
        if self._response_id is not None:
            message = {"id": self._response_id, **message}
        usage = _usage(self._terminal[1].get("usage") if self._terminal else None)
        if usage is not None:
            message["usage"] = usage
        if stop_reason is not None:
            message["stopReason"] = stop_reason
        if error is not None:
            message["error"] = error
        made = [self.named({"type": "assistant/message", "message": message}, "message")]
        made[0]["source"] = self.source(self._raw)
        if end and stop_reason is not None:
            turn_end: Event = {"type": "turn/end", "stopReason": stop_reason}
            if error is not None:
                turn_end["error"] = error
            self.named(turn_end, "end")
            turn_end["source"] = self.source([])
            made.append(turn_end)
        return made

    def _stopped(self) -> tuple[str | None, str | None, Any]:
        """(provider's word, §6 stop reason or None when not terminal, error)."""
        if self._error is not None:
            return "error", "error", self._error
        if self._terminal is None:
            return None, None, None  # cut off before its end: the turn stays open
        kind, response = self._terminal
        if kind == "response.completed":
            output = response.get("output")
            items = output if isinstance(output, list) else [item for _, item in self._items.values()]
            if any(isinstance(item, dict) and item.get("type") == "function_call" for item in items):
                return "function_call", None, None
            return "completed", "completed", None
        if kind == "response.incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            if reason in INCOMPLETE_REASONS:
                return reason, INCOMPLETE_REASONS[reason], None
            return reason, "error", {"message": f"the response is incomplete: {reason}"}
        failure = response.get("error")
        error = failure if isinstance(failure, dict) else {"message": "the response failed"}
        return "failed", "error", error


def _blocks(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """The §3 blocks of one finished output item (read from event ``index``)."""
    kind = item["type"]
    if kind == "message":
        blocks: list[dict[str, Any]] = []
        for part in item.get("content") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                block: dict[str, Any] = {"type": "text", "text": part["text"]}
                if part.get("annotations"):
                    block["annotations"] = part["annotations"]
                blocks.append(block)
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                blocks.append({"type": "refusal", "text": part["refusal"]})
            elif isinstance(part.get("type"), str):
                blocks.append(part)
        return blocks
    if kind == "function_call":
        try:
            arguments = orjson.loads(item.get("arguments") or "{}")
        except (orjson.JSONDecodeError, TypeError):
            return []  # cut off mid-arguments: dropped, as an agent loop drops it
        if not isinstance(arguments, dict) or not isinstance(item.get("call_id"), str):
            return []
        check_exact_text(item.get("arguments") or "{}", index, "item.arguments")
        return [{"type": "tool_call", "id": item["call_id"], "name": item.get("name"), "input": arguments}]
    if kind == "reasoning":
        summary = item.get("summary") or []
        texts = [part["text"] for part in summary if isinstance(part, dict) and isinstance(part.get("text"), str)]
        if not "".join(texts):
            # Only encrypted content (no summary asked for): nothing a reader can use, and a
            # reasoning block counts as substantive, so keeping it would let an empty-handed
            # step (cut at max_output_tokens after its reasoning) hide the previous answer.
            return []
        return [{"type": "reasoning", "text": "\n\n".join(texts)}]
    return [item]


def _usage(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = details.get("cached_tokens")
    total = usage.get("input_tokens")
    uncached = total - cached if isinstance(total, int) and isinstance(cached, int) else total
    return usage_of((
        ("inputTokens", uncached),
        ("outputTokens", usage.get("output_tokens")),
        ("cacheReadTokens", cached),
        ("cacheWriteTokens", details.get("cache_write_tokens")),
    ))
