"""Provider streams built with the providers' own SDK types, serialised as those SDKs serialise them.

Every event here is an instance of the SDK's model (``anthropic``'s ``Raw*Event``, ``openai``'s
``responses`` stream events, ``agent-client-protocol``'s ``schema``), so a field the provider
does not send cannot creep into a fixture. ``sse``/``ndjson``/``json_array`` turn them into the
bodies a producer forwards; the SDKs' own accumulators (``anthropic_text``/``openai_text``) are
the oracle for the text a stream assembles.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import acp.schema as acp_schema
import anthropic.types as at
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types.raw_message_delta_event import Delta as MessageDeltaBody
from anthropic.types.shared import ErrorResponse, OverloadedError
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types import responses as ot
from openai.types.responses.response_reasoning_item import Summary
from pydantic import BaseModel

Provider = Any  # an SDK model instance (each SDK has its own base class)


# -- bodies -------------------------------------------------------------------------------------

def as_dict(event: Provider) -> dict[str, Any]:
    """One event as its SDK serialises it (the wire JSON)."""
    if isinstance(event, dict):
        return event
    if hasattr(event, "to_dict"):  # anthropic and openai: their own to_dict (unset fields left out)
        return dict(event.to_dict())
    assert isinstance(event, BaseModel)
    return event.model_dump(mode="json", by_alias=True, exclude_none=True)


def sse(events: Sequence[Provider]) -> bytes:
    """A ``text/event-stream`` body as the provider sends it: ``event:`` name, one ``data:`` line."""
    out = []
    for event in events:
        data = as_dict(event)
        name = data.get("type") or data.get("method") or "message"
        out.append(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n")
    return "".join(out).encode()


def ndjson(events: Sequence[Provider]) -> bytes:
    return b"".join(json.dumps(as_dict(event)).encode() + b"\n" for event in events)


def json_array(events: Sequence[Provider]) -> bytes:
    return json.dumps([as_dict(event) for event in events]).encode()


CONTENT_TYPES = {"sse": "text/event-stream", "ndjson": "application/x-ndjson", "json": "application/json"}
BODIES = {"sse": sse, "ndjson": ndjson, "json": json_array}


# -- Anthropic ----------------------------------------------------------------------------------

def a_text(*deltas: str) -> tuple[str, tuple[str, ...]]:
    return ("text", deltas)


def a_thinking(*deltas: str, signature: str = "sig-1") -> tuple[str, tuple[str, ...], str]:
    return ("thinking", deltas, signature)


def a_tool(tool_id: str, name: str, *json_pieces: str) -> tuple[str, str, str, tuple[str, ...]]:
    return ("tool_use", tool_id, name, json_pieces)


def anthropic_stream(
    message_id: str,
    blocks: Sequence[tuple[Any, ...]],
    *,
    stop_reason: str | None = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 20,
    cache_read: int | None = None,
    cache_write: int | None = None,
    stop_details: Any = None,
    cut_after: int | None = None,
    error: str | None = None,
    pings: bool = True,
) -> list[Provider]:
    """A Messages stream: ``message_start``, the blocks, ``message_delta``, ``message_stop``.

    ``cut_after`` keeps only that many events (a stream cut off); ``error`` ends the stream
    with an ``error`` event after the blocks instead of ``message_delta``/``message_stop``.
    """
    usage = at.Usage(input_tokens=input_tokens, output_tokens=1,
                     cache_read_input_tokens=cache_read, cache_creation_input_tokens=cache_write)
    message = at.Message(id=message_id, type="message", role="assistant", model="claude-test", content=[],
                         stop_reason=None, stop_sequence=None, usage=usage)
    events: list[Provider] = [at.RawMessageStartEvent(type="message_start", message=message)]
    if pings:
        events.append(_ping())
    for index, block in enumerate(blocks):
        kind = block[0]
        if kind == "text":
            start: Any = at.TextBlock(type="text", text="")
            deltas: list[Any] = [at.TextDelta(type="text_delta", text=text) for text in block[1]]
        elif kind == "thinking":
            start = at.ThinkingBlock(type="thinking", thinking="", signature="")
            deltas = [at.ThinkingDelta(type="thinking_delta", thinking=text) for text in block[1]]
            deltas.append(at.SignatureDelta(type="signature_delta", signature=block[2]))
        else:
            start = at.ToolUseBlock(type="tool_use", id=block[1], name=block[2], input={})
            deltas = [at.InputJSONDelta(type="input_json_delta", partial_json=piece) for piece in block[3]]
        events.append(at.RawContentBlockStartEvent(type="content_block_start", index=index, content_block=start))
        events.extend(at.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=d) for d in deltas)
        events.append(at.RawContentBlockStopEvent(type="content_block_stop", index=index))
    if error is not None:
        events.append(ErrorResponse(type="error", error=OverloadedError(type="overloaded_error", message=error)))
    else:
        events.append(at.RawMessageDeltaEvent(
            type="message_delta",
            delta=MessageDeltaBody(stop_reason=stop_reason, stop_sequence=None, stop_details=stop_details),
            usage=at.MessageDeltaUsage(output_tokens=output_tokens),
        ))
        events.append(at.RawMessageStopEvent(type="message_stop"))
    return events[:cut_after] if cut_after is not None else events


def _ping() -> dict[str, Any]:
    """``ping`` has no SDK model (the SDK skips it on the wire); this is its documented shape."""
    return {"type": "ping"}


def anthropic_text(events: Sequence[Provider]) -> str:
    """The text the SDK's own message accumulator assembles from ``events``."""
    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for event in events:
        data = as_dict(event)
        if data["type"] in ("ping", "error"):
            continue
        snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=json_bufs)  # type: ignore[arg-type]
    if snapshot is None:
        return ""
    return "".join(block.text for block in snapshot.content if block.type == "text")


# -- OpenAI Responses ---------------------------------------------------------------------------

class OpenAIStream:
    """Builds a Responses stream; sequence numbers are assigned in order."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self.events: list[Provider] = []
        self.output: list[Any] = []  # the finished items, as the terminal response lists them
        self._items = 0  # items added (finished or not): the next output_index

    def _n(self) -> int:
        return len(self.events)

    def _next(self, prefix: str) -> tuple[int, str]:
        self._items += 1
        return self._items - 1, f"{prefix}_{self._items - 1}"

    def response(self, status: str, **extra: Any) -> ot.Response:
        return ot.Response(
            id=self.response_id, object="response", created_at=0, model="gpt-test", output=list(self.output),
            parallel_tool_calls=True, tool_choice="auto", tools=[], status=status, **extra,
        )

    def created(self) -> OpenAIStream:
        self.events.append(ot.ResponseCreatedEvent(type="response.created", sequence_number=self._n(),
                                                   response=self.response("in_progress")))
        self.events.append(ot.ResponseInProgressEvent(type="response.in_progress", sequence_number=self._n(),
                                                      response=self.response("in_progress")))
        return self

    def message(self, *deltas: str, refusal: str | None = None, done: bool = True) -> OpenAIStream:
        at_index, item_id = self._next("msg")
        self.events.append(ot.ResponseOutputItemAddedEvent(
            type="response.output_item.added", sequence_number=self._n(), output_index=at_index,
            item=ot.ResponseOutputMessage(id=item_id, type="message", role="assistant", status="in_progress", content=[])))
        parts: list[Any] = []
        if deltas:
            self.events.append(ot.ResponseContentPartAddedEvent(
                type="response.content_part.added", sequence_number=self._n(), item_id=item_id, output_index=at_index,
                content_index=0, part=ot.ResponseOutputText(type="output_text", text="", annotations=[])))
            for text in deltas:
                self.events.append(ot.ResponseTextDeltaEvent(
                    type="response.output_text.delta", sequence_number=self._n(), item_id=item_id,
                    output_index=at_index, content_index=0, delta=text, logprobs=[]))
            whole = "".join(deltas)
            self.events.append(ot.ResponseTextDoneEvent(
                type="response.output_text.done", sequence_number=self._n(), item_id=item_id, output_index=at_index,
                content_index=0, text=whole, logprobs=[]))
            part = ot.ResponseOutputText(type="output_text", text=whole, annotations=[])
            self.events.append(ot.ResponseContentPartDoneEvent(
                type="response.content_part.done", sequence_number=self._n(), item_id=item_id, output_index=at_index,
                content_index=0, part=part))
            parts.append(part)
        if refusal is not None:
            self.events.append(ot.ResponseRefusalDeltaEvent(
                type="response.refusal.delta", sequence_number=self._n(), item_id=item_id, output_index=at_index,
                content_index=len(parts), delta=refusal))
            self.events.append(ot.ResponseRefusalDoneEvent(
                type="response.refusal.done", sequence_number=self._n(), item_id=item_id, output_index=at_index,
                content_index=len(parts), refusal=refusal))
            parts.append(ot.ResponseOutputRefusal(type="refusal", refusal=refusal))
        if done:
            item = ot.ResponseOutputMessage(id=item_id, type="message", role="assistant", status="completed", content=parts)
            self.events.append(ot.ResponseOutputItemDoneEvent(
                type="response.output_item.done", sequence_number=self._n(), output_index=at_index, item=item))
            self.output.append(item)
        return self

    def function_call(self, call_id: str, name: str, *pieces: str, done: bool = True) -> OpenAIStream:
        at_index, item_id = self._next("fc")
        self.events.append(ot.ResponseOutputItemAddedEvent(
            type="response.output_item.added", sequence_number=self._n(), output_index=at_index,
            item=ot.ResponseFunctionToolCall(type="function_call", id=item_id, call_id=call_id, name=name,
                                             arguments="", status="in_progress")))
        for piece in pieces:
            self.events.append(ot.ResponseFunctionCallArgumentsDeltaEvent(
                type="response.function_call_arguments.delta", sequence_number=self._n(), item_id=item_id,
                output_index=at_index, delta=piece))
        if done:
            arguments = "".join(pieces)
            self.events.append(ot.ResponseFunctionCallArgumentsDoneEvent(
                type="response.function_call_arguments.done", sequence_number=self._n(), item_id=item_id,
                output_index=at_index, arguments=arguments, name=name))
            item = ot.ResponseFunctionToolCall(type="function_call", id=item_id, call_id=call_id, name=name,
                                               arguments=arguments, status="completed")
            self.events.append(ot.ResponseOutputItemDoneEvent(
                type="response.output_item.done", sequence_number=self._n(), output_index=at_index, item=item))
            self.output.append(item)
        return self

    def reasoning(self, *deltas: str) -> OpenAIStream:
        at_index, item_id = self._next("rs")
        self.events.append(ot.ResponseOutputItemAddedEvent(
            type="response.output_item.added", sequence_number=self._n(), output_index=at_index,
            item=ot.ResponseReasoningItem(type="reasoning", id=item_id, summary=[])))
        for text in deltas:
            self.events.append(ot.ResponseReasoningSummaryTextDeltaEvent(
                type="response.reasoning_summary_text.delta", sequence_number=self._n(), item_id=item_id,
                output_index=at_index, summary_index=0, delta=text))
        summary = [Summary(type="summary_text", text="".join(deltas))] if deltas else []
        item = ot.ResponseReasoningItem(type="reasoning", id=item_id, summary=summary,
                                        encrypted_content="opaque")
        self.events.append(ot.ResponseOutputItemDoneEvent(
            type="response.output_item.done", sequence_number=self._n(), output_index=at_index, item=item))
        self.output.append(item)
        return self

    def usage(self, input_tokens: int, output_tokens: int, cached: int = 0, cache_write: int = 0) -> ot.ResponseUsage:
        return ot.ResponseUsage(
            input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens,
            input_tokens_details={"cached_tokens": cached, "cache_write_tokens": cache_write},
            output_tokens_details={"reasoning_tokens": 0},
        )

    def completed(self, usage: ot.ResponseUsage) -> list[Provider]:
        self.events.append(ot.ResponseCompletedEvent(type="response.completed", sequence_number=self._n(),
                                                     response=self.response("completed", usage=usage)))
        return self.events

    def incomplete(self, reason: str, usage: ot.ResponseUsage) -> list[Provider]:
        self.events.append(ot.ResponseIncompleteEvent(
            type="response.incomplete", sequence_number=self._n(),
            response=self.response("incomplete", usage=usage, incomplete_details={"reason": reason})))
        return self.events

    def failed(self, code: str, message: str) -> list[Provider]:
        self.events.append(ot.ResponseFailedEvent(
            type="response.failed", sequence_number=self._n(),
            response=self.response("failed", error={"code": code, "message": message})))
        return self.events

    def error(self, message: str, code: str = "server_error") -> list[Provider]:
        self.events.append(ot.ResponseErrorEvent(type="error", sequence_number=self._n(), code=code, message=message,
                                                 param=None))
        return self.events


def openai_text(events: Sequence[Provider]) -> str:
    """The text the SDK's own Responses stream state assembles from ``events``."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        if event.type != "error":
            state.handle_event(event)
    snapshot = state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]
    if snapshot is None:
        return ""
    return "".join(part.text for item in snapshot.output if item.type == "message"
                   for part in item.content if part.type == "output_text")


# -- ACP ----------------------------------------------------------------------------------------

def acp_update(update: Any, session_id: str = "sess-1") -> dict[str, Any]:
    """A ``session/update`` notification, serialised as the ACP SDK serialises params."""
    notification = acp_schema.SessionNotification(session_id=session_id, update=update)
    return {"jsonrpc": "2.0", "method": "session/update",
            "params": notification.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)}


def acp_message(text: str) -> dict[str, Any]:
    return acp_update(acp_schema.AgentMessageChunk(
        session_update="agent_message_chunk", content=acp_schema.TextContentBlock(type="text", text=text)))


def acp_thought(text: str) -> dict[str, Any]:
    return acp_update(acp_schema.AgentThoughtChunk(
        session_update="agent_thought_chunk", content=acp_schema.TextContentBlock(type="text", text=text)))


def acp_tool_call(tool_call_id: str, title: str) -> dict[str, Any]:
    return acp_update(acp_schema.ToolCallStart(session_update="tool_call", tool_call_id=tool_call_id, title=title))


def acp_tool_call_done(tool_call_id: str) -> dict[str, Any]:
    return acp_update(acp_schema.ToolCallProgress(session_update="tool_call_update", tool_call_id=tool_call_id,
                                                  status="completed"))


def acp_prompt_response(request_id: int, stop_reason: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    response = acp_schema.PromptResponse(
        stop_reason=stop_reason, usage=acp_schema.Usage(**usage) if usage is not None else None)
    return {"jsonrpc": "2.0", "id": request_id,
            "result": response.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)}


def acp_text(events: Sequence[dict[str, Any]]) -> str:
    """The agent's message text, read back through the SDK's own notification model."""
    parts = []
    for event in events:
        if event.get("method") == "session/update":
            update = acp_schema.SessionNotification.model_validate(event["params"]).update
            if isinstance(update, acp_schema.AgentMessageChunk) and isinstance(update.content, acp_schema.TextContentBlock):
                parts.append(update.content.text)
    return "".join(parts)
