"""Checkpoints of the SQLite WAL, on a thread of their own rather than in a commit.

SQLite checkpoints in the connection whose commit takes the WAL past ``wal_autocheckpoint``
pages (1,000: about 4 MB): that commit copies the WAL's pages into the database file and syncs
both before it returns. With one writer thread, every write waiting behind that commit waited
for the copy and the syncs too. In scenario (d) (one subscriber, 400 turns) it was every 32nd
turn's end answered ~5 ms late: the whole of the 99th percentile, which went with
``wal_autocheckpoint=0``.

So the store's connections never checkpoint by themselves. After each commit the writer calls
:meth:`Checkpointer.committed`, which reads how many frames the WAL holds from the wal-index
header (``mxFrame``, offset 16 of the ``-shm`` file, in the host's byte order: SQLite's WAL
format, https://www.sqlite.org/walformat.html); 1,000 frames past what the last checkpoint
copied (or past 1,000 in a WAL started over), the checkpointer's thread runs a ``PASSIVE``
checkpoint on its own connection: it waits for no writer and no reader, and
copies what no reader still needs. Once all of the WAL is copied, the writer's next
transaction starts the WAL over (the file is written over from its start, not truncated:
``journal_size_limit=0``, which truncated it there so that its size could be read instead,
put most of the ~5 ms back into that transaction).

A checkpoint under way while the writer goes on writing cannot copy what is written meanwhile,
and the WAL is started over only once all of it is copied: under writes without a pause (40 MB
in 1 MB appends, back to back) the WAL grew to all of it. So past four times the
threshold the writer checkpoints itself, after its commit, as SQLite would have (a checkpoint
with no write running copies everything), once the thread's checkpoint under way, if any, is
over (of two at once, the second copies nothing): a bound on the WAL, paid only when the
checkpointer cannot keep up.

Durability does not change: a commit is in the WAL, as durable as ``synchronous`` makes it,
before it is answered, checkpointed or not.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: The WAL frames (pages) past which a checkpoint is due: SQLite's own default.
WAL_FRAMES = 1000
#: How many times ``WAL_FRAMES`` the WAL may hold before the writer checkpoints it itself.
WRITER_CHECKPOINTS_PAST = 4
#: Where the wal-index header holds ``mxFrame``, the count of valid frames in the WAL.
MX_FRAME_OFFSET = 16


def never_checkpoint(connection: sqlite3.Connection) -> None:
    """Set on every connection of the store: checkpoints are the :class:`Checkpointer`'s alone."""
    connection.execute("PRAGMA wal_autocheckpoint=0")


class Checkpointer:
    """Checkpoints the WAL of ``path`` on a thread and connection of its own once it has grown."""

    def __init__(self, path: str, connect: Callable[[], sqlite3.Connection], *, wal_frames: int = WAL_FRAMES) -> None:
        self._shm_path = path + "-shm"
        self._shm: int | None = None  # its file descriptor, opened by the first commit
        self._connect = connect
        self._wal_frames = wal_frames
        self._due = threading.Event()
        #: Frames of the WAL the last checkpoint had copied: the next is due a threshold later.
        #: (Not at once: a checkpoint asked for by every commit until the WAL starts over
        #: ran 1,975 times in 5,000 small commits, each with its syncs.)
        self._copied = 0
        #: Held by the checkpoint under way (the thread's or the writer's).
        self._running = threading.Lock()
        self._stopped = False
        #: Checkpoints run so far by the thread, and by the writer (for tests and the curious).
        self.checkpoints = 0
        self.writer_checkpoints = 0
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpointer", daemon=True)
        self._thread.start()

    def committed(self, writer: sqlite3.Connection) -> None:
        """A commit went into the WAL (called on the writer's thread, with its connection): a
        checkpoint is due once the WAL is big; the writer's own once it is far too big."""
        try:
            if self._shm is None:
                self._shm = os.open(self._shm_path, os.O_RDONLY)
            frames = int.from_bytes(os.pread(self._shm, 4, MX_FRAME_OFFSET), sys.byteorder)
        except OSError:
            return  # no wal-index (yet): nothing to look at
        if frames < self._copied:
            self._copied = 0  # the WAL was started over
        if frames >= self._wal_frames * WRITER_CHECKPOINTS_PAST:
            with self._running:  # two checkpoints at once: the second copies nothing
                self._copied = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[2]
            self.writer_checkpoints += 1
        elif frames - self._copied >= self._wal_frames:
            self._due.set()

    def stop(self) -> None:
        """End the thread (blocking: not on the event loop); closing the store's last connection
        checkpoints what is left."""
        self._stopped = True
        self._due.set()
        self._thread.join()
        if self._shm is not None:
            os.close(self._shm)
            self._shm = None

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while True:
                self._due.wait()
                self._due.clear()  # before the checkpoint: a commit meanwhile asks for the next one
                if self._stopped:
                    return
                try:
                    connection = connection or self._connect()
                    with self._running:
                        self._copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[2]
                    self.checkpoints += 1
                except sqlite3.Error:
                    # A passing failure (a lock held past the busy time-out): the next commit
                    # asks again. The WAL only grows meanwhile; nothing written is lost.
                    log.exception("a WAL checkpoint failed")
        finally:
            if connection is not None:
                connection.close()
