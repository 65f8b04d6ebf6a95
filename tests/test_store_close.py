"""Closing the store leaves the event loop free (issue 22, item 9).

Closing waits for the writer's last batch and the readers' last reads. Joining those threads on
the loop froze every other task until they were done: here the last write waits for a lock
another connection holds, and that connection lets go only once the loop has run other work
while the store closes (each wait bounded, none timed).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from lastword.store.sqlite.store import SqliteStore

#: Loop turns another task must get while the store closes.
TURNS = 100


def test_closing_the_store_does_not_block_the_loop(tmp_path: Path) -> None:
    """While the store waits for its last write, the loop runs other tasks."""
    path = tmp_path / "lastword.db"

    async def scenario() -> bool:
        store = SqliteStore(f"sqlite:///{path}", default_lease_seconds=600)
        await store.open()
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # the store's writer waits for this lock
        loop_ran = threading.Event()
        closed = False

        def let_go() -> None:
            loop_ran.wait(30)  # a bound: a loop blocked by the close never sets it
            other.execute("ROLLBACK")

        async def other_task() -> None:
            turns = 0
            while not closed:
                await asyncio.sleep(0)
                turns += 1
                if turns == TURNS:
                    loop_ran.set()

        releaser = threading.Thread(target=let_go)
        releaser.start()
        ticker = asyncio.create_task(other_task())
        write = asyncio.create_task(store.delete_ended_runs(0.0, 0.0))
        await asyncio.sleep(0)  # the write is submitted
        await store.close()
        ran_while_closing = loop_ran.is_set()  # nothing else ran between the close and here
        closed = True
        await ticker
        await asyncio.gather(write, return_exceptions=True)
        releaser.join(timeout=60)
        other.close()
        return ran_while_closing

    assert asyncio.run(scenario()), "the loop ran nothing else while the store closed"


def test_a_write_after_the_close_began_is_refused_not_left_waiting(tmp_path: Path) -> None:
    """The loop runs on while the store closes, so a request may still write: it gets 503
    ``store_unavailable`` at once instead of a job queued behind the writer's end, never answered."""
    from lastword.errors import Unavailable

    async def scenario() -> BaseException | None:
        store = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600)
        await store.open()
        await store.close()
        try:
            await asyncio.wait_for(store.delete_ended_runs(0.0, 0.0), 30)  # a bound, not a timing
        except (Unavailable, TimeoutError) as error:
            return error
        return None

    refused = asyncio.run(scenario())
    assert isinstance(refused, Unavailable), refused
