"""The checks every ingested event passes before it is stored, in one place: the §4 rules
(:func:`lastword.rules.events.validate_events`), the nesting a stored value may have, and the
size of its JSON.

Two kinds of event reach them. An event a producer pushed (``/events``, ``/ds``) is named in a
refusal by its own index in the body (:func:`check_pushed`, :func:`encode_events`). An event an
adapter made from a provider's or a CLI's stream is named by the provider event (or CLI line)
that completed it (:func:`check_made`, :func:`encode_made`): the adapters check the shape of
what they read, so a refusal here is a safety net for the values they pass on.
"""

from __future__ import annotations

import asyncio
from itertools import compress, count
from typing import Any

import orjson

from lastword.errors import EventTooLarge, InvalidEvent, InvalidProviderEvent, LastwordError, TooDeeplyNested
from lastword.rules.events import validate_events

#: Levels of nesting kept free for the envelopes that stored values are served in (a stream's
#: ``run/snapshot`` holds a run's metadata and a turn's error one level deeper than sent).
NESTING_HEADROOM = 4  # storable_json's literal holds as many lists
MAX_NESTING = 254 - NESTING_HEADROOM


def check_pushed(events: list[Any], *, index_offset: int = 0) -> None:
    """The §4 check of events a producer pushed; a refusal names the event's index in the body
    (``index_offset`` is the index of ``events[0]``)."""
    validate_events(events, index_offset=index_offset)


def check_made(events: list[dict[str, Any]], origins: list[int]) -> None:
    """The §4 check of events an adapter made, ``origins[i]`` the provider event (or CLI line)
    that completed ``events[i]``; 422 ``invalid_provider_event`` naming it.

    Chunks are made from strings the adapters checked; the rest gets the full §4 check.
    """
    checked = [position for position, event in enumerate(events) if event["type"] != "assistant/chunk"]
    if not checked:
        return
    try:
        validate_events([events[position] for position in checked])
    except InvalidEvent as error:
        # A safety net, so it names the provider event that completed the refused one (for a
        # message, the last event of the body).
        at = origins[checked[error.extra["index"]]]
        raise InvalidProviderEvent(
            f"event {at} makes a session event that is not valid: {error.extra.get('field')}: "
            f"{error.extra['errors'][0]['message']}",
            index=at, field=error.extra.get("field"),
        ) from None


def storable_json(value: Any, index: int | None = None) -> bytes:
    """``value`` as it will be stored (JSON); 400 if it nests too deeply to be served back.

    orjson reads up to 1024 levels of nesting but writes at most 254, so a value between the
    two would parse and then fail every answer that holds it: it is refused as input instead.
    One encoding serves both the check and the store.
    """
    try:
        # The four lists written as one literal: built in a loop they cost a quarter of the
        # call for a small event. (Writing the value plain first, and wrapped only when its
        # brackets could nest that deep, made a bracket-heavy event 3-4 times slower.)
        return orjson.dumps([[[[value]]]])[NESTING_HEADROOM:-NESTING_HEADROOM]
    except orjson.JSONEncodeError:
        where = "the body" if index is None else f"event {index}"
        extra = {} if index is None else {"index": index}
        raise TooDeeplyNested(f"{where} nests JSON deeper than {MAX_NESTING} levels", **extra) from None


#: Events encoded between two looks at the event loop.
ENCODE_SLICE = 256
#: Fewer events than this are encoded one by one: for one event (a streaming child's request)
#: the slice's steps cost more than they save (15,500 instructions against 8,600).
ENCODE_ALONE = 8


async def encode_events(events: list[dict[str, Any]], max_event_bytes: int) -> list[str]:
    """Each pushed event's JSON as it will be stored; 413 naming the first event over
    ``max_event_bytes`` (its index, so a streamed body keeps the events before it)."""
    if len(events) < ENCODE_ALONE:
        return _encode_each(events, 0, max_event_bytes)
    encoded: list[str] = []
    for start in range(0, len(events), ENCODE_SLICE):
        if start:
            await asyncio.sleep(0)  # a big batch is encoded without holding the event loop
        encoded += _encode_slice(events[start : start + ENCODE_SLICE], start, max_event_bytes)
    return encoded


#: A JSON text shorter than this cannot nest deeper than :data:`MAX_NESTING`: each level takes
#: two bytes at least (``[]``, ``{}``).
SHALLOW_BYTES = 2 * (MAX_NESTING + 1)


def _encode_slice(events: list[dict[str, Any]], first_index: int, max_event_bytes: int) -> list[str]:
    """:func:`encode_events` of a slice whose first event is ``first_index``.

    Calling :func:`storable_json` once an event was two thirds of the encoding: here each event
    is written plainly, in C (``map``); a slice whose every event is shorter than
    :data:`SHALLOW_BYTES` cannot nest too deeply, any other is written once more whole, in as many
    lists as :func:`storable_json` puts each event in (the same check for all of them). A slice
    that fails, or holds an event over the limit, goes event by event as before, so the first
    refusal is the same one.
    """
    plain = encode_plainly(events)
    if plain is None or plain[1] > max_event_bytes:
        return _encode_each(events, first_index, max_event_bytes)
    return list(map(bytes.decode, plain[0]))


def encode_plainly(events: list[dict[str, Any]], *, shallow_only: bool = False) -> tuple[list[bytes], int] | None:
    """Each event's :func:`storable_json`, written in C (``map``), and the longest's size; or
    None when one of them nests too deeply (then each goes through :func:`storable_json`, to
    name it): every event
    shorter than :data:`SHALLOW_BYTES` cannot, and when one is not, all are written once more
    whole, in as many lists as :func:`storable_json` puts each event in (one check for all).
    ``shallow_only``: None instead of that second writing (for events of some kilobytes it
    cost ten times the first: its caller writes them one by one)."""
    try:
        bodies = list(map(orjson.dumps, events))
        longest = max(map(len, bodies), default=0)
        if longest >= SHALLOW_BYTES:
            if shallow_only:
                return None
            orjson.dumps([[[events]]])  # each event NESTING_HEADROOM lists deep, as storable_json writes it
    except orjson.JSONEncodeError:
        return None
    return bodies, longest


def _encode_each(events: list[dict[str, Any]], first_index: int, max_event_bytes: int) -> list[str]:
    encoded = []
    for index, event in enumerate(events, first_index):
        body = storable_json(event, index)
        if len(body) > max_event_bytes:
            raise EventTooLarge(
                f"event {index} is {len(body)} bytes as JSON; the limit is {max_event_bytes}",
                index=index, limit=max_event_bytes,
            )
        encoded.append(body.decode())
    return encoded


def storable_made(event: dict[str, Any], origin: int) -> bytes:
    """:func:`storable_json` of an event provider event ``origin`` made, naming it if refused."""
    try:
        return storable_json(event)
    except LastwordError as error:
        raise _named(error, origin) from None


def _named(error: LastwordError, origin: int) -> LastwordError:
    error.extra["index"] = origin
    error.detail = f"event {origin} nests JSON too deeply to be stored"
    return error


def too_large_made(origin: int, size: int, limit: int) -> EventTooLarge:
    return EventTooLarge(f"event {origin} makes an event of {size} bytes; the limit is {limit}",
                         index=origin, limit=limit)


def _made_plainly(events: list[dict[str, Any]], limit: int) -> list[bytes] | None:
    """Each event's :func:`storable_json`, the short ones written by one ``map`` (they cannot nest
    too deeply: :data:`SHALLOW_BYTES`) and only the others by :func:`storable_json` again; None
    when one is refused (then :func:`encode_made` goes event by event, to name the first)."""
    try:
        bodies = list(map(orjson.dumps, events))
        for position in compress(count(), map(SHALLOW_BYTES.__le__, map(len, bodies))):
            bodies[position] = storable_json(events[position])
    except (orjson.JSONEncodeError, TooDeeplyNested):
        return None
    return bodies if max(map(len, bodies), default=0) <= limit else None


def encode_made(events: list[dict[str, Any]], origins: list[int], limit: int) -> list[str]:
    """Adapter-made events checked (:func:`check_made`) and encoded, each held to ``limit``
    bytes; a refusal names the provider event (or CLI line) that completed the event."""
    check_made(events, origins)
    if len(events) != len(origins):
        raise ValueError("one origin an event")
    bodies = _made_plainly(events, limit) if len(events) >= ENCODE_ALONE else None
    if bodies is not None:
        return list(map(bytes.decode, bodies))
    # One loop calling storable_json itself (not storable_made per event: a CLI run is a
    # thousand of them), the event that is refused named afterwards by its position.
    encoded: list[str] = []
    append = encoded.append
    position = 0
    try:
        for position, event in enumerate(events):
            body = storable_json(event)
            if len(body) > limit:
                raise too_large_made(origins[position], len(body), limit)
            append(body.decode())
    except TooDeeplyNested as error:
        raise _named(error, origins[position]) from None
    return encoded
