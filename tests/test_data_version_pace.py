"""How often a ``--workers`` SQLite worker looks for the others' commits (lastword.fanout.data_version)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lastword.fanout import data_version
from lastword.fanout.data_version import HOT_SECONDS, IDLE_WATCH_SECONDS, WATCH_SECONDS, DataVersionListener, WatchPace
from lastword.store.notices import Notice, StreamNotice
from lastword.store.sqlite.store import SqliteStore
from tests.store_contract import T0, spec


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


#: Commits heard while resting; each can race the look its write wakes (see the watcher).
ROUNDS = 200


@pytest.mark.anyio
async def test_an_idle_worker_hears_another_workers_commit_at_its_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once quiet, a worker waits for the kernel to say the database was written instead of
    looking on a timer: with the timer set to an hour, each commit of another process is still
    heard at once. Each round commits only once the watcher is resting (its signal, not a
    sleep), so every commit lands in the idle wait. A commit's write to the -wal file comes
    before the commit is visible: a watcher that looked once at the write and went back to rest
    missed about one commit in a hundred (an hour late here; 200 rounds caught it 3 times in 3)."""
    monkeypatch.setattr(data_version, "SAFETY_LOOK_SECONDS", 3600.0)
    monkeypatch.setattr(data_version, "IDLE_WATCH_SECONDS", 3600.0)
    other = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600, notices=True)
    await other.open()
    heard: asyncio.Queue[Notice | StreamNotice] = asyncio.Queue()

    async def deliver(notices: list[Notice | StreamNotice]) -> None:
        for notice in notices:
            heard.put_nowait(notice)

    listener = DataVersionListener(other.path, deliver, lambda: None)
    await listener.start()
    try:
        for trial in range(ROUNDS):
            assert await asyncio.to_thread(listener.resting.wait, 10), "the watcher never came to rest"
            await other.create_run(spec(f"run-{trial}"), T0)
            notice = await asyncio.wait_for(heard.get(), 10)
            assert isinstance(notice, Notice) and notice.run_id == f"run-{trial}"
    finally:
        await listener.close()
        await other.close()
