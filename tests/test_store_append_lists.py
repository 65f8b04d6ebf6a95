"""What the SQL store's append lists about a batch: the eventIds it carries
(lastword.store.sql.reads.event_ids), for any batch."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.store.sql import reads

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
