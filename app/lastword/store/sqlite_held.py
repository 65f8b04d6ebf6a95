"""One write of a SQLite group commit, its changes held back until it ends: a savepoint only if needed.

A group commit runs many writes in one transaction, and a write that is refused (a 409, a 404)
must leave nothing behind while the others commit. A savepoint per write does that, at two
statements more per write (``SAVEPOINT``, ``RELEASE``): a fifth of what a one-line append costs
the writer thread, whose CPU is the GIL's. Most writes need no savepoint: they read, then
change, and are refused, if at all, before they change anything.

So a write's statements whose results nobody reads (:meth:`HeldTx.run`, :meth:`HeldTx.many`)
are held back, checked as they are held, and sent when the write has returned. A write refused
before that sent no change: what it held is dropped. A write that must send a change before it
ends (it reads after one, or runs a statement that changes and returns rows, like
``INSERT … RETURNING``) opens its savepoint then, before that change, and is rolled back to
it if refused, as every write was before.

A held statement that SQLite refuses when it is sent, in a write without a savepoint, may
have left part of the write behind (an ``executemany`` stops at the failing row): the writer
then gives up the transaction and runs the batch again, a savepoint per write
(:class:`~lastword.store.group.GroupWriter`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from lastword.store.sqlite_driver import SqliteTx, refuse_nul
from lastword.store.tx import Holds


class HeldChangeFailed(Exception):
    """A change held back by a write without a savepoint failed when sent: the transaction may
    hold part of that write, and must be given up."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _only_reads(sql: str) -> bool:
    return sql.lstrip()[:6].upper() == "SELECT"


class HeldTx(SqliteTx):
    """Write ``number`` of a batch (see the module's docstring)."""

    def __init__(self, connection: sqlite3.Connection, cursor: sqlite3.Cursor, holds: Holds, number: int) -> None:
        super().__init__(cursor, str, holds)
        self._connection = connection
        self._number = number
        #: Statements held back, in order: (sql, the values of one statement or the rows of many).
        self._held: list[tuple[str, Sequence[Any] | None, list[Sequence[Any]] | None]] = []
        self.savepoint = False

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._held.append((sql, refuse_nul(params), None))

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._held.append((sql, None, [refuse_nul(row) for row in rows]))

    def flush(self) -> None:
        # Whoever flushes is about to use the cursor directly, to change something perhaps.
        self._open_savepoint()
        self._send_held()

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        if self._held or not _only_reads(sql):
            self.flush()  # a read sees the write's own changes; a change gets its savepoint
        super()._execute(sql, params)

    def _open_savepoint(self) -> None:
        if not self.savepoint:
            self._connection.execute(f"SAVEPOINT w{self._number}")
            self.savepoint = True

    def _send_held(self) -> None:
        held, self._held = self._held, []
        for sql, params, rows in held:
            if rows is None:
                self.cursor.execute(sql, params or ())
            else:
                self.cursor.executemany(sql, rows)

    def complete(self) -> None:
        """The write returned: send what it held; then its savepoint, if any, is released.

        Raises :class:`HeldChangeFailed` when a change fails without a savepoint to go back to;
        with one, the error itself (the caller rolls back to it)."""
        if self.savepoint:
            self._send_held()
            self._connection.execute(f"RELEASE w{self._number}")
            return
        try:
            self._send_held()
        except Exception as error:
            raise HeldChangeFailed(error) from error

    def undo(self) -> None:
        """The write was refused: roll back what it sent, if anything (what it held is never sent)."""
        if self.savepoint:
            self._connection.execute(f"ROLLBACK TO w{self._number}")
            self._connection.execute(f"RELEASE w{self._number}")
        self.spoil()  # a fold it used may hold what was dropped
