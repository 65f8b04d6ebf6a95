"""Claude Code's ``--output-format stream-json --verbose`` lines as §4 events (SPEC §16).

What the CLI prints, as recorded from the real program (``tests/cli_children/``):

- ``assistant`` lines carry **one content block each**; the blocks of one reply share its
  ``message.id``. Their ``stop_reason`` is always null and their usage is the one of
  ``message_start``. A reply with no block (an empty step) prints no ``assistant`` line at all.
- With ``--include-partial-messages``, ``stream_event`` lines wrap the Messages API's own
  stream events: the text deltas, and ``message_delta`` with the reply's real stop reason.
- When the output-token ceiling cuts a reply the CLI asks the model to go on with a user line
  marked ``isSynthetic`` and starts a new reply; after the third cut, or on an API error, it
  prints an assistant message of its own (``model: "<synthetic>"``, an ``error`` field) whose
  text is an error sentence, and its ``result`` line repeats that sentence as the result.

So a reply is assembled block by block and stored once complete: when a line of the same
context arrives that is not its block and may answer it (a user line that is not the CLI's
own nudge, the next reply, its ``message_stop``, the ``result``), or at the end of the body.
A reply followed by the next one with only nudges and system lines in between was cut by the
ceiling (``stopReason: "max_tokens"``), so ``selection.joinContinuations`` answers it whole.
The CLI's own messages are never output: they are stored empty, their text as the ``error``.

A ``tool_use`` the ceiling cut is printed with ``input.__unparsedToolInput`` (and run, and
answered with an error): it is the model's unfinished call, not output. It stays in its
message's ``source``, out of its content, and the message is ``max_tokens``.

Lines with ``parent_tool_use_id`` belong to a subagent the CLI ran through its ``Agent``
(``Task``) tool: they go to the child run ``{runId}.{tool_use_id}``. A foreground subagent
ends with the parent's tool result for its call (its output: ``tool_use_result.content`` when
the line holds that one result, else the result block's own content); a backgrounded one
answers that call at once (``async_launched``) and ends at its ``system/task_notification``,
whose ``usage.total_tokens`` completes the child's usage. A subagent line printed after its
child ended is kept on the run as ``x-claude-code-late-subagent``.

Stream events that add nothing to what the ``assistant`` lines hold (block starts and stops,
tool-input and signature deltas) are read and not stored; ``message_start``/``message_delta``
give the reply's id, usage and stop reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lastword.adapters.base import chunk, usage_of
from lastword.adapters.cli_base import (
    MESSAGE_STOPS,
    USAGE_FIELDS,
    ClaudeCodeLines,
    Event,
    Made,
    Reply,
    StreamStop,
    tool_content,
)
from lastword.rules.stop_reasons import is_error


@dataclass(slots=True)
class _Context:
    """The run, or one subagent: its reply in progress and what it has stored."""

    child: str | None
    agent: str | None = None
    reply: Reply | None = None
    #: Usage of the replies stored, for the remainder the ``result`` line adds.
    usage: dict[str, int] = field(default_factory=dict)
    replies_stored: int = 0
    substantive: bool = False
    last_error: dict[str, Any] | None = None
    ended: bool = False


class ClaudeCodeAdapter(ClaudeCodeLines):
    format = "claude-code"
    command = "claude"

    def __init__(self, turn: int = 1) -> None:
        super().__init__(turn)
        self._contexts: dict[str | None, _Context] = {None: _Context(None)}
        #: Subagent type by the id of the ``Agent``/``Task`` call that started it.
        self._agents: dict[str, str | None] = {}
        #: The calls whose subagent was backgrounded: they end at their ``task_notification``.
        self._background: set[str] = set()
        self._session: str | None = None
        #: The CLI's own usage total (the ``result`` lines') and the eventId of the turn's end.
        self._total: dict[str, int] = {}
        self._end: str | None = None

    # -- lines -------------------------------------------------------------------------------

    def read(self, index: int, line: Event) -> list[Made]:
        if line.get("type") == "stream_event" and self._session is not None:
            made = self._delta(line)
            if made is not None:
                return made
        self.lines_read += 1
        kind = self.need_str(index, line, "type")
        session = line.get("session_id")
        if isinstance(session, str) and self._session is None:
            self._session = session
        line_id = line.get("uuid")
        event_id = line_id if isinstance(line_id, str) and line_id else self.positional_id(self._session, kind)
        parent = line.get("parent_tool_use_id")
        if parent is not None and not isinstance(parent, str):
            raise self.refuse(index, "parent_tool_use_id", "expected a string or null")
        if parent is not None and parent in self._contexts and self._contexts[parent].ended:
            # The subagent's child run has ended (its tool result came first): its line is
            # kept on the run, never refused for the ended child.
            return [self.extension("late-subagent", event_id, line)]
        if kind == "assistant":
            return self._assistant(index, line, self._context(parent))
        if kind == "user":
            return self._user(index, line, event_id, self._context(parent))
        if kind == "stream_event":
            return self._stream_event(index, line, event_id, self._context(parent))
        if kind == "result":
            return self._result(index, line, event_id)
        if kind == "system":
            return self._system(index, line, event_id)
        return [self.extension(kind, event_id, line, parent and self._context(parent).child)]

    def _delta(self, line: Event) -> list[Made] | None:
        """The hot path (most lines of a run): a text or thinking delta in a line with its own
        ``uuid``, read as :meth:`feed` reads it; ``None`` for any other line, which then takes
        the general path (the session is known, so the line cannot be the one that names it)."""
        event, line_id, parent = line.get("event"), line.get("uuid"), line.get("parent_tool_use_id")
        if type(event) is not dict or event.get("type") != "content_block_delta" or type(line_id) is not str \
                or not line_id or (parent is not None and type(parent) is not str):
            return None
        delta = event.get("delta")
        if type(delta) is not dict:
            return None
        kind = delta.get("type")
        if kind == "text_delta":
            text, block = delta.get("text"), "text"
        elif kind == "thinking_delta":
            text, block = delta.get("thinking"), "reasoning"
        else:
            return None
        if type(text) is not str:
            return None
        context = self._contexts.get(parent) or self._context(parent)
        if context.ended:
            return None  # the general path keeps it on the run (and counts it)
        self.lines_read += 1
        event = chunk(block, text, line_id, {"format": self.format, "events": [line]})
        # The main run's (most of a run's lines) without a call of _made, which only adds the child.
        return [Made(event) if context.child is None else self._made(event, context)]

    def assembled(self) -> list[Made]:
        made: list[Made] = []
        for context in self._contexts.values():
            made.extend(self._flush(context, next_reply=False))
        return made

    def end(self) -> list[Made]:
        return self._turn_end()

    def _assistant(self, index: int, line: Event, context: _Context) -> list[Made]:
        message = self.need(index, line, "message", dict)
        content = self.need(index, message, "content", list, "message.")
        reply_id = self.need_str(index, message, "id", "message.")
        if message.get("model") == "<synthetic>" or line.get("error") is not None:
            # The CLI's own message: an error sentence in the place of the reply. Not output.
            made = self._flush(context, next_reply=True)
            text = "".join(block.get("text", "") for block in content if isinstance(block, dict))
            kind = line.get("error") if isinstance(line.get("error"), str) else "api_error"
            context.last_error = {"type": kind, "message": text}
            event = {"type": "assistant/message", "eventId": reply_id,
                     "message": {"id": reply_id, "content": [], "error": context.last_error},
                     "source": self.source([line])}
            context.replies_stored += 1
            return [*made, self._made(event, context)]
        made = []
        if context.reply is not None and context.reply.id != reply_id:
            made = self._flush(context, next_reply=True)
        if context.reply is None:
            context.reply = Reply(reply_id)
        reply = context.reply
        self.add_line(index, line, reply, message, content)
        stop = message.get("stop_reason")
        if isinstance(stop, str) and stop in MESSAGE_STOPS:
            reply.stop = MESSAGE_STOPS[stop]
        return made

    def subagent_called(self, call_id: str, agent: str | None) -> None:
        self._agents[call_id] = agent

    def _user(self, index: int, line: Event, event_id: str, context: _Context) -> list[Made]:
        message = self.need(index, line, "message", dict)
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise self.refuse(index, "message.content", "expected a string or an array")
        if line.get("isSynthetic") is True:
            # The CLI's own nudge ("Output token limit hit. Resume directly…"), not the user's
            # words: kept, and it neither answers the reply nor stops a join of its parts.
            return [self.extension("user", event_id, line, context.child)]
        made = self._flush(context, next_reply=False)
        results = [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"] \
            if isinstance(content, list) else []
        if not results or len(results) != len(content):
            event = {"type": "user/message", "eventId": event_id, "message": {"content": content},
                     "source": self.source([line])}
            return [*made, self._made(event, context)]
        # The line-level tool_use_result is the result of the line's only call; with several
        # calls each block answers its own.
        line_result = line.get("tool_use_result") if len(results) == 1 else None
        for position, block in enumerate(results):
            call_id = self.need_str(index, block, "tool_use_id", f"message.content.{position}.")
            result_id = event_id if len(results) == 1 else f"{event_id}:{position}"
            result: Event = {"type": "tool/result", "eventId": result_id,
                             "toolCallId": call_id, "content": tool_content(block.get("content")),
                             "isError": block.get("is_error") is True, "source": self.source([line])}
            made.append(self._made(result, context))
            if call_id in self._agents:
                made.extend(self._subagent_answered(call_id, block, line_result, result_id))
        return made

    def _stream_event(self, index: int, line: Event, event_id: str, context: _Context) -> list[Made]:
        event = self.need(index, line, "event", dict)
        kind = self.need_str(index, event, "type", "event.")
        if kind == "message_start":
            message = self.need(index, event, "message", dict, "event.")
            made = self._flush(context, next_reply=True)
            context.reply = Reply(self.need_str(index, message, "id", "event.message."))
            if isinstance(message.get("usage"), dict):
                context.reply.usage = self.usage(index, message["usage"], "event.message.usage.")
            return made
        if kind == "content_block_delta":
            delta = self.need(index, event, "delta", dict, "event.")
            if delta.get("type") == "text_delta":
                return [self._made(chunk("text", self.need_str(index, delta, "text", "event.delta."), event_id,
                                         self.source([line])), context)]
            if delta.get("type") == "thinking_delta":
                return [self._made(chunk("reasoning", self.need_str(index, delta, "thinking", "event.delta."),
                                         event_id, self.source([line])), context)]
            return []
        if kind == "message_delta" and context.reply is not None:
            delta = event.get("delta")
            stop = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(stop, str) and stop in MESSAGE_STOPS:
                context.reply.stop = MESSAGE_STOPS[stop]
            usage = event.get("usage")
            if isinstance(usage, dict):
                # Counts replace message_start's; without them, a count not given is 0 (§4 needs both).
                latest = self.usage(index, usage, "event.usage.", partial=context.reply.usage is not None)
                context.reply.usage = {**(context.reply.usage or {}), **latest}
            return []
        if kind == "message_stop":
            return self._flush(context, next_reply=False)
        return []

    def _result(self, index: int, line: Event, event_id: str) -> list[Made]:
        context = self._contexts[None]
        made = self._flush(context, next_reply=False)
        subtype = self.need_str(index, line, "subtype")
        usage = self.usage(index, line["usage"], "usage.") if isinstance(line.get("usage"), dict) else None
        error = context.last_error
        if subtype == "error_max_turns":
            stop = "max_turns"
            errors = line.get("errors")
            if isinstance(errors, list) and any(isinstance(text, str) for text in errors):
                error = {"type": subtype, "message": "\n".join(text for text in errors if isinstance(text, str))}
        elif (error is not None and error["type"] == "max_output_tokens") or line.get("stop_reason") == "max_tokens":
            stop = "max_tokens"
        elif line.get("is_error") is True or subtype.startswith("error"):
            stop = "error"
            if error is None:
                text = line.get("result") if isinstance(line.get("result"), str) else subtype
                error = {"type": subtype, "message": text}
        elif line.get("stop_reason") == "refusal":
            stop = "refusal"
        else:
            stop = "completed"
        if usage is not None:
            for name, value in usage.items():
                self._total[name] = self._total.get(name, 0) + value
        made.append(self.extension("result", event_id, line))
        self._end = f"{event_id}:end"
        self._stop = StreamStop(subtype, stop, error if is_error(stop) else None)
        return made

    def _turn_end(self) -> list[Made]:
        """The turn's end, made when the body ends after a ``result`` line.

        Not at the ``result`` itself: a backgrounded subagent's completion makes the CLI start
        another turn after it and print a second ``result``; the run's turn is the CLI's whole
        run, and its stop the last ``result``'s."""
        if self._end is None:
            return []
        context = self._contexts[None]
        made: list[Made] = []
        if self._total and context.replies_stored:
            # §4 sums the turn's messages; what they did not carry comes as a usage-only one,
            # so the sum is the CLI's own total.
            remainder = {name: max(0, value - context.usage.get(name, 0)) for name, value in self._total.items()}
            if any(remainder.values()):
                made.append(Made({"type": "assistant/message", "eventId": f"{self._end}:usage",
                                  "message": {"content": [], "usage": remainder}, "source": self.source([])},
                                 remainder=True))
        end: Event = {"type": "turn/end", "eventId": self._end, "stopReason": self._stop.stop_reason,
                      "source": self.source([])}
        if self._total:
            end["usage"] = {"inputTokens": 0, "outputTokens": 0, **self._total}
        if self._stop.error is not None:
            end["error"] = self._stop.error
        made.append(Made(end))
        context.ended = True
        self._end = None
        return made

    def _system(self, index: int, line: Event, event_id: str) -> list[Made]:
        subtype = line.get("subtype")
        call_id = line.get("tool_use_id")
        made: list[Made] = []
        if subtype == "init":
            # A new CLI turn starts: the reply before it was not cut, it was answered.
            made.extend(self._flush(self._contexts[None], next_reply=False))
        if subtype == "task_started" and isinstance(call_id, str) and self._agents.get(call_id) is None:
            agent = line.get("subagent_type")
            self._agents[call_id] = agent if isinstance(agent, str) else None
        made.append(self.extension("system", event_id, line))
        # A foreground subagent prints its task_notification too, before the tool result that ends it.
        # A backgrounded subagent that printed no line of its own is first seen here.
        if subtype == "task_notification" and call_id in self._background:
            child = self._context(call_id)
            if not child.ended:
                made.extend(self._flush(child, next_reply=False))
                if not child.substantive and isinstance(line.get("summary"), str) and line["summary"].strip():
                    made.append(self._made({"type": "assistant/message", "eventId": f"{event_id}:output",
                                            "message": {"content": [{"type": "text", "text": line["summary"]}]},
                                            "source": self.source([line])}, child))
                made.extend(self._reported_usage(child, line, event_id))
                stop = "completed" if line.get("status") == "completed" else "error"
                made.append(self._end_child(child, stop, f"{event_id}:end", line))
        return made

    # -- subagents ---------------------------------------------------------------------------

    def _context(self, parent: str | None) -> _Context:
        context = self._contexts.get(parent)
        if context is None:
            context = self._contexts[parent] = _Context(parent, self._agents.get(parent or ""))
        return context

    def _subagent_answered(self, call_id: str, block: Event, line_result: Any, event_id: str) -> list[Made]:
        result = line_result if isinstance(line_result, dict) else {}
        if result.get("status") == "async_launched" or result.get("isAsync") is True:
            self._background.add(call_id)
            return []  # backgrounded: it ends at its task_notification
        child = self._context(call_id)
        if child.ended:
            return []
        made = self._flush(child, next_reply=False)
        content = result.get("content")
        output = content if isinstance(content, list) and content else _as_blocks(block.get("content"))
        message: Event = {"content": output}
        if isinstance(result.get("usage"), dict):
            usage = usage_of((name, result["usage"].get(key)) for name, key in USAGE_FIELDS)
            if usage is not None and all(type(value) is int and value >= 0 for value in usage.values()):
                message["usage"] = usage
        made.append(self._made({"type": "assistant/message", "eventId": f"{event_id}:output", "message": message,
                                "source": self.source([])}, child))
        stop = "error" if block.get("is_error") is True else "completed"
        made.append(self._end_child(child, stop, f"{event_id}:end", None))
        return made

    def _reported_usage(self, child: _Context, line: Event, event_id: str) -> list[Made]:
        """What the notification's ``usage.total_tokens`` counts beyond the child's replies.

        A subagent's lines carry their reply's ``message_start`` usage (output 1); the CLI's
        own count of the subagent is only this total. The input counts are exact, so what is
        missing is output: it comes as a usage-only message, and the child's sum is the CLI's."""
        usage = line.get("usage")
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        if type(total) is not int:
            return []
        missing = total - sum(child.usage.values())
        if missing <= 0:
            return []
        return [self._made({"type": "assistant/message", "eventId": f"{event_id}:usage",
                            "message": {"content": [], "usage": {"inputTokens": 0, "outputTokens": missing}},
                            "source": self.source([line])}, child)._replace(remainder=True)]

    def _end_child(self, child: _Context, stop: str, event_id: str, raw: Event | None) -> Made:
        child.ended = True
        end: Event = {"type": "turn/end", "eventId": event_id, "stopReason": stop,
                      "source": self.source([] if raw is None else [raw])}
        if stop == "error":
            end["error"] = {"type": "subagent_error", "message": "the subagent's tool call ended in an error"}
        return self._made(end, child)

    # -- replies -----------------------------------------------------------------------------

    def _flush(self, context: _Context, *, next_reply: bool) -> list[Made]:
        """Store the reply in progress; ``next_reply``: the next reply starts with nothing
        model-visible in between, which the CLI does only after the ceiling cut this one."""
        reply = context.reply
        if reply is None:
            return []
        context.reply = None
        for name, value in (reply.usage or {}).items():
            context.usage[name] = context.usage.get(name, 0) + value
        stop = reply.stop
        if stop is None and next_reply and not any(block["type"] == "tool_call" for block in reply.blocks):
            stop = "max_tokens"
        context.replies_stored += 1
        context.substantive = context.substantive or bool(reply.blocks)
        return [self._made(self.reply_event(reply, stop), context)]

    def _made(self, event: Event, context: _Context) -> Made:
        if context.child is None:
            return Made(event)
        if context.agent is None:
            context.agent = self._agents.get(context.child)
        return Made(event, context.child, context.agent)


def _as_blocks(content: Any) -> list[Event]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict) and isinstance(block.get("type"), str)]
    return []
