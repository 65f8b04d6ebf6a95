"""Anthropic Messages API streams (SPEC §13, ``anthropic``).

One body is one message: ``message_start``, content blocks (``content_block_start``, deltas,
``content_block_stop``), ``message_delta`` (stop reason, cumulative usage) and
``message_stop``; ``ping`` may come anywhere and is skipped; an ``error`` event may end it.

* Text deltas become ``assistant/chunk`` text deltas as they arrive, thinking deltas
  reasoning deltas (live readers see the thinking; the fold ignores them).
* The end of the body makes one ``assistant/message`` of the assembled blocks. A tool call
  whose input JSON does not parse when the stream stops is dropped, as a real agent loop drops
  it: a stream that stops at max tokens inside its only tool call leaves a usage-only empty
  message, the case of SPEC §1, which the selection rule then does not let hide earlier text.
* Usage is cumulative in the stream: ``message_start``'s, each count overwritten by a non-null
  one in ``message_delta``, never summed.

Event ids: ``<message id or Idempotency-Key>:<position in the body>`` for chunks and unknown
events, ``…:message`` for the message and ``…:end`` for the ``turn/end`` of ``?end=true``; a
body without a ``message_start`` (only an ``error`` event) takes a digest of itself instead of
the message id (see ``base.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from lastword.adapters.base import Event, ProviderAdapter, RawEvents, StreamStop, TextPieces, check_exact_text, chunk, usage_of

#: Stop reasons that end the turn, as §6 values; any other leaves it open.
TERMINAL_STOPS = {
    "end_turn": "completed",
    "stop_sequence": "completed",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}

_USAGE_FIELDS = (
    ("input_tokens", "inputTokens"),
    ("output_tokens", "outputTokens"),
    ("cache_read_input_tokens", "cacheReadTokens"),
    ("cache_creation_input_tokens", "cacheWriteTokens"),
)

_COUNTS = tuple(theirs for theirs, _ in _USAGE_FIELDS)


class _Block:
    """One content block being assembled (deltas kept as :class:`TextPieces`, joined once at the end)."""

    __slots__ = ("start", "parts", "json_parts", "json_index", "signature", "citations")

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.parts = TextPieces()
        self.json_parts = TextPieces()
        self.json_index = -1  # the event of the last input delta, named if the input is refused
        self.signature: str | None = None
        self.citations: list[Any] = []

    def assembled(self) -> dict[str, Any] | None:
        """The block as a §3 block; ``None`` for a tool call whose input never completed."""
        kind = self.start["type"]
        if kind == "text":
            block: dict[str, Any] = {"type": "text", "text": (self.start.get("text") or "") + self.parts.text()}
            citations = list(self.start.get("citations") or []) + self.citations
            if citations:
                block["citations"] = citations
            return block
        if kind == "thinking":
            block = {"type": "reasoning", "text": (self.start.get("thinking") or "") + self.parts.text()}
            signature = self.signature if self.signature is not None else self.start.get("signature")
            if signature:
                block["signature"] = signature
            return block
        if self.json_parts or kind == "tool_use":
            text = self.json_parts.text()
            if text:
                try:
                    value = orjson.loads(text)
                except orjson.JSONDecodeError:
                    return None  # cut off mid-input: dropped, as an agent loop drops it
                check_exact_text(text, self.json_index, "delta.partial_json")
            else:
                value = self.start.get("input", {})
            if not isinstance(value, dict):
                return None
            if kind == "tool_use":
                return {"type": "tool_call", "id": self.start.get("id"), "name": self.start.get("name"), "input": value}
            return {**self.start, "input": value}
        return self.start  # redacted_thinking, server tool results, …: kept as sent


class AnthropicAdapter(ProviderAdapter):
    format = "anthropic"

    def __init__(self, idempotency_key: str | None = None) -> None:
        super().__init__(idempotency_key)
        self._message_id: str | None = None
        self._started = False
        self._stopped = False
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._stop_details: Any = None
        self._error: Any = None
        self._raw = RawEvents()  # the message's source: every raw event not in a chunk's
        self._stop = StreamStop(None, None)

    @property
    def stop(self) -> StreamStop:
        return self._stop

    def feed(self, index: int, event: Event) -> list[Event]:
        made: list[Event] = []
        self.feed_many(((index, event),), made, [])
        return made

    def feed_many(self, batch: Iterable[tuple[int, Event]], made: list[Event], origins: list[int]) -> None:
        blocks = self._blocks
        for index, event in batch:
            if event.get("type") == "content_block_delta" and not self._stopped:
                # The hot path (most of a stream): a text delta of a started text block.
                delta, at = event.get("delta"), event.get("index")
                block = blocks.get(at) if type(at) is int else None
                if (block is not None and type(delta) is dict and delta.get("type") == "text_delta"
                        and type(text := delta.get("text")) is str and block.start["type"] == "text"):
                    # A started block means message_start came, so the id's base is known (read()
                    # would only count the event).
                    self.events_read += 1
                    block.parts.append(text)
                    made.append(chunk("text", text, f"{self._base}:{index}", {"format": "anthropic", "events": [event]}))
                    origins.append(index)
                    continue
            events = self._feed(index, event)
            made += events
            origins += [index] * len(events)

    def _feed(self, index: int, event: Event) -> list[Event]:
        """:meth:`feed` of any event but a text delta of a started text block."""
        self.read(event)
        kind = self.need(index, event, "type", str)
        if kind == "ping":
            return []
        if kind == "error":
            self._error = self.need(index, event, "error", dict)
            self._raw.append(self.kept_raw(index, event))
            return []
        if kind == "message_start":
            if self._started:
                raise self.refuse(index, "type", "a second message_start: one body is one model call")
            message = self.need(index, event, "message", dict)
            self._message_id = self.need(index, message, "id", str, "message.")
            self.found_id(self._message_id)
            self._usage = dict(self.optional(index, message, "usage", dict, "message.") or {})
            self.counts(index, self._usage, _COUNTS, "message.usage.")
            self._started = True
            self._raw.append(self.kept_raw(index, event))
            return []
        if kind not in _MESSAGE_EVENTS:
            return [self.extension(kind, index, event)]
        if not self._started:
            raise self.refuse(index, "type", f"{kind} before message_start")
        if self._stopped:
            raise self.refuse(index, "type", f"{kind} after message_stop")
        if kind == "content_block_delta":
            return self._delta(index, event)
        self._raw.append(self.kept_raw(index, event))
        if kind == "content_block_start":
            at = self.need(index, event, "index", int)
            block = self.need(index, event, "content_block", dict)
            self.need(index, block, "type", str, "content_block.")
            if at in self._blocks:
                raise self.refuse(index, "index", f"content block {at} started twice")
            self._blocks[at] = _Block(block)
        elif kind == "content_block_stop":
            self._block(index, event)
        elif kind == "message_delta":
            delta = self.need(index, event, "delta", dict)
            reason = self.optional(index, delta, "stop_reason", str, "delta.")
            if reason is not None:
                self._stop_reason = reason
            if delta.get("stop_details") is not None:
                self._stop_details = delta["stop_details"]
            usage = self.optional(index, event, "usage", dict) or {}
            self.counts(index, usage, _COUNTS, "usage.")
            # Cumulative counts: a non-null value replaces the one before, never adds to it.
            self._usage.update((key, value) for key, value in usage.items() if value is not None)
        else:  # message_stop
            self._stopped = True
        return []

    def _block(self, index: int, event: Event) -> _Block:
        at = self.need(index, event, "index", int)
        if at not in self._blocks:
            raise self.refuse(index, "index", f"no content block {at} was started")
        return self._blocks[at]

    def _delta(self, index: int, event: Event) -> list[Event]:
        block = self._block(index, event)
        delta = self.need(index, event, "delta", dict)
        kind = self.need(index, delta, "type", str, "delta.")
        if kind == "text_delta":
            text = self.need(index, delta, "text", str, "delta.")
            block.parts.append(text)
            return [self.chunk("text", text, index, event)]
        if kind == "thinking_delta":
            text = self.need(index, delta, "thinking", str, "delta.")
            block.parts.append(text)
            return [self.chunk("reasoning", text, index, event)]
        self._raw.append(self.kept_raw(index, event))
        if kind == "input_json_delta":
            block.json_parts.append(self.need(index, delta, "partial_json", str, "delta."))
            block.json_index = index
        elif kind == "signature_delta":
            block.signature = self.need(index, delta, "signature", str, "delta.")
        elif kind == "citations_delta":
            block.citations.append(delta.get("citation"))
        return []

    def finish(self, *, end: bool = False) -> list[Event]:
        if not self._started and self._error is None:
            return []
        stop_reason = TERMINAL_STOPS.get(self._stop_reason or "")
        if self._error is not None:
            stop_reason = "error"
        self._stop = StreamStop(self._stop_reason or ("error" if self._error is not None else None),
                                stop_reason, self._error)
        content = [block for block in (b.assembled() for _, b in sorted(self._blocks.items())) if block is not None]
        message: dict[str, Any] = {"content": content}
        if self._message_id is not None:
            message = {"id": self._message_id, **message}
        usage = usage_of((ours, self._usage.get(theirs)) for theirs, ours in _USAGE_FIELDS)
        if usage is not None:
            message["usage"] = usage
        if stop_reason is not None or self._stop_reason is not None:
            message["stopReason"] = stop_reason or self._stop_reason
        if self._stop_details is not None:
            message["stopDetails"] = self._stop_details
        if self._error is not None:
            message["error"] = self._error
        made = [self.named({"type": "assistant/message", "message": message}, "message")]
        made[0]["source"] = self.source(self._raw)
        if end and stop_reason is not None:
            turn_end: Event = {"type": "turn/end", "stopReason": stop_reason}
            if self._error is not None:
                turn_end["error"] = self._error
            self.named(turn_end, "end")
            turn_end["source"] = self.source([])
            made.append(turn_end)
        return made


_MESSAGE_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"})
