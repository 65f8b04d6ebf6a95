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
(:class:`~lastword.store.sqlite.group.GroupWriter`).

An append reads its run's row first, then the events its run's log holds under the eventIds it
carries. A batch of appends to many runs (a fleet of children, a delta each) has those rows read
in one statement when it begins, and those events in another (:class:`BatchRuns`), and each
append is handed its run's from there instead of reading them alone, unless a write before it
in the batch may have changed them: an earlier write on the same run, or a write that names
no run (an end, a sweep: it may change any run). It then reads them as before.

The runs a batch's appends left are kept for the next batch (:class:`KnownRuns`): an append to
a run whose row a committed append of an earlier batch wrote, with no other write since, is
handed that record and its row is not read (reading and decoding a run's seventeen columns was a
tenth of what a one-line append cost the writer thread).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from lastword.rules.records import RunRecord
from lastword.store.sql.rows import RUN_COLUMNS, RUN_ID_COLUMN
from lastword.store.sqlite.driver import SqliteTx, refuse_nul
from lastword.store.sql.tx import Holds


class HeldChangeFailed(Exception):
    """A change held back by a write without a savepoint failed when sent: the transaction may
    hold part of that write, and must be given up."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _only_reads(sql: str) -> bool:
    return sql.lstrip()[:6].upper() == "SELECT"


#: Most eventIds a batch reads together (two parameters each); a batch asking more has each
#: append read its own.
MAX_BATCH_IDS = 1000


#: Runs :class:`KnownRuns` keeps at most; past it, it starts over (an append then reads its row).
MAX_KNOWN_RUNS = 10_000


class KnownRuns:
    """The runs as the committed appends of the writer's earlier batches left them, by run id.

    Only while nothing else wrote since: a write that names no run (an end, a sweep, a create)
    may change any run, so a batch holding one forgets them all; an append that failed, or was
    not committed, forgets its run. Only for a writer that alone writes the file (not with
    other processes writing it: ``lastword serve --workers``)."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}

    def get(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    def committed(self, written: list[tuple[str | None, RunRecord | None]]) -> None:
        """A batch committed; ``written``: each write's run (None: names none) and the record it
        left, None if it failed or wrote no row."""
        if any(key is None for key, _ in written) or len(self._runs) > MAX_KNOWN_RUNS:
            self._runs.clear()
        for key, run in written:
            if key is None:
                continue
            if run is None or run.run_id != key:
                self._runs.pop(key, None)
            else:
                self._runs[key] = run

    def forget(self) -> None:
        """A batch was not committed (or may not have been)."""
        self._runs.clear()


class BatchRuns:
    """What a batch's appends read first, read for all of them when the batch begins: the rows
    of the runs they name (their ``key``) and the events their runs' logs already hold under
    the eventIds they carry. Each run's is handed out once, while no write before it in the
    batch may have changed it."""

    def __init__(self, cursor: sqlite3.Cursor, writes: Iterable[tuple[str | None, Sequence[str]]],
                 known: KnownRuns | None = None) -> None:
        wanted: dict[str, list[str]] = {}  # run -> the eventIds its appends carry
        with_ids = 0
        for key, ids in writes:
            if key is not None:
                wanted.setdefault(key, []).extend(ids)
                with_ids += bool(ids)
        #: The runs earlier batches left (``known``), for the first write of the batch on each.
        self._known: dict[str, RunRecord] = {}
        if known is not None:
            for run_id in wanted:
                run = known.get(run_id)
                if run is not None:
                    self._known[run_id] = run
        self._rows: dict[str, Any] = {}
        #: By run: the ids asked for, and the (event_id, body) rows found under them.
        self._stored: dict[str, tuple[set[str], list[Any]]] = {}
        #: Each write's run (None: names none) and the record it left it as (:meth:`ran`).
        self.written: list[tuple[str | None, RunRecord | None]] = []
        if len(wanted) > 1:  # one append reads its own row: nothing to save
            runs = [run_id for run_id in wanted if run_id not in self._known]
            if runs:
                cursor.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id IN ({', '.join('?' * len(runs))})", runs)
                self._rows = {row[RUN_ID_COLUMN]: row for row in cursor.fetchall()}
        pairs = list(dict.fromkeys((run_id, event_id) for run_id, ids in wanted.items() for event_id in ids))
        if with_ids > 1 and len(pairs) <= MAX_BATCH_IDS:
            self._stored = {run_id: (set(ids), []) for run_id, ids in wanted.items()}
            cursor.execute(_STORED_IDS.format(", ".join(["(?, ?)"] * len(pairs))), [v for pair in pairs for v in pair])
            for run_id, event_id, body in cursor.fetchall():
                self._stored[run_id][1].append((event_id, body))

    def take(self, run_id: str) -> Any:
        """The run's row as the batch began, or None (read it: it may have changed since). Once
        only: the write it is handed to may change it, and read it again (several appends in one
        write)."""
        return self._rows.pop(run_id, None)

    def known(self, run_id: str) -> RunRecord | None:
        """The run as an earlier batch left it, or None; once only, as :meth:`take`."""
        return self._known.pop(run_id, None)

    def stored(self, run_id: str, ids: list[str]) -> list[Any] | None:
        """The ``(event_id, body)`` rows of the run's log under ``ids`` as the batch began, or
        None (read them). Once only, as :meth:`take`."""
        read = self._stored.pop(run_id, None)
        if read is None or not read[0].issuperset(ids):
            return None
        asked = set(ids)
        return [row for row in read[1] if row[0] in asked]

    def ran(self, key: str | None, left: RunRecord | None = None) -> None:
        """A write of the batch has run: what it may have changed is no longer handed out.
        ``left``: the record it wrote its run's row as, if it succeeded and did."""
        self.written.append((key, left))
        if key is None:
            self._rows.clear()
            self._stored.clear()
            self._known.clear()
        else:
            self._rows.pop(key, None)
            self._stored.pop(key, None)
            self._known.pop(key, None)


# A join on the wanted pairs: SQLite searches the index once a pair (``(run_id, event_id) IN
# (VALUES …)`` scans it whole).
_STORED_IDS = (
    "WITH wanted (run_id, event_id) AS (VALUES {}) "
    "SELECT events.run_id, events.event_id, events.body FROM wanted "
    "CROSS JOIN events INDEXED BY events_by_event_id "
    "ON events.run_id = wanted.run_id AND events.event_id = wanted.event_id"
)


class HeldTx(SqliteTx):
    """Write ``number`` of a batch (see the module's docstring). An append (``key``, the run it
    names) is handed its run's row from ``runs`` if no write before it may have changed it."""

    def __init__(self, connection: sqlite3.Connection, cursor: sqlite3.Cursor, holds: Holds, number: int,
                 key: str | None = None, runs: BatchRuns | None = None) -> None:
        super().__init__(cursor, str, holds)
        self._connection = connection
        self._number = number
        self._key = key
        self._runs = runs
        #: Statements held back, in order: (sql, the values of one statement or the rows of many).
        self._held: list[tuple[str, Sequence[Any] | None, list[Sequence[Any]] | None]] = []
        self.savepoint = False
        #: The run's row as this write left it (:meth:`wrote_run`), if it wrote it.
        self.run_after: RunRecord | None = None

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._held.append((sql, refuse_nul(params), None))

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._held.append((sql, None, [refuse_nul(row) for row in rows]))

    def locked_run(self, run_id: str) -> Any:
        if self._runs is None or run_id != self._key:
            return None
        return self._runs.take(run_id)

    def known_run(self, run_id: str) -> RunRecord | None:
        if self._runs is None or run_id != self._key:
            return None
        return self._runs.known(run_id)

    def wrote_run(self, run: RunRecord) -> None:
        self.run_after = run

    def stored_ids(self, run_id: str, ids: list[str]) -> list[Any] | None:
        if self._runs is None or run_id != self._key:
            return None
        return self._runs.stored(run_id, ids)

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
