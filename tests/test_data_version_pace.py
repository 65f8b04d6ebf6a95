"""How often a ``--workers`` SQLite worker looks for the others' commits (lastword.fanout.data_version)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lastword.fanout.data_version import HOT_SECONDS, IDLE_WATCH_SECONDS, WATCH_SECONDS, WatchPace


def test_an_idle_worker_looks_fifty_times_a_second_not_a_thousand() -> None:
    """Looked at every millisecond, two idle workers spent a tenth of a core; once nothing has
    come for HOT_SECONDS the wait doubles up to IDLE_WATCH_SECONDS, and stays there."""
    pace = WatchPace()
    waits = [pace.next(changed=False) for _ in range(200)]
    assert waits[0] == WATCH_SECONDS
    assert waits[-1] == IDLE_WATCH_SECONDS
    assert sum(waits) < 5.0 and sum(waits[:int(HOT_SECONDS / WATCH_SECONDS)]) <= HOT_SECONDS + WATCH_SECONDS
    assert 1 / IDLE_WATCH_SECONDS <= 50


@given(st.lists(st.booleans(), max_size=300))
def test_while_commits_keep_coming_the_worker_looks_every_millisecond(looks: list[bool]) -> None:
    """A commit seen resets the pace: a worker hearing commits at least every HOT_SECONDS keeps
    looking every WATCH_SECONDS (a fleet's ticks are heard within a millisecond); never slower
    than IDLE_WATCH_SECONDS; never faster than WATCH_SECONDS."""
    pace = WatchPace()
    quiet = 0.0
    for changed in looks:
        wait = pace.next(changed=changed)
        assert WATCH_SECONDS <= wait <= IDLE_WATCH_SECONDS
        if changed or quiet < HOT_SECONDS:
            assert wait == WATCH_SECONDS, (quiet, changed)
        quiet = 0.0 if changed else quiet + wait
