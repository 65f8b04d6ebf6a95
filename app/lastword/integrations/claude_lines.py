"""The Claude Agent SDK's typed messages written back as the stream-json lines Claude Code printed.

The SDK reads Claude Code's ``--output-format stream-json`` lines and hands its caller typed
messages; the lines themselves are reachable only through its private subprocess transport. So the
integration writes each message back as the line it was parsed from, field by field, for
``POST …/ingest/claude-code`` (SPEC §16). What the typed messages keep is written back as printed:
ids (``uuid``, ``message.id``, ``session_id``), ``parent_tool_use_id`` (so subagents become child
runs), the model (``<synthetic>`` for the CLI's own error messages) and their ``error``, usage,
``tool_use_result``, system lines whole (their ``data`` is the line), stream events whole, and the
``result`` line's fields.

What the SDK drops, and how it is made up for:

* ``isSynthetic`` on the user line by which the CLI asks the model to go on after the output-token
  ceiling cut a reply. The SDK's ``UserMessage`` has no such field, and without it the nudge looks
  like the user's words, which stop ``selection.joinContinuations`` (SPEC §14) from joining the
  parts of the reply. The nudge is recognised by where the CLI puts it: a user line holding no
  tool result, between a reply and the next reply of the same context (the run, or one subagent),
  with nothing else of that context in between. Such a line is held back until the next line of
  its context shows which it is (a new reply: the nudge), so it reaches lastword a moment late,
  behind any system line printed meanwhile; a line the SDK gave without partial messages has no
  other sign (the assistant lines carry no stop reason).
* Blocks of types the SDK's parser does not know (``redacted_thinking``, images) are left out of
  its messages, so out of the lines too; unknown line types (the SDK skips them) are not seen.
* Timestamps and other fields the SDK does not model (``timestamp``, ``cwd``, ``version``) are
  absent; §16 reads none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ConversationResetMessage,
    HookEventMessage,
    Message,
    MirrorErrorMessage,
    RateLimitEvent,
    ResultMessage,
    ServerToolResultBlock,
    ServerToolUseBlock,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

Line = dict[str, Any]


def block_line(block: Any) -> dict[str, Any]:
    """A content block as the Messages API wrote it."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ServerToolUseBlock):
        return {"type": "server_tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ServerToolResultBlock):
        return {"type": "advisor_tool_result", "tool_use_id": block.tool_use_id, "content": block.content}
    if isinstance(block, ToolResultBlock):
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": block.content}
        if block.is_error is not None:
            result["is_error"] = block.is_error
        return result
    raise TypeError(f"not a content block of the Claude Agent SDK: {type(block).__name__}")


def _without_none(line: Line) -> Line:
    return {key: value for key, value in line.items() if value is not None}


@dataclass
class _Context:
    """What the nudge's recognition remembers of one context (the run, or one subagent)."""

    #: Whether its last line was an assistant line (a reply's block).
    after_reply: bool = False
    #: A user line after that reply, held back until the next line of the context.
    held: Line | None = None


@dataclass
class LineWriter:
    """Writes one session's messages back as lines, in order (it remembers what the nudge needs)."""

    session_id: str | None = None
    _contexts: dict[str | None, _Context] = field(default_factory=dict)

    def lines(self, message: Message) -> list[Line]:
        """The lines to write for ``message``: its own (none for a message Claude Code never
        printed, or a held user line), after any held line it shows the kind of."""
        if isinstance(message, MirrorErrorMessage):
            return []  # made by the SDK itself (a session store's failure)
        if isinstance(message, (SystemMessage, HookEventMessage)):
            data = dict(message.data)
            self._remember_session(data.get("session_id"))
            return [data]
        if isinstance(message, AssistantMessage):
            held = self._release(message.parent_tool_use_id, nudge=True)
            self._contexts[message.parent_tool_use_id].after_reply = True
            return [*held, self._assistant(message)]
        if isinstance(message, UserMessage):
            return self._user(message)
        if isinstance(message, StreamEvent):
            self._remember_session(message.session_id)
            line = _without_none({"type": "stream_event", "event": message.event, "session_id": message.session_id,
                                  "parent_tool_use_id": message.parent_tool_use_id, "uuid": message.uuid})
            starts_a_reply = message.event.get("type") == "message_start"
            return [*self._release(message.parent_tool_use_id, nudge=starts_a_reply), line]
        if isinstance(message, ResultMessage):
            held = [line for context in list(self._contexts) for line in self._release(context, nudge=False)]
            return [*held, self._result(message)]
        if isinstance(message, RateLimitEvent):
            return [{"type": "rate_limit_event", "rate_limit_info": message.rate_limit_info.raw,
                     "uuid": message.uuid, "session_id": message.session_id}]
        if isinstance(message, ConversationResetMessage):
            return [{"type": "conversation_reset", "new_conversation_id": message.new_conversation_id,
                     "uuid": message.uuid, "session_id": message.session_id}]
        return []

    def held(self) -> list[Line]:
        """The lines still held back, as the user lines they look like (the turn ends here)."""
        return [line for context in list(self._contexts) for line in self._release(context, nudge=False)]

    def _release(self, context_id: str | None, nudge: bool) -> list[Line]:
        """The context's held line, if any, marked as the CLI's nudge when ``nudge`` (the next
        line of its context starts a reply)."""
        context = self._contexts.setdefault(context_id, _Context())
        held, context.held = context.held, None
        if held is None:
            return []
        if nudge:
            held["isSynthetic"] = True
        return [held]

    def _remember_session(self, session_id: Any) -> None:
        if isinstance(session_id, str):
            self.session_id = session_id

    def _assistant(self, message: AssistantMessage) -> Line:
        self._remember_session(message.session_id)
        body = _without_none({"id": message.message_id, "type": "message", "role": "assistant",
                              "model": message.model, "content": [block_line(block) for block in message.content],
                              "stop_reason": message.stop_reason, "usage": message.usage})
        return _without_none({"type": "assistant", "message": body, "parent_tool_use_id": message.parent_tool_use_id,
                              "session_id": message.session_id or self.session_id, "uuid": message.uuid,
                              "error": message.error})

    def _user(self, message: UserMessage) -> list[Line]:
        content: Any = message.content
        blocks = [] if isinstance(content, str) else [block_line(block) for block in content]
        line = _without_none({"type": "user", "message": {"role": "user", "content": content if isinstance(content, str)
                                                          else blocks},
                              "parent_tool_use_id": message.parent_tool_use_id, "session_id": self.session_id,
                              "uuid": message.uuid, "tool_use_result": message.tool_use_result})
        released = self._release(message.parent_tool_use_id, nudge=False)
        context = self._contexts[message.parent_tool_use_id]
        after_reply, context.after_reply = context.after_reply, False
        if after_reply and not any(block.get("type") == "tool_result" for block in blocks):
            context.held = line  # the nudge, if the next line of its context starts a reply
            return released
        return [*released, line]
    def _result(self, message: ResultMessage) -> Line:
        self._remember_session(message.session_id)
        deferred = message.deferred_tool_use
        return _without_none({
            "type": "result", "subtype": message.subtype, "is_error": message.is_error,
            "duration_ms": message.duration_ms, "duration_api_ms": message.duration_api_ms,
            "num_turns": message.num_turns, "result": message.result, "stop_reason": message.stop_reason,
            "session_id": message.session_id, "total_cost_usd": message.total_cost_usd, "usage": message.usage,
            "modelUsage": message.model_usage, "permission_denials": message.permission_denials,
            "structured_output": message.structured_output, "errors": message.errors,
            "api_error_status": message.api_error_status, "terminal_reason": message.terminal_reason,
            "uuid": message.uuid, "origin": message.origin,
            "deferred_tool_use": None if deferred is None else {"id": deferred.id, "name": deferred.name,
                                                                "input": deferred.input},
        })
