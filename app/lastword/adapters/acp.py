"""Agent Client Protocol streams (SPEC §13, ``acp``): JSON-RPC 2.0 messages of one prompt turn.

* ``session/update`` notifications: ``agent_message_chunk`` with text content → a text delta,
  ``agent_thought_chunk`` with text → a reasoning delta, ``tool_call`` / ``tool_call_update`` →
  ``x-acp-tool-call``, every other kind → ``x-acp-<kind>`` (``_`` written ``-``), holding the
  update as ``update``.
* The response to ``session/prompt`` (a result holding ``stopReason``) is the ``turn/end``,
  with the response's ``usage`` when present: it ends the turn without ``?end=true``. An
  error response to a ``session/prompt`` request that is in the same body ends the turn with
  ``error``; any other error response is kept as ``x-acp-error``.
* Other requests, notifications and responses are kept as ``x-acp-<method>`` and
  ``x-acp-response``.

ACP has no complete assistant messages, so a turn's output comes from its chunk text. Its
notifications carry no ids, so event ids are ``<Idempotency-Key>:<position in the body>``, and
without the header ``body-<digest of the body and its turn>:<position>`` (see ``base.py``): a
retried body is all duplicates either way.
"""

from __future__ import annotations

from typing import Any

from lastword.adapters.base import Event, ProviderAdapter, StreamStop, usage_of
from lastword.rules.stop_reasons import normalise_stop_reason

_CHUNKS = {"agent_message_chunk": "text", "agent_thought_chunk": "reasoning"}


def _slug(name: str) -> str:
    return name.replace("/", "-").replace("_", "-")


class ACPAdapter(ProviderAdapter):
    format = "acp"

    def __init__(self, idempotency_key: str | None = None) -> None:
        super().__init__(idempotency_key)
        self._prompt_ids: list[Any] = []
        self._ended_at: int | None = None
        self._stop = StreamStop(None, None)

    @property
    def stop(self) -> StreamStop:
        return self._stop

    def feed(self, index: int, event: Event) -> list[Event]:
        self.read(event)
        if event.get("jsonrpc") != "2.0":
            raise self.refuse(index, "jsonrpc", 'expected "2.0"')
        if self._ended_at is not None:
            raise self.refuse(index, "id", f"a message after the prompt response (event {self._ended_at})")
        method = event.get("method")
        if method is not None:
            self.need(index, event, "method", str)
            if method == "session/update":
                return [self._update(index, event)]
            if method == "session/prompt" and event.get("id") is not None:
                self._prompt_ids.append(event["id"])
            return [self.extension(_slug(method), index, event)]
        if "result" in event:
            result = event["result"]
            if isinstance(result, dict) and "stopReason" in result:
                return [self._prompt_response(index, event, result)]
            return [self.extension("response", index, event)]
        if "error" in event:
            error = self.need(index, event, "error", dict)
            if event.get("id") is not None and event.get("id") in self._prompt_ids:
                self._ended_at = index
                self._stop = StreamStop("error", "error", error)
                turn_end: Event = {"type": "turn/end", "stopReason": "error", "error": error}
                return [self._sourced(turn_end, index, event)]
            return [self.extension("error", index, event)]
        raise self.refuse(index, "method", "a JSON-RPC message has a method, a result or an error")

    def _sourced(self, event: Event, index: int, raw: Event) -> Event:
        self.named(event, index)
        event["source"] = self.source([raw])
        return event

    def _update(self, index: int, event: Event) -> Event:
        params = self.need(index, event, "params", dict)
        update = self.need(index, params, "update", dict, "params.")
        kind = self.need(index, update, "sessionUpdate", str, "params.update.")
        if kind in _CHUNKS:
            content = self.need(index, update, "content", dict, "params.update.")
            if content.get("type") == "text":
                text = self.need(index, content, "text", str, "params.update.content.")
                return self.chunk(_CHUNKS[kind], text, index, event)
        name = "tool-call" if kind in ("tool_call", "tool_call_update") else _slug(kind)
        return self.extension(name, index, event, update=update)

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

    def finish(self, *, end: bool = False) -> list[Event]:
        return []  # the prompt response ends the turn itself; nothing waits for the body's end
