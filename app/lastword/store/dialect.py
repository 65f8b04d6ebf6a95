"""What differs between the SQL backends, as the shared queries ask for it."""

from __future__ import annotations

from typing import Any, Protocol

from lastword.store.tx import Tx


class Dialect(Protocol):
    #: The events table as the eventId lookup names it (SQLite forces its index there).
    events_by_id: str
    #: Appended to a ``SELECT`` of a run that is about to change (PostgreSQL: ``FOR UPDATE``).
    lock_clause: str
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
