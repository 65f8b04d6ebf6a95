"""The adapter contract (SPEC §13): a provider's stream events in, the session events of §4 out.

An adapter is pure and incremental: ``feed(index, event)`` takes one provider event (its
position in the body is ``index``) and returns the §4 events it completes, and
``finish(end=...)`` returns what the end of the body completes (the step's
``assistant/message`` and, when asked, its ``turn/end``). An adapter holds only the state of
the message being assembled, so its memory is bounded by the largest message, not the body.

Every event an adapter makes carries ``source: {format, events}`` with the raw provider events
it was made from: each raw event read is in exactly one stored event's ``source``, except those
the format says add nothing (Anthropic's ``ping``, the OpenAI events that only repeat what the
finished output items hold), which are skipped. A ``turn/end`` added for ``?end=true`` is made
from the message's stop reason; its ``source`` lists no raw event, they are in the message's.

``eventId``s come from the provider's own ids (or, when the producer sends one, from its
``Idempotency-Key``), so retrying the same body stores nothing twice.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from lastword.errors import InvalidProviderEvent

Event = dict[str, Any]


@dataclass(slots=True, frozen=True)
class StreamStop:
    """How a provider stream stopped, once its body has been read.

    ``provider`` is the provider's own word (``tool_use``, ``max_output_tokens``, …; ``None``
    for a stream cut off before it said); ``stop_reason`` its §6 value when the stop is
    terminal, ``None`` when it leaves the turn open (a tool call to answer, a paused turn, an
    unfinished stream).
    """

    provider: str | None
    stop_reason: str | None
    error: Any = None


#: A well-formed event that is not what the named format sends (422, naming its index).
NotTheFormat = InvalidProviderEvent


class ProviderAdapter(abc.ABC):
    """Translates one body (one model call) of a provider's stream into §4 events."""

    #: The ``{format}`` of ``POST /v1/runs/{runId}/ingest/{format}``.
    format: ClassVar[str]

    def __init__(self, idempotency_key: str | None = None) -> None:
        self.idempotency_key = idempotency_key
        #: Provider events read so far (skipped ones included).
        self.events_read = 0

    @abc.abstractmethod
    def feed(self, index: int, event: Event) -> list[Event]:
        """Translate one provider event; the §4 events it completes, in order."""

    @abc.abstractmethod
    def finish(self, *, end: bool = False) -> list[Event]:
        """The events the end of the body completes; with ``end``, a terminal stop ends the turn."""

    @property
    @abc.abstractmethod
    def stop(self) -> StreamStop:
        """The stream's stop (meaningful after :meth:`finish`)."""

    # Helpers shared by the formats.

    def source(self, raw: list[Event]) -> dict[str, Any]:
        return {"format": self.format, "events": raw}

    def refuse(self, index: int, field: str, message: str) -> NotTheFormat:
        return refusal(self.format, index, field, message)

    def need(self, index: int, container: Any, key: str, kind: type | tuple[type, ...], path: str = "") -> Any:
        """``container[key]``, refused with 422 unless it is present and of ``kind``."""
        value = container.get(key) if isinstance(container, dict) else None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.refuse(index, f"{path}{key}", f"expected {JSON_NAMES.get(names, names)}")
        return value

    def optional(self, index: int, container: dict[str, Any], key: str, kind: type, path: str = "") -> Any:
        """``container[key]`` when present and not null (then it must be of ``kind``)."""
        if container.get(key) is None:
            return None
        return self.need(index, container, key, kind, path)

    def counts(self, index: int, container: dict[str, Any], keys: Iterable[str], path: str) -> None:
        """Refuse a token count that is not a non-negative integer (a null one means unknown)."""
        for key in keys:
            value = container.get(key)
            if value is not None and (type(value) is not int or value < 0):
                raise self.refuse(index, f"{path}{key}", "expected a non-negative integer")

    def extension(self, kind: str, event_id: str | None, raw: Event, **fields: Any) -> Event:
        """An ``x-<format>-<kind>`` event: kept, never interpreted."""
        event: Event = {"type": f"x-{self.format}-{kind}", **fields}
        if event_id is not None:
            event["eventId"] = event_id
        event["source"] = self.source([raw])
        return event


def refusal(format: str, index: int, field: str, message: str, *, noun: str = "event") -> NotTheFormat:
    """422 for a well-formed ``noun`` (a stream event, a CLI's line) that is not what ``format`` sends."""
    what = "stream event" if noun == "event" else noun
    return NotTheFormat(
        f"{noun} {index}: {field}: {message} (not a {format} {what})", index=index, field=field, format=format,
    )


JSON_NAMES = {"dict": "an object", "str": "a string", "int": "an integer", "list": "an array", "bool": "a boolean"}


def with_id(event: Event, event_id: str | None) -> Event:
    """``event`` with its ``eventId`` (none when the stream gives nothing to derive one from)."""
    if event_id is not None:
        event["eventId"] = event_id
    return event


def chunk(kind: str, text: str, event_id: str | None, source: dict[str, Any]) -> Event:
    """An ``assistant/chunk`` text or reasoning delta."""
    event: Event = {"type": "assistant/chunk", "delta": {"type": kind, "text": text}}
    with_id(event, event_id)
    event["source"] = source
    return event


def usage_of(pairs: Iterable[tuple[str, Any]]) -> dict[str, int] | None:
    """A §4 usage from (field, value) pairs, leaving out unknown (``None``) optional counts.

    ``None`` when the input or output count is unknown: a usage needs both.
    """
    usage = {name: value for name, value in pairs if value is not None}
    if "inputTokens" not in usage or "outputTokens" not in usage:
        return None
    return usage
