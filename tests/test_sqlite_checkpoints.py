"""The SQLite WAL is checkpointed on a thread of its own, never in a commit (issue 25, the
end → subscriber tail), and stays bounded (:mod:`lastword.store.sqlite.checkpoints`)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from lastword.rules.ds import AppendRequest, CreateRequest
from lastword.store.sqlite.checkpoints import WAL_FRAMES, WRITER_CHECKPOINTS_PAST, Checkpointer, never_checkpoint
from lastword.store.sqlite.store import SqliteStore, enable_wal

pytestmark = pytest.mark.anyio

PAGE = 4096


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    enable_wal(connection)
    never_checkpoint(connection)
    return connection


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.001)


def test_commits_leave_the_checkpoint_to_the_checkpointers_thread(tmp_path: Path) -> None:
    """With the checkpointer held, the writer's commits go on past the threshold and the
    database file is not written (every page is still in the WAL); released, the checkpointer
    copies them, and the writer's next commit starts the WAL over."""
    path = tmp_path / "store.db"
    writer = _connect(path)
    writer.execute("CREATE TABLE t (x BLOB)")
    held, release = threading.Event(), threading.Event()

    def connect() -> sqlite3.Connection:
        held.set()
        release.wait(10)
        return _connect(path)

    checkpointer = Checkpointer(str(path), connect)
    try:
        db_size = os.path.getsize(path)
        for _ in range(WAL_FRAMES + 200):  # a page each, at least
            writer.execute("INSERT INTO t VALUES (?)", (os.urandom(PAGE // 2),))
            checkpointer.committed(writer)
        _until(held.is_set, "the checkpointer was not asked for a checkpoint")
        assert os.path.getsize(path) == db_size, "a commit checkpointed"
        assert checkpointer.checkpoints == 0
        release.set()
        _until(lambda: checkpointer.checkpoints >= 1, "the checkpointer did not checkpoint")
        assert os.path.getsize(path) > db_size + WAL_FRAMES * PAGE // 2
        writer.execute("INSERT INTO t VALUES (1)")
        frames = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        assert frames <= 2, f"the WAL was not started over: {frames} frames"
        assert writer.execute("SELECT count(*) FROM t").fetchone()[0] == WAL_FRAMES + 201
    finally:
        release.set()
        checkpointer.stop()
        writer.close()


async def test_a_stores_wal_stays_bounded_under_writes_without_a_pause(tmp_path: Path) -> None:
    """40 MB appended in 1 MB writes, back to back: the checkpointer's thread cannot copy what
    the writer writes meanwhile, so the writer checkpoints once the WAL is 4 thresholds long."""
    store = SqliteStore(f"sqlite:///{tmp_path / 'lastword.db'}", default_lease_seconds=600)
    await store.open()
    try:
        await store.ds_create(CreateRequest(path="/big", content_type="application/octet-stream", ttl=None,
                                            expires_at=None, expires_epoch=None, closed=False, body=b""), 0.0)
        for n in range(40):
            await store.ds_append(AppendRequest(path="/big", content_type="application/octet-stream",
                                                body=os.urandom(1 << 20), close=False, producer=None,
                                                stream_seq=None), float(n))
        wal = os.path.getsize(tmp_path / "lastword.db-wal")
        assert wal < (WAL_FRAMES * WRITER_CHECKPOINTS_PAST + 2 * 256) * (PAGE + 24), f"the WAL grew to {wal:,} bytes"
    finally:
        await store.close()


def test_a_checkpoint_is_asked_for_once_per_threshold_of_new_frames(tmp_path: Path) -> None:
    """3,000 small commits, back to back (two frames or so each): a checkpoint per 1,000 new
    frames, not one per commit. A commit made during a checkpoint does not ask for another at
    once: so asked, every commit did until the WAL was started over (each one syncs)."""
    path = tmp_path / "store.db"
    writer = _connect(path)
    writer.execute("CREATE TABLE t (x BLOB)")
    checkpointer = Checkpointer(str(path), lambda: _connect(path))
    try:
        for _ in range(3000):
            writer.execute("INSERT INTO t VALUES (?)", (os.urandom(64),))
            checkpointer.committed(writer)
        asked = checkpointer.checkpoints + checkpointer.writer_checkpoints
        assert 1 <= asked <= 20, f"{asked} checkpoints"
    finally:
        checkpointer.stop()
        writer.close()
