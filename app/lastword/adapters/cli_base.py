"""The contract of an agent-CLI adapter (SPEC §16): the lines a CLI prints in, §4 events out.

An agent CLI (Claude Code, Codex, opencode) prints a whole run on its standard output, one JSON
object a line. A CLI adapter is pure and incremental like a provider adapter (:mod:`base`):
``feed(index, line)`` takes one line (``index`` is its position among the body's lines) and
returns what that line completes, ``finish()`` what the end of the body completes. Unlike a
provider body, one CLI body is a whole run, so what the adapter makes is stored as it is made,
and a line may make events for a *child* run (a subagent the CLI ran inside the run): each
:class:`Made` says which run takes its event.

``eventId``s come from the CLI's own ids (a line's ``uuid``, a message id, an item or part id);
a line without an id of its own gets the session's id, its type and its position among the
body's lines of that type. Either way a body sent again from its start stores nothing twice.
A CLI continuing its session in a later turn of the run (``codex exec resume``, ``claude
--resume``) prints ids of that session again (Codex restarts its items at ``item_0``), so the
eventIds of turn ``n`` ≥ 2 start with ``turn<n>:``; turn 1's are the CLI's own.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from lastword.adapters.base import JSON_NAMES, Event, NotTheFormat, StreamStop, feed_each, refusal

__all__ = ["ClaudeCodeLines", "CliAdapter", "Event", "Made", "NotTheFormat", "Reply", "StreamStop", "tool_content"]


class Made(NamedTuple):
    """One §4 event and the run that takes it.

    ``child`` is ``None`` for the run the body was posted to; otherwise the key of the child run
    ``{runId}.{child}`` (created on first sight with ``parentRunId`` = the run and ``agent``).

    A named tuple, not a frozen dataclass: one is made per line, and a frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` per field) was a thirtieth of the CLI ingest's time.
    """

    event: Event
    child: str | None = None
    agent: str | None = None
    #: A usage-only message the adapter adds so the turn's sum is the CLI's own total: the ingest
    #: lowers it by what replies kept from another format carried (lastword.ingest.cli).
    remainder: bool = False


class CliAdapter(abc.ABC):
    """Translates one agent CLI's standard output, a line at a time, into §4 events."""

    #: The ``{format}`` of ``POST /v1/runs/{runId}/ingest/{format}``.
    format: ClassVar[str]
    #: The CLI's command name (``lastword run --format auto`` goes by it).
    command: ClassVar[str]

    def __init__(self, turn: int = 1) -> None:
        #: Lines read so far.
        self.lines_read = 0
        self._stop = StreamStop(None, None)
        self._positions: Counter[str] = Counter()
        self._turn = "" if turn == 1 else f"turn{turn}:"

    @classmethod
    def for_request(cls, turn: int = 1, tool_use_id: str | None = None) -> CliAdapter:
        """The adapter for one body of the run's turn ``turn``; ``tool_use_id`` is the request's
        ``toolUseId`` (only a subagent's transcript uses it: the tool call that ran the subagent)."""
        return cls(turn)

    def feed(self, index: int, line: Event) -> list[Made]:
        """Translate one line; the events it completes, in the order they are to be stored."""
        return self._of_turn(self.read(index, line))

    def feed_many(self, batch: Iterable[tuple[int, Event]], made: list[Made], origins: list[int]) -> None:
        """:meth:`feed` of each ``(index, line)`` in turn, as a provider adapter's ``feed_many``
        (:func:`lastword.adapters.base.feed_each`): what the lines made appended to ``made``, the
        index of the line that made each to ``origins``; a line refused raises, what the lines
        before it made already appended."""
        feed_each(self.feed, batch, made, origins)

    @abc.abstractmethod
    def read(self, index: int, line: Event) -> list[Made]:
        """:meth:`feed`, with the eventIds of turn 1."""

    def assembled(self) -> list[Made]:
        """What the lines read so far have assembled and not made yet (a message being built),
        made now, with the eventIds of turn 1."""
        return []

    def end(self) -> list[Made]:
        """What the end of the body completes beyond what is assembled (a CLI whose turn ends
        with its output, not with a line of its own: that end), with the eventIds of turn 1."""
        return []

    def finish(self) -> list[Made]:
        """What the end of the body completes: what is assembled, then the turn's end where the
        body's end is it."""
        return self._of_turn([*self.assembled(), *self.end()])

    def cut(self, index: int) -> list[Made]:
        """What the lines before line ``index`` assembled, made because the body cannot go on
        past that line (it cannot be read, or the body ended inside it): nothing assembled is
        lost. Not the turn's end. A message made so is not the one the whole line would have
        completed: its id says where it was cut (``<id>:cut<index>``), so the body sent again,
        mended, stores its whole message beside it instead of clashing with it."""
        made = self._of_turn(self.assembled())
        for item in made:
            if item.event["type"] == "assistant/message":
                item.event["eventId"] = f"{item.event['eventId']}:cut{index}"
        return made

    def _of_turn(self, made: list[Made]) -> list[Made]:
        if self._turn:
            for item in made:
                item.event["eventId"] = self._turn + item.event["eventId"]
        return made

    @property
    def stop(self) -> StreamStop:
        """How the run stopped: ``stop_reason`` is set once a terminal line was read;
        ``provider`` is the CLI's own word for it (``providerStopReason``)."""
        return self._stop

    # Helpers shared by the CLIs.

    def source(self, raw: list[Event]) -> dict[str, Any]:
        return {"format": self.format, "events": raw}

    def refuse(self, index: int, field: str, message: str) -> NotTheFormat:
        return refusal(self.format, index, field, message, noun="line")

    def need(self, index: int, container: dict[str, Any], key: str, kind: type, path: str = "") -> Any:
        """``container[key]``, refused with 422 naming the line unless present and of ``kind``
        (one of :data:`JSON_NAMES`). ``container`` is the line, or an object already needed
        from it: the ingest reads only lines that are JSON objects."""
        value = container.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise self.refuse(index, f"{path}{key}", f"expected {JSON_NAMES[kind.__name__]}")
        return value

    def need_str(self, index: int, container: dict[str, Any], key: str, path: str = "") -> str:
        value: str = self.need(index, container, key, str, path)
        return value

    def positional_id(self, session: str | None, kind: str) -> str:
        """The id of a line without one of its own: session, type, position among that type."""
        position = self._positions[kind]
        self._positions[kind] += 1
        return f"{session or self.format}:{kind}:{position}"

    def extension(self, kind: str, event_id: str, raw: Event, child: str | None = None) -> Made:
        """An ``x-<format>-<kind>`` event: kept, never interpreted."""
        return Made({"type": f"x-{self.format}-{kind}", "eventId": event_id, "source": self.source([raw])}, child)


# Claude Code's two formats (its stdout, its transcripts) print the same assistant and user
# lines: one content block a line, the blocks of a reply sharing its ``message.id``.

#: The tools through which Claude Code runs a subagent (``Task`` in older releases).
SUBAGENT_TOOLS = frozenset({"Agent", "Task"})
#: The input key of a ``tool_use`` block whose input the output-token ceiling cut
#: (``{raw, len}``: the unfinished JSON as received).
UNPARSED_INPUT = "__unparsedToolInput"
#: Stop reasons a reply may carry that §6 names (others, e.g. ``tool_use``, are not recorded).
MESSAGE_STOPS = {"max_tokens": "max_tokens", "end_turn": "end_turn", "stop_sequence": "stop_sequence",
                 "refusal": "refusal", "model_context_window_exceeded": "max_tokens"}
#: §4's usage names and the Messages API's.
USAGE_FIELDS = (("inputTokens", "input_tokens"), ("outputTokens", "output_tokens"),
                ("cacheReadTokens", "cache_read_input_tokens"), ("cacheWriteTokens", "cache_creation_input_tokens"))


@dataclass(slots=True)
class Reply:
    """An assistant reply being assembled from its per-block lines."""

    id: str
    blocks: list[Event] = field(default_factory=list)
    raw: list[Event] = field(default_factory=list)
    usage: dict[str, int] | None = None
    stop: str | None = None


class ClaudeCodeLines(CliAdapter):
    """What Claude Code's stdout and transcript adapters read alike: a reply's blocks and usage
    from its ``assistant`` lines (each reads the line's stop reason its own way)."""

    def add_line(self, index: int, line: Event, reply: Reply, message: Event, content: list[Any]) -> None:
        """Add an ``assistant`` line's blocks and usage (its ``message`` and ``message.content``)
        to ``reply``."""
        for position, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise self.refuse(index, f"message.content.{position}", "expected a block with a type")
            made = self.content_block(index, block, position)
            if made is None:
                reply.stop = "max_tokens"  # the ceiling cut the call: kept in source, not output
            else:
                reply.blocks.append(made)
        reply.raw.append(line)
        if isinstance(message.get("usage"), dict) and reply.usage is None:
            reply.usage = self.usage(index, message["usage"], "message.usage.")

    def reply_event(self, reply: Reply, stop: str | None) -> Event:
        """The ``assistant/message`` a finished reply is stored as, ``stop`` its stop reason."""
        message: Event = {"id": reply.id, "content": reply.blocks}
        if reply.usage is not None:
            message["usage"] = reply.usage
        if stop is not None:
            message["stopReason"] = stop
        return {"type": "assistant/message", "eventId": reply.id, "message": message, "source": self.source(reply.raw)}

    def content_block(self, index: int, block: Event, position: int) -> Event | None:
        """The §3 block of a content block; ``None`` for a tool call the output ceiling cut."""
        kind = block["type"]
        path = f"message.content.{position}."
        if kind == "text":
            return {"type": "text", "text": self.need_str(index, block, "text", path)}
        if kind == "tool_use":
            call_id = self.need_str(index, block, "id", path)
            name = self.need_str(index, block, "name", path)
            tool_input = self.need(index, block, "input", dict, path)
            if UNPARSED_INPUT in tool_input:
                # What the CLI prints for a call whose input JSON the ceiling cut: the model's
                # unfinished call, which the CLI runs and answers with an error.
                return None
            if name in SUBAGENT_TOOLS:
                agent = tool_input.get("subagent_type")
                self.subagent_called(call_id, agent if isinstance(agent, str) else None)
            return {"type": "tool_call", "id": call_id, "name": name, "input": tool_input}
        if kind == "thinking":
            reasoning: Event = {"type": "reasoning", "text": self.need_str(index, block, "thinking", path)}
            if isinstance(block.get("signature"), str):
                reasoning["signature"] = block["signature"]
            return reasoning
        return block  # redacted_thinking, images, server tools: kept as sent

    def subagent_called(self, call_id: str, agent: str | None) -> None:
        """A call of the subagent tool (``agent``: its ``subagent_type``) was read."""

    def usage(self, index: int, usage: Event, path: str, *, partial: bool = False) -> dict[str, int]:
        """§4 usage of a Messages API usage object; both counts 0 when not given unless ``partial``."""
        found: dict[str, int] = {}
        for name, key in USAGE_FIELDS:
            value = usage.get(key)
            if value is None:
                continue
            if type(value) is not int or value < 0:
                raise self.refuse(index, f"{path}{key}", "expected a non-negative integer")
            found[name] = value
        if not partial:
            found.setdefault("inputTokens", 0)
            found.setdefault("outputTokens", 0)
        return found


def tool_content(content: Any) -> Any:
    """A tool result's content as §4 takes it: a string, or blocks (each with a type)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(block, dict) and isinstance(block.get("type"), str)
                                         for block in content):
        return content
    return "" if content is None else str(content)
