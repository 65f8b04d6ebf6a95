"""Service-made run ids (lastword.rules.ids): ULID-shaped, sorting in the order they were made."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from lastword.rules.ids import RUN_ID_PATTERN, new_run_id

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def millis_of(run_id: str) -> int:
    """The 48-bit millisecond time in the id's first ten characters."""
    value = 0
    for char in run_id[:10]:
        value = value * 32 + CROCKFORD.index(char)
    return value


@given(times=st.lists(st.floats(min_value=1.7e9, max_value=2.5e9), min_size=1, max_size=30))
def test_ids_sort_in_the_order_they_were_made_whatever_the_clock_does(times: list[float]) -> None:
    """Ids made one after another sort after each other even when the clock repeats a
    millisecond or steps back; each is 26 Crockford characters and a valid run id."""
    made = [new_run_id(now) for now in times]
    assert made == sorted(made) and len(set(made)) == len(made)
    for run_id in made:
        assert len(run_id) == 26 and set(run_id) <= set(CROCKFORD)
        assert re.fullmatch(RUN_ID_PATTERN, run_id)


def test_an_id_carries_the_millisecond_it_was_made_at() -> None:
    """Made later than any id before it, an id starts with its own time, so a listing by id reads
    in creation order across processes too (the random rest only breaks ties)."""
    later = millis_of(new_run_id()) + 1000  # a millisecond past every id made in this process
    made = [new_run_id((later + 2 * n + 0.5) / 1000) for n in range(100)]  # mid-millisecond: no float rounding
    # Each carries its own millisecond exactly, whatever its random part (a random part of more
    # than 80 bits would spill into the time, and only one id in many would show it).
    assert [millis_of(run_id) for run_id in made] == [later + 2 * n for n in range(100)]
    assert len({run_id[10:] for run_id in made}) == 100  # 80 random bits each


def test_the_clock_is_read_when_no_time_is_given() -> None:
    import time

    before = int(time.time() * 1000)
    assert millis_of(new_run_id()) >= before
