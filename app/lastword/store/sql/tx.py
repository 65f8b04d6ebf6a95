"""One transaction on a DB-API cursor, and running blocking work off the event loop.

Statements are written once with ``?`` placeholders; :class:`Tx` rewrites them for the driver
(psycopg wants ``%s``). Why threads and synchronous drivers: the logic that assigns ``seq``,
dedupes ``eventId`` and ends turns must hold the run's row lock and the turn's fold together,
and writing it once for both backends matters more than an async driver would (psycopg offers
the same synchronous API as ``sqlite3``; the event loop only waits on a future).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from typing import Any, ParamSpec, Protocol, TypeVar

from lastword.rules.records import RunRecord

T = TypeVar("T")
P = ParamSpec("P")


class Holdable(Protocol):
    """Something a transaction keeps locked until it ends (a fold slot)."""

    def acquire(self) -> None: ...

    def release(self, committed: bool) -> None: ...

    def discard(self) -> None:
        """Forget what it holds: a write that used it was rolled back (lock still held)."""


class Holds:
    """What one transaction holds, shared by the writes a group commit runs in it."""

    def __init__(self) -> None:
        #: By identity, in the order taken. (A list searched on every hold made a batch of N
        #: writes cost N² steps: a fleet's batch is hundreds of one-line appends.)
        self._held: dict[int, Holdable] = {}

    def hold(self, thing: Holdable) -> None:
        # An earlier write of the same transaction may hold it already (the lock is not reentrant).
        if id(thing) not in self._held:
            thing.acquire()
            self._held[id(thing)] = thing

    def release(self, committed: bool) -> None:
        for thing in self._held.values():
            thing.release(committed)
        self._held.clear()


class Tx:
    """One transaction (or one write of a group commit); what it holds is released after commit or rollback."""

    def __init__(self, cursor: Any, convert: Callable[[str], str], holds: Holds | None = None) -> None:
        self.cursor = cursor
        self._convert = convert
        self._holds = Holds() if holds is None else holds
        self._used: list[Holdable] = []

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self._execute(self._convert(sql), params)
        return list(self.cursor.fetchall())

    def rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[Any]:
        """The rows one at a time, for results too long to hold as one list."""
        self._execute(self._convert(sql), params)
        return iter(self.cursor)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self._execute(self._convert(sql), params)
        return self.cursor.fetchone()

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        """A statement whose result nobody reads (a backend may send it later, in order: flush)."""
        self._execute(self._convert(sql), params)

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.flush()
        self.cursor.executemany(self._convert(sql), rows)

    def flush(self) -> None:
        """Send the statements :meth:`run` may have held back (before using ``cursor`` directly)."""

    def locked_run(self, run_id: str) -> Any:
        """The run's row, if this transaction locked it before the write began (None: select it).

        PostgreSQL's merged commit locks the rows of a whole batch in one statement
        (:mod:`lastword.store.postgres.group`); each is handed out once, to the batch's first
        write on that run, since the writes after it see it changed."""
        return None

    def known_run(self, run_id: str) -> RunRecord | None:
        """The run as the writes before this one left it, if the writer knows it without reading
        its row (None: read it). SQLite's group commit keeps the runs its appends left, from one
        batch to the next (:class:`lastword.store.sqlite.held.KnownRuns`)."""
        return None

    def wrote_run(self, run: RunRecord) -> None:
        """This write set the run's row to ``run``: every column as the record says
        (:func:`lastword.store.sql.writes.persist`)."""

    def stored_ids(self, run_id: str, ids: list[str]) -> list[Any] | None:
        """The ``(event_id, body)`` rows the run's log holds under ``ids``, if this transaction read
        them before the write began (None: select them). SQLite's group commit reads those of a
        batch's appends in one statement (:class:`lastword.store.sqlite.held.BatchRuns`)."""
        return None

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        self.cursor.execute(sql, params)

    def hold(self, thing: Holdable) -> None:
        self._holds.hold(thing)
        self._used.append(thing)

    def spoil(self) -> None:
        """This write was rolled back (to its savepoint): drop what it may have changed in memory."""
        for thing in self._used:
            thing.discard()

    def finish(self, committed: bool) -> None:
        self._holds.release(committed)


async def run_in(executor: Executor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` on ``executor`` without blocking the event loop."""
    call = functools.partial(fn, *args, **kwargs) if kwargs else functools.partial(fn, *args)
    return await asyncio.get_running_loop().run_in_executor(executor, call)
