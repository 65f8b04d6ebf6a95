"""Claude Code's own transcripts as §4 events (SPEC §19).

Claude Code writes each session to ``<config>/projects/<cwd slug>/<session>.jsonl`` and each
subagent it runs to ``<session>/subagents/agent-<agentId>.jsonl``. What those lines are, as
recorded from the real program (``tests/cli_children/fixtures/claude-code-transcript/``):

- ``assistant`` lines carry **one content block each** (``apiBlockIndex``); the blocks of one
  reply share its ``message.id``, and every line carries the reply's real ``stop_reason`` and
  ``usage``. So a reply split by the output-token ceiling is two messages, the first
  ``max_tokens``: ``selection.joinContinuations`` answers it whole.
- ``user`` lines: the user's words, tool results (``tool_result`` blocks; a subagent's carries
  ``toolUseResult.agentId``, which links the ``Agent`` call to the subagent's transcript), and
  the CLI's own nudges after a cut (``isMeta: true``), which are not the user's and answer nothing.
- A subagent's lines carry ``isSidechain: true`` and its ``agentId``.
- Most lines are not messages: ``queue-operation``, ``attachment``, ``api-request``,
  ``api-request-shape``, ``api-request-blob``, ``last-prompt``, ``atis-latch``, ``tools-used``,
  ``cost-state``, … (many without a ``uuid``). They are **skipped**, whatever their type: they
  are the CLI's bookkeeping of what it sent and showed (``api-request-blob`` repeats the whole
  context of each request, so keeping it would store a session's conversation once per model
  call), the stdout of §16 carries the run's own system lines, and a type the CLI adds later
  must never fail a body. Only ``user`` and ``assistant`` lines make events.

Events, and their ids (the same as the stdout adapter's for the same line, so that the ingest
pipeline can tell a line it already stored from either source):

- a reply → one ``assistant/message``, eventId ``message.id``, stored when a line of its context
  that is not its block arrives (or at the end of the body), with ``stopReason`` when the reply
  says one §6 knows (``tool_use`` is not recorded); a message the CLI made itself
  (``model: "<synthetic>"`` or an ``error`` field) is stored empty with its text as ``error``;
- a tool result → ``tool/result``, eventId the line's ``uuid`` (``uuid:position`` when the line
  holds several); the user's words → ``user/message``, eventId ``uuid``; a nudge →
  ``x-claude-code-transcript-user``. (Unlike on stdout, a nudge may store the reply before it:
  the reply's lines carry its stop reason, nothing is inferred from what follows.)

A subagent's lines go to the child run ``{runId}.{tool_use_id}``: its ``tool_use_id`` is the one
the session's tool result names the ``agentId`` with (when the session's lines come first in the
body), else the one the request names (``?toolUseId=``, which the hook reads from the subagent's
``agent-<agentId>.meta.json``). The child then holds the subagent's own messages, and when its
last reply is a final one (not a tool call) the end of the body ends the child's turn with that
reply's stop reason (eventId ``<agentId>:end``). A session's own turn is never ended here: a
transcript has no ``result`` line, and in an interactive session the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lastword.adapters.cli_base import MESSAGE_STOPS, ClaudeCodeLines, Event, Made, Reply, tool_content

#: How a subagent's last reply ends its child's turn.
_TURN_STOPS = {"max_tokens": "max_tokens", "end_turn": "completed", "stop_sequence": "completed",
               "refusal": "refusal"}


@dataclass(slots=True)
class _Context:
    """The session, or one subagent (``child`` = its tool_use_id, ``agent_id`` its agentId)."""

    child: str | None
    agent_id: str | None = None
    agent: str | None = None
    reply: Reply | None = None
    #: How the last stored reply ended the turn (None: not a final reply).
    final: str | None = None
    error: dict[str, Any] | None = None


class ClaudeCodeTranscriptAdapter(ClaudeCodeLines):
    format = "claude-code-transcript"
    #: Not a command's standard output: ``lastword run --format auto`` never picks it.
    command = ""

    def __init__(self, turn: int = 1, tool_use_id: str | None = None) -> None:
        super().__init__(turn)
        self._tool_use_id = tool_use_id
        self._contexts: dict[str | None, _Context] = {None: _Context(None)}
        #: tool_use_id by agentId, from the session's tool results.
        self._links: dict[str, str] = {}
        #: subagent_type by the id of the ``Agent`` call that started it.
        self._agents: dict[str, str] = {}

    @classmethod
    def for_request(cls, turn: int = 1, tool_use_id: str | None = None) -> ClaudeCodeTranscriptAdapter:
        return cls(turn, tool_use_id)

    def read(self, index: int, line: Event) -> list[Made]:
        self.lines_read += 1
        kind = self.need_str(index, line, "type")
        if kind not in ("user", "assistant"):
            return []
        context = self._context(index, line)
        if kind == "assistant":
            return self._assistant(index, line, context)
        return self._user(index, line, context)

    def assembled(self) -> list[Made]:
        made: list[Made] = []
        for context in self._contexts.values():
            made.extend(self._flush(context))
        return made

    def end(self) -> list[Made]:
        # A subagent's transcript ends with its last reply: its child's turn ends with the body.
        made: list[Made] = []
        for context in self._contexts.values():
            if context.child is not None and context.final is not None:
                end: Event = {"type": "turn/end", "eventId": f"{context.agent_id}:end", "stopReason": context.final,
                              "source": self.source([])}
                if context.error is not None:
                    end["error"] = context.error
                made.append(self._made(end, context))
        return made

    # -- lines -------------------------------------------------------------------------------

    def _context(self, index: int, line: Event) -> _Context:
        agent_id = line.get("agentId")
        if agent_id is None:
            return self._contexts[None]
        if not isinstance(agent_id, str) or not agent_id:
            raise self.refuse(index, "agentId", "expected a non-empty string")
        key = self._links.get(agent_id, self._tool_use_id)
        if key is None:
            raise self.refuse(index, "agentId", f"the subagent {agent_id!r} is linked to no tool call: send the "
                                                "session's transcript before it, or ?toolUseId=")
        context = self._contexts.get(key)
        if context is None:
            context = self._contexts[key] = _Context(key, agent_id)
        if context.agent is None:
            named = line.get("attributionAgent")
            context.agent = self._agents.get(key) or (named if isinstance(named, str) and named else None)
        return context

    def _assistant(self, index: int, line: Event, context: _Context) -> list[Made]:
        message = self.need(index, line, "message", dict)
        content = self.need(index, message, "content", list, "message.")
        reply_id = self.need_str(index, message, "id", "message.")
        if message.get("model") == "<synthetic>" or line.get("error") is not None:
            # The CLI's own message: an error sentence in the place of the reply. Not output.
            made = self._flush(context)
            text = "".join(block["text"] for block in content if isinstance(block, dict)
                           and isinstance(block.get("text"), str))
            kind = line["error"] if isinstance(line.get("error"), str) else "api_error"
            context.error = {"type": kind, "message": text}
            context.final = "max_tokens" if kind == "max_output_tokens" else "error"
            event = {"type": "assistant/message", "eventId": reply_id,
                     "message": {"id": reply_id, "content": [], "error": context.error}, "source": self.source([line])}
            return [*made, self._made(event, context)]
        made = self._flush(context) if context.reply is not None and context.reply.id != reply_id else []
        if context.reply is None:
            context.reply = Reply(reply_id)
        reply = context.reply
        self.add_line(index, line, reply, message, content)
        stop = message.get("stop_reason")
        if reply.stop is None and isinstance(stop, str):
            reply.stop = MESSAGE_STOPS.get(stop)
        return made

    def subagent_called(self, call_id: str, agent: str | None) -> None:
        if agent is not None:
            self._agents[call_id] = agent

    def _user(self, index: int, line: Event, context: _Context) -> list[Made]:
        event_id = self.need_str(index, line, "uuid")
        message = self.need(index, line, "message", dict)
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise self.refuse(index, "message.content", "expected a string or an array")
        # Any user line follows a complete reply (its stop reason is on its own lines).
        made = self._flush(context)
        if line.get("isMeta") is True:
            # The CLI's own words (the nudge after a cut): kept, not the user's.
            return [*made, self._made({"type": "x-claude-code-transcript-user", "eventId": event_id,
                                       "source": self.source([line])}, context)]
        results = [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"] \
            if isinstance(content, list) else []
        if not results or len(results) != len(content):
            event = {"type": "user/message", "eventId": event_id, "message": {"content": content},
                     "source": self.source([line])}
            return [*made, self._made(event, context)]
        linked = line.get("toolUseResult")
        agent_id = linked.get("agentId") if isinstance(linked, dict) else None
        for position, block in enumerate(results):
            call_id = self.need_str(index, block, "tool_use_id", f"message.content.{position}.")
            if isinstance(agent_id, str) and agent_id and len(results) == 1:
                self._links[agent_id] = call_id
            result: Event = {"type": "tool/result", "eventId": event_id if len(results) == 1 else f"{event_id}:{position}",
                             "toolCallId": call_id, "content": tool_content(block.get("content")),
                             "isError": block.get("is_error") is True, "source": self.source([line])}
            made.append(self._made(result, context))
        return made

    # -- replies -----------------------------------------------------------------------------

    def _flush(self, context: _Context) -> list[Made]:
        reply = context.reply
        if reply is None:
            return []
        context.reply = None
        context.final = _TURN_STOPS.get(reply.stop or "")
        context.error = None
        return [self._made(self.reply_event(reply, reply.stop), context)]

    def _made(self, event: Event, context: _Context) -> Made:
        if context.child is None:
            return Made(event)
        return Made(event, context.child, context.agent)
