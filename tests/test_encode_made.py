"""``checks.encode_made`` (the CLI ingest's encoding of what an adapter made) is one ``map`` (or one
loop) over the events for speed; it must answer as the per-event definition does: each event's
:func:`~lastword.ingest.checks.storable_made` in turn, held to the limit, the first event that
cannot be stored refused naming the line (``origin``) that made it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastword.errors import LastwordError
from lastword.ingest.checks import ENCODE_ALONE, MAX_NESTING, SHALLOW_BYTES, encode_made, storable_made, too_large_made


def per_event(events: list[dict[str, Any]], origins: list[int], limit: int) -> list[str]:
    """The definition: event by event, as the ingest read before it was one loop."""
    encoded = []
    for event, origin in zip(events, origins, strict=True):
        body = storable_made(event, origin)
        if len(body) > limit:
            raise too_large_made(origin, len(body), limit)
        encoded.append(body.decode())
    return encoded


def nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


# Chunks (what check_made lets through unchecked) whose source nests from shallow to deeper
# than can be stored, and whose text makes some of them longer than the limit, or longer than
# SHALLOW_BYTES while shallow (a batch of ENCODE_ALONE or more is written by map first).
chunks = st.builds(
    lambda text, levels, origin: ({"type": "assistant/chunk", "delta": {"type": "text", "text": text},
                                   "source": {"format": "codex", "events": [nested(levels)]}}, origin),
    st.one_of(st.text(max_size=40), st.text(min_size=SHALLOW_BYTES, max_size=SHALLOW_BYTES + 100)),
    # The source's lists nest three levels below the event: from MAX_NESTING - 2 levels on it is
    # too deep to be stored, though orjson writes it plainly up to MAX_NESTING + 1 (then 400).
    # Mostly shallow: a list of ENCODE_ALONE or more with one that orjson cannot write is
    # written event by event whatever else it holds.
    st.one_of(st.sampled_from([0, 3]), st.sampled_from([0, 3]), st.sampled_from([0, 3]),
              st.integers(min_value=MAX_NESTING - 5, max_value=MAX_NESTING + 2)),
    st.integers(min_value=0, max_value=10_000))


def answer(events: list[dict[str, Any]], origins: list[int], limit: int,
           encode: Any) -> tuple[str, Any]:
    try:
        return "stored", encode(events, origins, limit)
    except LastwordError as error:
        return "refused", (error.code, error.status, error.detail, dict(error.extra))


@settings(max_examples=300, deadline=None)
# Lengths drawn evenly (a list's length is otherwise mostly under ENCODE_ALONE).
@given(st.integers(min_value=0, max_value=3 * ENCODE_ALONE).flatmap(lambda size: st.lists(chunks, min_size=size, max_size=size)),
       st.integers(min_value=40, max_value=2_000))
def test_encode_made_answers_as_each_event_encoded_in_turn(made: list[tuple[dict[str, Any], int]], limit: int) -> None:
    events = [event for event, _ in made]
    origins = [origin for _, origin in made]
    assert answer(events, origins, limit, encode_made) == answer(events, origins, limit, per_event)


def test_the_refused_event_is_named_by_its_own_line_not_the_first() -> None:
    """A deep event after a storable one: too_deeply_nested naming the deep one's origin."""
    ok = {"type": "assistant/chunk", "delta": {"type": "text", "text": "a"}}
    deep = {"type": "assistant/chunk", "delta": {"type": "text", "text": "b"}, "source": nested(400)}
    with pytest.raises(LastwordError) as refused:
        encode_made([ok, deep], [3, 9], 1_000_000)
    assert (refused.value.code, refused.value.extra["index"]) == ("too_deeply_nested", 9)


def test_a_long_event_too_deep_to_store_among_many_is_refused() -> None:
    """Among ENCODE_ALONE short chunks (written by one map), a long one that orjson writes plainly
    but that nests too deeply to be stored is refused, naming its line."""
    short = [{"type": "assistant/chunk", "delta": {"type": "text", "text": "a"}}] * ENCODE_ALONE
    deep = {"type": "assistant/chunk", "delta": {"type": "text", "text": "b"}, "source": nested(MAX_NESTING + 1)}
    assert len(orjson.dumps(deep)) >= SHALLOW_BYTES
    with pytest.raises(LastwordError) as refused:
        encode_made([*short, deep], [*range(ENCODE_ALONE), 77], 1_000_000)
    assert (refused.value.code, refused.value.extra["index"]) == ("too_deeply_nested", 77)
