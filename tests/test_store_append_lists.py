"""What the SQL store's append lists about a batch: the eventIds it carries, and the types it
accepted (lastword.store.sql.reads.event_ids, lastword.store.sql.store._count_types), for any batch."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.store.sql import reads
from lastword.store.sql.store import _count_types

TYPES = ["assistant/chunk", "assistant/message", "tool/call", "turn/end"]


def event(kind: str, event_id: str | None) -> dict[str, Any]:
    return {"type": kind} if event_id is None else {"type": kind, "eventId": event_id}


batches = st.lists(
    st.builds(event, st.sampled_from(TYPES), st.none() | st.sampled_from(["a", "b", "c", ""])), max_size=12)


@settings(max_examples=300, deadline=None)
@given(events=batches)
def test_the_carried_event_ids_are_listed_once_each_in_order(events: list[dict[str, Any]]) -> None:
    """Every eventId a batch carries (an empty one too), once, where it first came; none: none."""
    expected: list[str] = []
    for one in events:
        if "eventId" in one and one["eventId"] not in expected:
            expected.append(one["eventId"])
    assert reads.event_ids(events) == expected


@settings(max_examples=300, deadline=None)
@given(events=batches)
def test_the_accepted_types_are_counted_in_the_order_they_first_come(events: list[dict[str, Any]]) -> None:
    counted = _count_types([(seq, one, None) for seq, one in enumerate(events, 1)])
    assert counted == Counter(one["type"] for one in events)
    assert list(counted) == list(dict.fromkeys(one["type"] for one in events))
