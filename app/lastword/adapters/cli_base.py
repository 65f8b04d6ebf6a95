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
from typing import Any, ClassVar, NamedTuple

from lastword.adapters.base import JSON_NAMES, Event, NotTheFormat, StreamStop, refusal

__all__ = ["CliAdapter", "Event", "Made", "NotTheFormat", "StreamStop"]


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

    def need(self, index: int, container: Any, key: str, kind: type | tuple[type, ...], path: str = "") -> Any:
        """``container[key]``, refused with 422 naming the line unless present and of ``kind``."""
        value = container.get(key) if isinstance(container, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.refuse(index, f"{path}{key}", f"expected {JSON_NAMES.get(names, names)}")
        return value

    def need_str(self, index: int, container: Any, key: str, path: str = "") -> str:
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
