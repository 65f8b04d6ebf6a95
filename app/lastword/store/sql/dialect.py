"""What differs between the SQL backends, as the shared queries ask for it: one dialect object
per backend (:class:`SqliteDialect` here, :class:`lastword.store.postgres.store.PostgresDialect`),
held by the store (:class:`lastword.store.sql.store.SqlStore`) and handed to the queries."""

from __future__ import annotations

from typing import Any, Protocol

from lastword.store.notices import Notice, StreamNotice
from lastword.store.sql.rows import EVENT_COLUMNS
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

    def insert_events(self, tx: Tx, rows: list[tuple[Any, ...]]) -> None:
        """Store a batch of event rows (``EVENT_COLUMNS`` order); a backend may complete it with
        the transaction's next statement (PostgreSQL's COPY streams meanwhile)."""

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


def insert_event_rows(tx: Tx, rows: list[tuple[Any, ...]]) -> None:
    """Event rows as plain ``INSERT``s (both backends; PostgreSQL copies large batches instead)."""
    tx.many(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


_EVENT_COLUMN_NAMES = [column.strip() for column in EVENT_COLUMNS.split(",")]
#: Where ``event_id`` is in an event row (``EVENT_COLUMNS`` order).
_EVENT_ID = _EVENT_COLUMN_NAMES.index("event_id")
_INSERT_WITHOUT_ID = "INSERT INTO events ({}) VALUES ({})".format(
    EVENT_COLUMNS, ", ".join("NULL" if column == "event_id" else "?" for column in _EVENT_COLUMN_NAMES))


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

    def insert_events(self, tx: Tx, rows: list[tuple[Any, ...]]) -> None:
        # sqlite3 sends a None parameter through its adapter registry (a tuple key, a dict miss
        # and two attribute look-ups that fail): a seventh of an event row's insert. Rows
        # without an eventId, most of a stream, name NULL in the statement instead.
        plain = [row[:_EVENT_ID] + row[_EVENT_ID + 1:] for row in rows if row[_EVENT_ID] is None]
        if not plain:
            insert_event_rows(tx, rows)
            return
        if len(plain) < len(rows):
            insert_event_rows(tx, [row for row in rows if row[_EVENT_ID] is not None])
        tx.many(_INSERT_WITHOUT_ID, plain)

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
