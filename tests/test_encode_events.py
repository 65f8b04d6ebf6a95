"""``checks.encode_events`` (a pushed batch's JSON as stored) checks the nesting of a whole slice
at once and encodes its events in C; it must answer as the per-event definition does: each
event's :func:`~lastword.ingest.checks.storable_json` in turn, held to the limit, the first
event that cannot be stored refused naming its index in the batch."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lastword.errors import EventTooLarge, LastwordError
from lastword.ingest.checks import ENCODE_SLICE, MAX_NESTING, encode_events, storable_json


def per_event(events: list[dict[str, Any]], limit: int) -> list[str]:
    """The definition: event by event, as the ingest encoded before it took a slice at a time."""
    encoded = []
    for index, event in enumerate(events):
        body = storable_json(event, index)
        if len(body) > limit:
            raise EventTooLarge(f"event {index} is {len(body)} bytes as JSON; the limit is {limit}",
                                index=index, limit=limit)
        encoded.append(body.decode())
    return encoded


def nested(levels: int, lists_only: bool) -> Any:
    """A value ``levels`` deep: lists only (the shortest JSON of its depth), or lists and objects."""
    value: Any = [] if lists_only else 0
    for level in range(levels - 1 if lists_only else levels):
        value = [value] if lists_only or level % 2 else {"k": value}
    return value


def answer(events: list[dict[str, Any]], limit: int, encode: Any) -> tuple[str, Any]:
    try:
        return "stored", encode(events, limit)
    except LastwordError as error:
        return "refused", (error.code, error.status, error.detail, dict(error.extra))


def encode_slices(events: list[dict[str, Any]], limit: int) -> list[str]:
    return asyncio.run(encode_events(events, limit))


# Events nesting from shallow to just past what can be stored, some made long by their text,
# put among plain chunks anywhere in a batch of up to three slices.
_special = st.builds(
    lambda text, levels, lists_only: {"": nested(levels, lists_only)} if lists_only
    else {"type": "x-deep", "text": text, "value": nested(levels, lists_only)},
    st.text(max_size=60),
    st.sampled_from([0, 3, MAX_NESTING - 2, MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 400]),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=3 * ENCODE_SLICE),
       st.lists(st.tuples(st.integers(min_value=0, max_value=3 * ENCODE_SLICE - 1), _special), max_size=4),
       st.integers(min_value=60, max_value=2_000))
def test_encode_events_answers_as_each_event_encoded_in_turn(
        size: int, specials: list[tuple[int, dict[str, Any]]], limit: int) -> None:
    """Stored texts, or the refusal (too deep or too large, the first in the batch), are the same
    as event by event, wherever in which slice the events that cannot be stored are."""
    events: list[dict[str, Any]] = [{"type": "assistant/chunk", "delta": {"type": "text", "text": str(n)}}
                                    for n in range(size)]
    for position, event in specials:
        events[position % size] = event
    assert answer(events, limit, encode_slices) == answer(events, limit, per_event)
