"""Agent Client Protocol streams (SPEC §13, ``acp``): JSON-RPC 2.0 messages of one prompt turn.

The body is read as ACP v1 unless it says otherwise: the ``initialize`` response in it (a result
holding ``protocolVersion``) names the version agreed, else ``?acpVersion=`` does.

Both versions:

* ``session/update`` notifications: ``agent_message_chunk`` with text content → a text delta,
  ``agent_thought_chunk`` with text → a reasoning delta, tool call updates → ``x-acp-tool-call``,
  every other kind → ``x-acp-<kind>`` (``_`` written ``-``), holding the update as ``update``.
* Other requests, notifications and responses are kept as ``x-acp-<method>`` and
  ``x-acp-response``.

v1: the response to ``session/prompt`` (a result holding ``stopReason``) is the ``turn/end``, with
the response's ``usage`` when present: it ends the turn without ``?end=true``. An error response
to a ``session/prompt`` request that is in the same body ends the turn with ``error``; any other
error response is kept as ``x-acp-error``. Nothing may follow the prompt's response. ACP v1 has
no complete assistant messages, so a turn's output comes from its chunk text.

v2: the prompt's response only accepts the prompt (kept as ``x-acp-response``); the turn ends at
the first ``state_update`` to ``idle`` that carries a stop reason, and what follows it in the
body (a background subagent's updates, a repeated idle snapshot) is kept as ``x-acp-<kind>``
events that neither end nor change the turn: its ``turn/end`` is stored when the body ends,
after them. Updates are upserts by id: an agent message is assembled from its chunks (appended)
and ``agent_message`` updates (``content`` replaces, ``null`` clears, omitted leaves it) and
stored as an ``assistant/message`` when the turn ends (or the body does); a tool call's
``x-acp-tool-call`` events carry its state so far as ``toolCall``.

Notifications carry no ids fit for events, so event ids are ``<Idempotency-Key>:<position in the
body>``, and without the header ``body-<digest of the body and its turn>:<position>`` (see
``base.py``); v2 messages are ``<base>:message:<n>``, n counting messages in the order they first
appeared. A retried body is all duplicates either way.
"""

from __future__ import annotations

from typing import Any

from lastword.adapters.base import Event, ProviderAdapter, StreamStop, TextPieces, usage_of
from lastword.rules.stop_reasons import normalise_stop_reason

_CHUNKS = {"agent_message_chunk": "text", "agent_thought_chunk": "reasoning"}
#: The update kinds of one tool call: logged as ``x-acp-tool-call`` (v1's ``tool_call`` and
#: ``tool_call_update``; v2's upsert and its content chunks).
_TOOL_CALL = ("tool_call", "tool_call_update", "tool_call_content_chunk")
#: The protocol version read as v2 (any other is read as v1, the default).
V2 = 2


def _slug(name: str) -> str:
    return name.replace("/", "-").replace("_", "-")


class _Message:
    """A v2 agent message being assembled: its blocks, a run of chunk text open at the end."""

    __slots__ = ("id", "parts", "raw")

    def __init__(self, message_id: str) -> None:
        self.id = message_id
        self.parts: list[Event | TextPieces] = []
        #: The raw events that made it and made no chunk (upserts, chunks of other content).
        self.raw: list[Event] = []

    def append_text(self, text: str) -> None:
        last = self.parts[-1] if self.parts else None
        if not isinstance(last, TextPieces):
            last = TextPieces()
            self.parts.append(last)
        last.append(text)

    def content(self) -> list[Event]:
        return [{"type": "text", "text": part.text()} if isinstance(part, TextPieces) else part
                for part in self.parts]


class ACPAdapter(ProviderAdapter):
    format = "acp"

    def __init__(self, idempotency_key: str | None = None, *, version: int | None = None) -> None:
        super().__init__(idempotency_key)
        self._version = version
        self._prompt_ids: list[Any] = []
        self._ended_at: int | None = None
        self._stop = StreamStop(None, None)
        # v2: the messages of the turn by id (in the order they appeared), the tool calls'
        # states by id, and the turn's end, stored when the body ends.
        self._messages: dict[str, _Message] = {}
        self._tool_calls: dict[str, Event] = {}
        self._turn_end: tuple[Event, Event] | None = None

    @property
    def stop(self) -> StreamStop:
        return self._stop

    @property
    def _v2(self) -> bool:
        return self._version == V2

    def feed(self, index: int, event: Event) -> list[Event]:
        self.read(event)
        if event.get("jsonrpc") != "2.0":
            raise self.refuse(index, "jsonrpc", 'expected "2.0"')
        if self._ended_at is not None and not self._v2:
            raise self.refuse(index, "id", f"a message after the prompt response (event {self._ended_at})")
        method = event.get("method")
        if method is not None:
            self.need(index, event, "method", str)
            if method == "session/update":
                return self._update(index, event)
            if method == "session/prompt" and event.get("id") is not None:
                self._prompt_ids.append(event["id"])
            return [self.extension(_slug(method), index, event)]
        if "result" in event:
            result = event["result"]
            if isinstance(result, dict):
                agreed = result.get("protocolVersion")
                if type(agreed) is int:  # the initialize response: the version both sides speak
                    self._version = agreed
                if "stopReason" in result and not self._v2:
                    return [self._prompt_response(index, event, result)]
            return [self.extension("response", index, event)]
        if "error" in event:
            error = self.need(index, event, "error", dict)
            # In v2 a refused prompt was never inserted: it ends no work of the agent's.
            if event.get("id") is not None and event.get("id") in self._prompt_ids and not self._v2:
                self._ended_at = index
                self._stop = StreamStop("error", "error", error)
                turn_end: Event = {"type": "turn/end", "stopReason": "error", "error": error}
                return [self._sourced(turn_end, index, event)]
            return [self.extension("error", index, event)]
        raise self.refuse(index, "method", "a JSON-RPC message has a method, a result or an error")

    def _sourced(self, event: Event, index: int | str, raw: Event) -> Event:
        self.named(event, index)
        event["source"] = self.source([raw])
        return event

    def _update(self, index: int, event: Event) -> list[Event]:
        params = self.need(index, event, "params", dict)
        update = self.need(index, params, "update", dict, "params.")
        kind = self.need(index, update, "sessionUpdate", str, "params.update.")
        if kind in _TOOL_CALL:
            fields: Event = {"update": update}
            if self._v2:
                fields["toolCall"] = self._tool_call(index, kind, update)
            return [self.extension("tool-call", index, event, **fields)]
        if self._v2:
            if self._ended_at is not None:  # after the turn: background work, kept as it came
                return [self.extension(_slug(kind), index, event, update=update)]
            if kind == "state_update":
                return self._state(index, event, update)
            if kind in ("agent_message_chunk", "agent_message"):
                return self._message_update(index, event, kind, update)
        if kind in _CHUNKS:
            content = self.need(index, update, "content", dict, "params.update.")
            if content.get("type") == "text":
                text = self.need(index, content, "text", str, "params.update.content.")
                return [self.chunk(_CHUNKS[kind], text, index, event)]
        return [self.extension(_slug(kind), index, event, update=update)]

    # -- v1 -------------------------------------------------------------------------------------

    def _prompt_response(self, index: int, event: Event, result: dict[str, Any]) -> Event:
        provider = self.need(index, result, "stopReason", str, "result.")
        try:
            stop_reason = normalise_stop_reason(provider)
        except ValueError as error:
            raise self.refuse(index, "result.stopReason", str(error)) from None
        self._ended_at = index
        self._stop = StreamStop(provider, stop_reason)
        turn_end: Event = {"type": "turn/end", "stopReason": stop_reason}
        raw_usage = self.optional(index, result, "usage", dict, "result.")
        if raw_usage is not None:
            self.counts(index, raw_usage, ("inputTokens", "outputTokens", "cachedReadTokens", "cachedWriteTokens"),
                        "result.usage.")
            usage = usage_of((
                ("inputTokens", raw_usage.get("inputTokens")),
                ("outputTokens", raw_usage.get("outputTokens")),
                ("cacheReadTokens", raw_usage.get("cachedReadTokens")),
                ("cacheWriteTokens", raw_usage.get("cachedWriteTokens")),
            ))
            if usage is not None:
                turn_end["usage"] = usage
        return self._sourced(turn_end, index, event)

    # -- v2 -------------------------------------------------------------------------------------

    def _state(self, index: int, event: Event, update: Event) -> list[Event]:
        """A ``state_update``: the first ``idle`` one with a stop reason ends the turn.

        The protocol lets an idle update that ends no work omit its stop reason, and has a
        receiver treat a reason that is not a string as not reported: such an update ends nothing.
        """
        provider = update.get("stopReason")
        if update.get("state") != "idle" or not isinstance(provider, str):
            return [self.extension("state-update", index, event, update=update)]
        self._ended_at = index
        turn_end: Event = {"type": "turn/end"}
        try:
            stop_reason = normalise_stop_reason(provider)
        except ValueError:  # a custom or later reason: the work ended, for a reason we cannot tell
            stop_reason = "error"
            turn_end["error"] = {"message": f"the agent stopped for a reason ACP v2 does not define: {provider}"}
        turn_end["stopReason"] = stop_reason
        error = update.get("error")
        if stop_reason == "error" and isinstance(error, dict):
            turn_end["error"] = error
        self._stop = StreamStop(provider, stop_reason, turn_end.get("error"))
        # Named when it is made, at the body's end: an event is named in the order it is made.
        self._turn_end = (turn_end, event)
        return self._stored_messages()

    def _message_update(self, index: int, event: Event, kind: str, update: Event) -> list[Event]:
        message_id = self.need(index, update, "messageId", str, "params.update.")
        message = self._messages.get(message_id)
        if message is None:
            message = self._messages[message_id] = _Message(message_id)
        if kind == "agent_message":
            message.raw.append(event)
            if "content" in update:
                content = update["content"]
                if content is None:
                    message.parts = []
                elif isinstance(content, list):
                    message.parts = [block for block in content if _is_block(block)]
            return []
        content = self.need(index, update, "content", dict, "params.update.")
        if content.get("type") == "text":
            text = self.need(index, content, "text", str, "params.update.content.")
            message.append_text(text)
            return [self.chunk("text", text, index, event)]
        message.raw.append(event)
        if _is_block(content):
            message.parts.append(content)
        return []

    def _stored_messages(self) -> list[Event]:
        """The turn's messages, once, in the order they first appeared."""
        stored = []
        for number, message in enumerate(self._messages.values()):
            made: Event = {"type": "assistant/message", "message": {"id": message.id, "content": message.content()}}
            self.named(made, f"message:{number}")
            made["source"] = self.source(message.raw)
            stored.append(made)
        self._messages = {}
        return stored

    def _tool_call(self, index: int, kind: str, update: Event) -> Event:
        """The tool call's state after ``update``: a field sent replaces, ``null`` clears (the
        field is left out, its protocol default applies), an omitted one is unchanged; a content
        chunk appends its item; ``_meta`` is patched key by key."""
        tool_call_id = self.need(index, update, "toolCallId", str, "params.update.")
        state = self._tool_calls.setdefault(tool_call_id, {"toolCallId": tool_call_id})
        if kind == "tool_call_content_chunk":
            state["content"] = [*state.get("content", []), update.get("content")]
            return dict(state)
        for key, value in update.items():
            if key == "sessionUpdate":  # (the id, sent again, is the same)
                continue
            if value is None:
                state.pop(key, None)
            elif key == "_meta" and isinstance(value, dict):
                meta = {**state.get("_meta", {}), **value}
                state["_meta"] = {name: item for name, item in meta.items() if item is not None}
            else:
                state[key] = value
        return dict(state)

    def finish(self, *, end: bool = False) -> list[Event]:
        # v1: the prompt response ended the turn itself, nothing waits for the body's end. v2: the
        # messages of a turn cut off before its end, or the end read earlier, stored last so that
        # what followed it in the body stays in the turn.
        stored = self._stored_messages()
        if self._turn_end is not None:
            turn_end, raw = self._turn_end
            stored.append(self._sourced(turn_end, "end", raw))
        return stored


def _is_block(value: Any) -> bool:
    """A content block lastword can store: an object with a string ``type`` (a text block with
    its ``text``). The protocol has a receiver skip a content item it cannot read."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return False
    return value["type"] != "text" or isinstance(value.get("text"), str)
