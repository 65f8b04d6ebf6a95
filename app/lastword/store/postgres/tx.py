"""PostgreSQL's transaction: statements nobody waits for are held back and sent in a pipeline.

:class:`PipelinedTx` is every PostgreSQL transaction of :mod:`lastword.store.postgres.store`; the
merged commit of single appends (:mod:`lastword.store.postgres.group`) runs many writes in one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from lastword.store.sql.tx import Holds, Tx


@functools.lru_cache(maxsize=512)
def to_pyformat(statement: str) -> str:
    """The shared ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return statement.replace("%", "%%").replace("?", "%s")



class PipelinedTx(Tx):
    """A transaction that sends what it need not wait for together with what it must.

    A statement whose result nobody reads (``run``: the ``BEGIN`` itself, a ``NOTIFY``, the
    run's ``UPDATE``) is held back and goes out in one pipeline with the next statement that
    returns rows, or with the ``COMMIT``; a COPY (:meth:`copy_in`) is left streaming and
    completed just before the next statement. A batch append thus waits for the server four
    times (``BEGIN`` with the run's row lock, the COPY's start, its end, the rest with the
    ``COMMIT``) instead of seven, and the server stores the rows while the fold is computed.
    Order is kept, and an error surfaces at the next exchange, still inside the transaction, so
    it rolls back and is mapped like any other.
    """

    def __init__(self, connection: psycopg.Connection[Any], begin: str, holds: Holds | None = None) -> None:
        super().__init__(connection.cursor(), to_pyformat, holds)
        self.connection = connection
        self._held: list[tuple[str, Sequence[Any] | None]] = [(begin, None)]
        self._copy: contextlib.ExitStack | None = None
        self.sent = False  # whether anything reached the server yet

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._held.append((to_pyformat(sql), params))

    def copy_in(self, statement: str, pieces: Iterable[str]) -> None:
        """Start ``COPY … FROM STDIN`` and send ``pieces``; it completes with the next statement."""
        self.flush()
        self._copy = contextlib.ExitStack()
        copy = self._copy.enter_context(self.cursor.copy(statement))
        for piece in pieces:
            copy.write(piece)

    def flush(self) -> None:
        self._end_copy()
        if self._held:
            self._send(None)

    def settle(self) -> None:
        """Before the commit, find what can still fail safely: a COPY in progress is completed
        and, when nothing reached the server yet, what was held back is sent (a connection that
        died idle in the pool is found while a retry is still safe)."""
        self._end_copy()
        if not self.sent:
            self.flush()

    def commit(self) -> None:
        self._end_copy()
        self._held.append(("COMMIT", None))
        self._send(None)

    def roll_back(self) -> None:
        """Give up the transaction: what was not sent, a COPY still open (failed), and on the
        server a ``ROLLBACK``, unless the connection is gone (the pool discards it)."""
        self._held.clear()
        copy, self._copy = self._copy, None
        if copy is not None:
            with contextlib.suppress(psycopg.Error):
                failed = RuntimeError("the transaction is rolled back")
                copy.__exit__(RuntimeError, failed, None)
        if not self.connection.broken:
            with contextlib.suppress(psycopg.Error):  # the pool discards a connection it cannot reset
                self.connection.execute("ROLLBACK")

    def _end_copy(self) -> None:
        copy, self._copy = self._copy, None
        if copy is not None:
            copy.close()

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        self._end_copy()
        if self._held:
            self._send((sql, params))
        else:
            self.cursor.execute(sql, params)

    def _send(self, last: tuple[str, Sequence[Any]] | None) -> None:
        held, self._held = self._held, []
        self.sent = True
        if len(held) == 1 and last is None:
            self.connection.execute(held[0][0], held[0][1])
            return
        with self.connection.pipeline():
            for sql, params in held:
                self.connection.execute(sql, params)
            if last is not None:
                self.cursor.execute(*last)
