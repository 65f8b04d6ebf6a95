"""What differs between the SQL backends, as the shared queries ask for it: one dialect object
per backend (:class:`SqliteDialect` here, :class:`lastword.store.postgres.store.PostgresDialect`),
held by the store (:class:`lastword.store.sql.store.SqlStore`) and handed to the queries."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any, Protocol

from lastword.rules.runstate import Appended
from lastword.store.notices import Notice, StreamNotice
from lastword.store.sql.rows import EVENT_COLUMNS, dumps
from lastword.store.sql.tx import Tx

#: SQLite's commit notices, for processes sharing the file (PostgreSQL sends them as NOTIFY):
#: the payloads of :mod:`lastword.store.notices`, in commit order. The newest row is never
#: deleted, so an id is never used twice.
NOTICES_TABLE = "CREATE TABLE IF NOT EXISTS commit_notices (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)"
INSERT_NOTICE = "INSERT INTO commit_notices (payload) VALUES (?)"


class Dialect(Protocol):
    #: The events table as the eventId lookup names it (SQLite forces its index there).
    events_by_id: str
    #: Appended to a ``SELECT`` of a run that is about to change (PostgreSQL: ``FOR UPDATE``).
    lock_clause: str
    #: Appended to the outbox's claim of due rows (PostgreSQL: skip rows another replica holds).
    claim_clause: str
    #: Whether a write returns the chunks it stored for the service to publish (SQLite). PostgreSQL's
    #: replicas publish from commit notices and read the chunks from the log (lastword.fanout.local).
    returns_chunks: bool

    def match_ids(self, count: int) -> str:
        """SQL that matches ``event_id`` against ``count`` parameters."""

    def id_params(self, ids: list[str]) -> list[Any]:
        """The parameters for :meth:`match_ids`."""

    def insert_events(
        self, tx: Tx, run_id: str, turn: int, appended: Sequence[Appended], now: float, *, with_ids: bool = True
    ) -> None:
        """Store the rows of events logged in ``turn`` of ``run_id`` at ``now`` (each ``(seq, event,
        its JSON or None)``); a backend may complete it with the transaction's next statement
        (PostgreSQL's COPY streams meanwhile). ``with_ids``: False when the caller knows that none
        of them carries an ``eventId``."""

    def before_feed_insert(self, tx: Tx) -> None:
        """Serialise firehose writers where the database would not (PostgreSQL)."""

    def feed_ids_issued(self, tx: Tx) -> int:
        """The last value the feed's id generator handed out (0 if none), deleted rows included."""

    def after_commit_notice(
        self, tx: Tx, run_id: str, first_seq: int, last_seq: int, feed_id: int | None
    ) -> None:
        """Say, inside the transaction, that ``first_seq..last_seq`` of the run commit with it
        (PostgreSQL: a NOTIFY delivered to every replica if and when it commits)."""

    def after_stream_notice(self, tx: Tx, path: str) -> None:
        """Say, inside the transaction, that the Durable Stream at ``path`` changes with it."""


def event_rows(run_id: str, turn: int, appended: Sequence[Appended], now: float) -> list[tuple[Any, ...]]:
    """The events table's rows (``EVENT_COLUMNS`` order) of events logged in one turn at ``now``."""
    return [
        (run_id, seq, turn, event["type"], event.get("eventId"), _stored(event, encoded), now)
        for seq, event, encoded in appended
    ]


def _stored(event: dict[str, Any], encoded: str | None) -> str:
    """An event's JSON as stored: the caller's encoding when it has one."""
    return encoded if encoded is not None else dumps(event)


#: One event row (``EVENT_COLUMNS`` order). Built once: the driver looks each statement up in
#: its cache by its text, and a text made again for every append is hashed again.
INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"


def insert_event_rows(tx: Tx, rows: list[tuple[Any, ...]]) -> None:
    """Event rows as plain ``INSERT``s (both backends; PostgreSQL copies large batches instead)."""
    tx.many(INSERT_EVENT, rows)


_EVENT_COLUMN_NAMES = [column.strip() for column in EVENT_COLUMNS.split(",")]
#: Where ``event_id`` is in an event row (``EVENT_COLUMNS`` order).
_EVENT_ID = _EVENT_COLUMN_NAMES.index("event_id")
_INSERT_WITHOUT_ID = "INSERT INTO events ({}) VALUES ({})".format(
    EVENT_COLUMNS, ", ".join("NULL" if column == "event_id" else "?" for column in _EVENT_COLUMN_NAMES))

#: Rows without an eventId that one statement inserts (SQLite binds at most 32,766 parameters).
ROWS_PER_INSERT = 100
#: The columns every row of one append shares (bound once a statement), and each row's own (in
#: the order :func:`_insert_hundreds` lists them).
_SHARED_COLUMNS = [column for column in _EVENT_COLUMN_NAMES if column in ("run_id", "turn", "received_at")]
_OWN_COLUMNS = ["seq", "type", "body"]
# The shared values as parameters in the select list (in column order, so they come first), the
# rows' own as the columns of a VALUES list.
_INSERT_ROWS_WITHOUT_ID = "INSERT INTO events ({}) SELECT {} FROM (VALUES {})".format(
    EVENT_COLUMNS,
    ", ".join("NULL" if column == "event_id" else "?" if column in _SHARED_COLUMNS
              else f"column{_OWN_COLUMNS.index(column) + 1}" for column in _EVENT_COLUMN_NAMES),
    ", ".join(["(" + ", ".join("?" * len(_OWN_COLUMNS)) + ")"] * ROWS_PER_INSERT),
)


def _insert_hundreds(tx: Tx, run_id: str, turn: int, plain: Sequence[Appended], now: float) -> int:
    """Insert the first events (none with an eventId) :data:`ROWS_PER_INSERT` at a statement; how
    many were inserted.

    One statement a row was two fifths of an append's instructions on the writer thread: each
    row bound seven values and ran the statement once. A hundred rows a statement bind their
    shared values once and run it once (20,300 -> 11,100 instructions a row, measured alone).
    Each event's own values are listed straight from it: building its whole row first, to take
    three values out of it again, cost 2,500 instructions an event more (5 December 2026).
    """
    whole = len(plain) - len(plain) % ROWS_PER_INSERT
    if not whole:
        return 0
    given = {"run_id": run_id, "turn": turn, "received_at": now}
    shared = [given[column] for column in _SHARED_COLUMNS]
    values = list(chain.from_iterable(
        (seq, event["type"], _stored(event, encoded)) for seq, event, encoded in plain[:whole]))
    step = len(_OWN_COLUMNS) * ROWS_PER_INSERT
    for start in range(0, len(values), step):
        tx.run(_INSERT_ROWS_WITHOUT_ID, shared + values[start:start + step])
    return whole


class SqliteDialect:
    """SQLite's: one writer at a time, so no row locks, no feed lock and no notices."""

    # Without statistics SQLite guesses that a run holds ~10 events and, for a long list of
    # ids, scans the run's whole range of the primary key instead: each batch's dedupe then
    # costs the run's length, and ingest with eventIds slows down as the run grows.
    events_by_id = "events INDEXED BY events_by_event_id"
    lock_clause = ""
    claim_clause = ""
    returns_chunks = True

    def match_ids(self, count: int) -> str:
        return "event_id IN (" + ",".join("?" * count) + ")"

    def id_params(self, ids: list[str]) -> list[Any]:
        return ids

    def insert_events(
        self, tx: Tx, run_id: str, turn: int, appended: Sequence[Appended], now: float, *, with_ids: bool = True
    ) -> None:
        # sqlite3 sends a None parameter through its adapter registry (a tuple key, a dict miss
        # and two attribute look-ups that fail): a seventh of an event row's insert. Rows
        # without an eventId, most of a stream, name NULL in the statement instead. (Looking
        # for them when the append knows there are none was 470 instructions an event.)
        plain = [entry for entry in appended if entry[1].get("eventId") is None] if with_ids else appended
        if len(plain) < len(appended):
            carrying = [entry for entry in appended if entry[1].get("eventId") is not None]
            insert_event_rows(tx, event_rows(run_id, turn, carrying, now))
        whole = _insert_hundreds(tx, run_id, turn, plain, now)
        if whole < len(plain):
            rows = event_rows(run_id, turn, plain[whole:], now)
            tx.many(_INSERT_WITHOUT_ID, [row[:_EVENT_ID] + row[_EVENT_ID + 1:] for row in rows])

    def before_feed_insert(self, tx: Tx) -> None:
        pass

    def feed_ids_issued(self, tx: Tx) -> int:
        # AUTOINCREMENT keeps the largest id ever used in sqlite_sequence, and never reuses one.
        row = tx.one("SELECT seq FROM sqlite_sequence WHERE name = 'feed'")
        return int(row[0]) if row is not None and row[0] is not None else 0

    #: Whether each writing transaction also writes its commit notice into the file, for the
    #: other processes serving it (``lastword serve --workers N``, :mod:`lastword.fanout.data_version`).
    notices = False

    def after_commit_notice(
        self, tx: Tx, run_id: str, first_seq: int, last_seq: int, feed_id: int | None
    ) -> None:
        if self.notices:
            tx.run(INSERT_NOTICE, (Notice(run_id, first_seq, last_seq, feed_id).payload(),))

    def after_stream_notice(self, tx: Tx, path: str) -> None:
        if self.notices:
            tx.run(INSERT_NOTICE, (StreamNotice(path).payload(),))
