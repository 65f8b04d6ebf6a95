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

Every event an adapter makes has an ``eventId`` ``<base>:<suffix>`` (the suffix is the
provider event's position, or ``message`` / ``end``), so retrying the same body stores nothing
twice. The base is the producer's ``Idempotency-Key`` when it sends one; else the provider's own
id for the call (Anthropic's message id, OpenAI's response id), for every event of the body,
those read before the id appeared included; else, for a body that carries no id at all (only an
``error`` event, ACP notifications), ``body-`` and a digest of the body's events and the turn it
was sent in (:meth:`ProviderAdapter.name_events`). An event made before its base is known gets
its id when the body ends.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import orjson

from lastword.errors import InvalidProviderEvent, TooDeeplyNested
from lastword.rules.exact_ints import first_inexact, out_of_range

Event = dict[str, Any]
_T = TypeVar("_T")


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
        #: What every event id starts with, once known (the key, or the provider's id).
        self._base = idempotency_key
        #: Events made before the base was known, with their id's suffix: named at the end
        #: (or handed to a caller that stages them, :meth:`take_unnamed`).
        self._unnamed: list[tuple[Event, str | int]] = []
        self._taken_unnamed = 0
        #: The events read while no base was known (all of them, in a body without one).
        self._digest = hashlib.sha256()

    def read(self, event: Event) -> None:
        """Count one provider event read (call first in :meth:`feed`)."""
        self.events_read += 1
        if self._base is None:
            try:
                encoded = orjson.dumps(event)
            except orjson.JSONEncodeError:
                # Nested deeper than can be written back: a stored event holding it is refused
                # (too_deeply_nested) when the body ends; a skipped one (a ping) adds its place.
                encoded = b"too deep"
            self._digest.update(encoded)
            self._digest.update(b"\n")

    def found_id(self, provider_id: str) -> None:
        """The provider's own id for this call: the base of every id, unless a key was sent."""
        if self._base is None:
            self._base = provider_id

    def named(self, event: Event, suffix: str | int) -> Event:
        """``event`` with its ``eventId`` ``<base>:<suffix>``, now or (base unknown yet) at the end."""
        if self._base is not None:
            event["eventId"] = f"{self._base}:{suffix}"
        else:
            self._unnamed.append((event, suffix))
        return event

    def take_unnamed(self) -> list[tuple[Event, str | int]]:
        """The events made since the last call that still wait for their id, with their suffix.

        A caller that stages the events as it goes (the endpoint, which keeps them encoded, not
        as dicts) takes them and names them itself from :meth:`id_base` when the body ends; the
        adapter then keeps no reference to them.
        """
        taken = self._unnamed
        if taken:  # (most calls find none: no list made for them)
            self._unnamed = []
            self._taken_unnamed += len(taken)
        return taken

    def id_base(self, scope: str = "") -> str:
        """What the ids of events made before the base was known start with (after :meth:`finish`).

        A body that never named its call takes ``body-<digest>``: the digest of ``scope`` (the
        turn it was sent in, so the same body sent in a later turn is that turn's own) and of
        every event it holds, so only the same body in the same turn repeats it.
        """
        if self._base is not None:
            return self._base
        digest = self._digest.copy()
        digest.update(scope.encode())
        return f"body-{digest.hexdigest()[:32]}"

    def name_events(self, scope: str = "") -> None:
        """Give the events made before any base was known their ids (after :meth:`finish`)."""
        if not self._unnamed:
            return
        base = self.id_base(scope)
        for event, suffix in self._unnamed:
            event["eventId"] = f"{base}:{suffix}"
        self._unnamed = []

    @property
    def needs_scope(self) -> bool:
        """Whether :meth:`id_base` will use its ``scope`` (the body named no call, and some
        event waits for an id)."""
        return (bool(self._unnamed) or self._taken_unnamed > 0) and self._base is None

    @abc.abstractmethod
    def feed(self, index: int, event: Event) -> list[Event]:
        """Translate one provider event; the §4 events it completes, in order."""

    def feed_many(self, batch: Iterable[tuple[int, Event]], made: list[Event], origins: list[int]) -> None:
        """:meth:`feed` of each ``(index, event)`` in turn: the events made appended to ``made``,
        the index of the event that completed each to ``origins``. An event refused raises,
        what the events before it made already appended (a body's events a piece at a time:
        one call, not one per event, where calls cost as much as a text delta's translation)."""
        feed_each(self.feed, batch, made, origins)

    @abc.abstractmethod
    def finish(self, *, end: bool = False) -> list[Event]:
        """The events the end of the body completes; with ``end``, a terminal stop ends the turn."""

    @property
    @abc.abstractmethod
    def stop(self) -> StreamStop:
        """The stream's stop (meaningful after :meth:`finish`)."""

    # Helpers shared by the formats.

    def source(self, raw: list[Event] | RawEvents) -> dict[str, Any]:
        return {"format": self.format, "events": raw.fragment() if isinstance(raw, RawEvents) else raw}

    def kept_raw(self, index: int, event: Event) -> bytes:
        """``event`` as it will be written in a message's ``source``: its JSON, not the dict
        (see :class:`RawEvents`).

        A message's source holds every raw event that made no chunk (a tool call's input deltas,
        one per token): kept as dicts until the body ends, they cost ten times their text. An
        event nested too deeply to be stored inside a source is refused here (400
        ``too_deeply_nested``, naming it), as it would be when the message is stored.
        """
        wrapped: Any = event
        for _ in range(_SOURCE_DEPTH):
            wrapped = [wrapped]
        try:
            encoded = orjson.dumps(wrapped)[_SOURCE_DEPTH:-_SOURCE_DEPTH]
        except orjson.JSONEncodeError:
            raise TooDeeplyNested(f"event {index} nests JSON too deeply to be stored", index=index) from None
        return encoded


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

    def chunk(self, kind: str, text: str, suffix: str | int, raw: Event) -> Event:
        """An ``assistant/chunk`` text or reasoning delta made from ``raw``."""
        event = self.named({"type": "assistant/chunk", "delta": {"type": kind, "text": text}}, suffix)
        event["source"] = self.source([raw])
        return event

    def extension(self, kind: str, suffix: str | int, raw: Event, **fields: Any) -> Event:
        """An ``x-<format>-<kind>`` event: kept, never interpreted."""
        event = self.named({"type": f"x-{self.format}-{kind}", **fields}, suffix)
        event["source"] = self.source([raw])
        return event



class RawEvents:
    """The raw events of a message's ``source``, kept as one buffer of JSON text.

    A message's source holds every raw event that made no chunk (a tool call's input deltas,
    one per token): as dicts they cost ten times their text, and even one bytes object each
    costs twice. :meth:`fragment` is the JSON array, for ``orjson.dumps`` to write as it is.
    """

    __slots__ = ("_text",)

    def __init__(self) -> None:
        self._text = bytearray(b"[")

    def append(self, encoded: bytes) -> None:
        if len(self._text) > 1:
            self._text += b","
        self._text += encoded

    def fragment(self) -> orjson.Fragment:
        """The array, once: the buffer is handed over and emptied, so a long source is never
        held twice (the buffer and its copy) longer than the copy takes."""
        self._text += b"]"
        text, self._text = bytes(self._text), bytearray(b"[")
        return orjson.Fragment(text)


class TextPieces:
    """Strings to join once at the end (a block's deltas), joined a few hundred at a time.

    A delta may be one character: a list of them costs some sixty bytes a character (a str
    object and its pointer), so a long stream of them is kept as a few long strings instead.
    """

    __slots__ = ("_joined", "_pending")

    #: Pieces gathered before they are joined into one.
    BATCH = 256

    def __init__(self) -> None:
        self._joined: list[str] = []
        self._pending: list[str] = []

    def append(self, text: str) -> None:
        self._pending.append(text)
        if len(self._pending) >= self.BATCH:
            self._joined.append("".join(self._pending))
            self._pending.clear()

    def __bool__(self) -> bool:
        return bool(self._joined or self._pending)

    def text(self) -> str:
        return "".join([*self._joined, *self._pending])


#: Levels around a raw event in a stored message: the serving headroom (``NESTING_HEADROOM`` of
#: ``lastword.ingest.checks``, 4) and ``{…, "source": {"events": [event]}}`` (3).
_SOURCE_DEPTH = 7


def refusal(format: str, index: int, field: str, message: str, *, noun: str = "event") -> NotTheFormat:
    """422 for a well-formed ``noun`` (a stream event, a CLI's line) that is not what ``format`` sends."""
    what = "stream event" if noun == "event" else noun
    article = "an" if format[:1] in "aeiou" else "a"  # an anthropic, an opencode, an openai-responses
    return NotTheFormat(
        f"{noun} {index}: {field}: {message} (not {article} {format} {what})", index=index, field=field, format=format,
    )


JSON_NAMES = {"dict": "an object", "str": "a string", "int": "an integer", "list": "an array", "bool": "a boolean"}


def check_exact_text(text: str, index: int, field: str) -> None:
    """JSON a provider sends inside a string (a tool call's input), already read by orjson, held
    to the exact-integer rule of ``/events``: an integer orjson changed is refused (422
    ``number_out_of_range``) naming the provider event ``index`` and its string ``field``."""
    try:
        found = first_inexact(text, items=False)
    except TooDeeplyNested as error:
        error.extra["index"] = index
        error.detail = f"event {index}: {field} nests JSON too deeply to be read exactly or stored"
        raise
    if found is not None:
        raise out_of_range(f"event {index}: {field} (at {found[1].removeprefix('.') or 'its top'})",
                           index=index, field=field)


def feed_each(feed: Callable[[int, Any], list[_T]], batch: Iterable[tuple[int, Any]], made: list[_T],
              origins: list[int]) -> None:
    """``feed(index, item)`` of each ``(index, item)`` of ``batch`` in turn, what each made appended
    to ``made`` and its index to ``origins``, once an item: the ``feed_many`` of every adapter,
    provider or CLI, that has no faster one. When ``feed`` refuses an item, what the items before
    it made is already appended (the ingest stores it, or checks it first)."""
    for index, item in batch:
        events = feed(index, item)
        made += events
        origins += [index] * len(events)


def chunk(kind: str, text: str, event_id: str | None, source: dict[str, Any]) -> Event:
    """An ``assistant/chunk`` text or reasoning delta (with ``event_id`` unless it is None)."""
    if event_id is None:
        return {"type": "assistant/chunk", "delta": {"type": kind, "text": text}, "source": source}
    # One literal: a dict grown key by key was a tenth of a text delta's translation.
    return {"type": "assistant/chunk", "delta": {"type": kind, "text": text}, "eventId": event_id, "source": source}


def usage_of(pairs: Iterable[tuple[str, Any]]) -> dict[str, int] | None:
    """A §4 usage from (field, value) pairs, leaving out unknown (``None``) optional counts.

    ``None`` when the input or output count is unknown: a usage needs both.
    """
    usage = {name: value for name, value in pairs if value is not None}
    if "inputTokens" not in usage or "outputTokens" not in usage:
        return None
    return usage
