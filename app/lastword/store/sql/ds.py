"""Durable Streams in the runs' database (SPEC §17): each operation one transaction over ``Tx``.

Three tables, the same on both backends but for the bytes' column type (:func:`schema`):
``ds_streams`` (one row per stream path: its configuration, tail, closure, soft deletion and
how many forks point at it), ``ds_entries`` (the stream's entries by number, keyed by the
stream's ``uid``, which is new at every creation, so a stream made again at a deleted path
shares nothing with the old one), and ``ds_producers`` (each idempotent producer's epoch and
last seq, written in the same transaction as the entries they vouch for).

A fork copies the entries it inherits when it is made, as run forks do (:mod:`lastword.store.sql.forks`):
reads never stitch across streams, and a source's deletion cannot take a fork's beginning
with it. A source with forks is only soft-deleted (its row stays, 410, its path blocked) until
its last fork goes; then it goes too, up the chain.

The rules (what is refused, what a producer's headers mean) are :mod:`lastword.rules.ds`; this
module reads the state under the stream's lock, asks them, and writes what they allow.
"""

from __future__ import annotations

import secrets
from typing import Any

from lastword.errors import DsRefusal
from lastword.rules import ds
from lastword.rules.ds import AppendRequest, CreateRequest, Outcome, Slice, StreamState
from lastword.store.sql.tx import Tx


def schema(binary: str) -> str:
    """The tables, with ``binary`` the backend's type for bytes (``BLOB``, ``BYTEA``)."""
    return f"""
CREATE TABLE IF NOT EXISTS ds_streams (
    path TEXT PRIMARY KEY,
    uid TEXT NOT NULL UNIQUE,
    content_type TEXT NOT NULL,
    ttl BIGINT,
    expires_at TEXT,
    expires_epoch DOUBLE PRECISION,
    closed INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    tail BIGINT NOT NULL,
    touched_at DOUBLE PRECISION NOT NULL,
    fork_of TEXT,
    fork_spec TEXT,
    closed_by TEXT,
    stream_seq TEXT,
    refs INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS ds_entries (
    uid TEXT NOT NULL,
    seq BIGINT NOT NULL,
    body {binary} NOT NULL,
    PRIMARY KEY (uid, seq)
);
CREATE TABLE IF NOT EXISTS ds_producers (
    uid TEXT NOT NULL,
    producer_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (uid, producer_id)
)
"""


COLUMNS = ("path, uid, content_type, ttl, expires_at, expires_epoch, closed, deleted, tail, touched_at, "
           "fork_of, fork_spec, closed_by, stream_seq, refs")


def _state(row: Any) -> StreamState:
    return StreamState(
        path=row[0], uid=row[1], content_type=row[2], ttl=row[3], expires_at=row[4], expires_epoch=row[5],
        closed=bool(row[6]), deleted=bool(row[7]), tail=row[8], touched_at=row[9], fork_of=row[10],
        fork_offset=None, closed_by=row[12], stream_seq=row[13], refs=row[14],
        extra={"fork_spec": row[11] or ""},
    )


def load(tx: Tx, path: str, lock: str = "") -> StreamState | None:
    row = tx.one(f"SELECT {COLUMNS} FROM ds_streams WHERE path = ?{lock}", (path,))
    return None if row is None else _state(row)


def live(tx: Tx, path: str, now: float, lock: str = "") -> StreamState:
    """The stream at ``path`` for a client's operation: 404 when absent or expired, 410 when
    soft-deleted. An expired stream found by a write is removed (or soft-deleted if forked)."""
    state = load(tx, path, lock)
    if state is None:
        raise DsRefusal("not_found", f"no stream at {path!r}")
    if state.deleted:
        raise DsRefusal("gone", f"the stream at {path!r} was deleted")
    if state.expired(now):
        if lock:
            _drop(tx, state)
        raise DsRefusal("not_found", f"the stream at {path!r} has expired")
    return state


def peek(tx: Tx, path: str, now: float) -> StreamState:
    """:func:`live` for a read (nothing removed)."""
    return live(tx, path, now)


def _drop(tx: Tx, state: StreamState) -> None:
    """Delete a stream: soft while forks point at it, else for good, then up its fork chain."""
    if state.refs > 0:
        tx.run("UPDATE ds_streams SET deleted = 1 WHERE path = ?", (state.path,))
        return
    current: StreamState | None = state
    while current is not None:
        tx.run("DELETE FROM ds_entries WHERE uid = ?", (current.uid,))
        tx.run("DELETE FROM ds_producers WHERE uid = ?", (current.uid,))
        tx.run("DELETE FROM ds_streams WHERE path = ?", (current.path,))
        if current.fork_of is None:
            return
        source = load(tx, current.fork_of)
        if source is None or source.uid == current.uid:
            return
        tx.run("UPDATE ds_streams SET refs = refs - 1 WHERE path = ?", (source.path,))
        source.refs -= 1
        current = source if source.deleted and source.refs <= 0 else None


def _entries(content_type: str, request: CreateRequest | AppendRequest, *, allow_empty: bool) -> list[bytes]:
    """The entries a body makes: one, or a JSON-mode body's messages (an empty array only where
    ``allow_empty``: a PUT's initial content may be ``[]``)."""
    body = request.body
    if not body:
        return []
    if not ds.is_json(content_type):
        return [body]
    split = request.split
    if isinstance(split, DsRefusal):
        raise split
    messages = split if split is not None else ds.json_messages(body, limit=request.max_messages)
    if not messages and not allow_empty:
        raise DsRefusal("invalid", "an empty JSON array appends nothing")
    return messages


def _insert(tx: Tx, uid: str, first: int, entries: list[bytes]) -> None:
    if entries:
        tx.many("INSERT INTO ds_entries (uid, seq, body) VALUES (?, ?, ?)",
                [(uid, first + index, entry) for index, entry in enumerate(entries)])


def create(tx: Tx, request: CreateRequest, now: float, lock: str) -> Outcome:
    existing = load(tx, request.path, lock)
    if existing is not None and not existing.deleted and existing.expired(now):
        _drop(tx, existing)
        existing = load(tx, request.path, lock)
    if existing is not None:
        if existing.deleted:
            raise DsRefusal("conflict", f"the stream at {request.path!r} was deleted and is still forked")
        return Outcome(_same_config(existing, request))
    content_type = request.content_type
    ttl, expires_at, expires_epoch = request.ttl, request.expires_at, request.expires_epoch
    inherited: list[tuple[int, bytes]] = []
    tail = 0
    fork_spec = None
    if request.fork_of is not None:
        source = load(tx, request.fork_of, lock)
        if source is None or (not source.deleted and source.expired(now)):
            raise DsRefusal("not_found", f"no stream at {request.fork_of!r} to fork")
        if source.deleted:
            raise DsRefusal("conflict", f"the stream at {request.fork_of!r} was deleted")
        if content_type is not None and ds.media_type(content_type) != ds.media_type(source.content_type):
            raise DsRefusal("conflict", "a fork's Content-Type must be its source's")
        content_type = content_type or source.content_type
        if ttl is None and expires_epoch is None:
            ttl, expires_at, expires_epoch = source.ttl, source.expires_at, source.expires_epoch
        at = source.tail if request.fork_offset is None else _fork_offset(request.fork_offset, source.tail)
        rows = tx.all("SELECT seq, body FROM ds_entries WHERE uid = ? AND seq <= ? ORDER BY seq",
                      (source.uid, at + (1 if request.fork_sub_offset else 0)))
        inherited = [(row[0], bytes(row[1])) for row in rows if row[0] <= at]
        tail = at
        if request.fork_sub_offset:
            if ds.is_json(content_type):
                if at + request.fork_sub_offset > source.tail:
                    raise DsRefusal("invalid", "Stream-Fork-Sub-Offset is past the source's tail")
                rows = tx.all("SELECT seq, body FROM ds_entries WHERE uid = ? AND seq > ? AND seq <= ? ORDER BY seq",
                              (source.uid, at, at + request.fork_sub_offset))
                inherited += [(row[0], bytes(row[1])) for row in rows]
                tail = at + request.fork_sub_offset
            else:
                following = [bytes(row[1]) for row in rows if row[0] == at + 1]
                if not following or request.fork_sub_offset > len(following[0]):
                    raise DsRefusal("invalid", "Stream-Fork-Sub-Offset is past the next entry's end")
                inherited.append((at + 1, following[0][: request.fork_sub_offset]))
                tail = at + 1
        fork_spec = f"{request.fork_offset or ''}:{request.fork_sub_offset}"
        tx.run("UPDATE ds_streams SET refs = refs + 1 WHERE path = ?", (source.path,))
    content_type = content_type or "application/octet-stream"
    entries = _entries(content_type, request, allow_empty=True)
    uid = secrets.token_hex(8)
    state = StreamState(
        path=request.path, uid=uid, content_type=content_type, ttl=ttl, expires_at=expires_at,
        expires_epoch=expires_epoch, closed=request.closed, deleted=False, tail=tail + len(entries),
        touched_at=now, fork_of=request.fork_of, refs=0, extra={"fork_spec": fork_spec or ""},
    )
    tx.run(
        f"INSERT INTO ds_streams ({COLUMNS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (state.path, uid, content_type, ttl, expires_at, expires_epoch, int(state.closed), 0, state.tail, now,
         request.fork_of, fork_spec, None, None, 0, now),
    )
    if inherited:
        tx.many("INSERT INTO ds_entries (uid, seq, body) VALUES (?, ?, ?)",
                [(uid, seq, body) for seq, body in inherited])
    _insert(tx, uid, tail + 1, entries)
    return Outcome(state, created=True)


def _fork_offset(text: str, tail: int) -> int:
    if text == ds.START:
        return 0
    position = ds.position_of(text)
    if position is None:
        raise DsRefusal("invalid", f"Stream-Fork-Offset {text!r} is not one this server hands out")
    if position > tail:
        raise DsRefusal("invalid", f"Stream-Fork-Offset {text!r} is past the source's tail")
    return position


def _same_config(existing: StreamState, request: CreateRequest) -> StreamState:
    """An existing stream answers a PUT 200 only when the PUT asks for what it is (else 409)."""
    same = (
        (request.content_type is None and request.fork_of is not None
         or ds.media_type(request.content_type or "application/octet-stream") == ds.media_type(existing.content_type))
        and existing.closed == request.closed
        and existing.fork_of == request.fork_of
    )
    if same and request.fork_of is None:
        same = request.ttl == existing.ttl and request.expires_epoch == existing.expires_epoch
    elif same:
        same = existing.extra.get("fork_spec") == f"{request.fork_offset or ''}:{request.fork_sub_offset}"
        if request.ttl is not None or request.expires_epoch is not None:
            same = same and request.ttl == existing.ttl and request.expires_epoch == existing.expires_epoch
    if not same:
        raise DsRefusal("conflict", f"a stream exists at {existing.path!r} with another configuration")
    return existing


def producer_repeat(tx: Tx, uid: str, producer: ds.Producer) -> tuple[int, int] | None:
    """Check ``producer``'s write against its stored epoch and seq (:func:`ds.check_producer`
    refuses a stale epoch or a gap) and record it; a repeat records nothing and answers the
    stored ``(epoch, seq)``, None a write to make. Call it in the transaction that writes what
    the producer sent, under the lock that orders writes to ``uid``: a refusal after it rolls
    the producer's state back with the entries."""
    row = tx.one("SELECT epoch, last_seq FROM ds_producers WHERE uid = ? AND producer_id = ?", (uid, producer.id))
    known = None if row is None else (int(row[0]), int(row[1]))
    if ds.check_producer(producer, known) == "duplicate":
        return known
    if known is None:
        tx.run("INSERT INTO ds_producers (uid, producer_id, epoch, last_seq) VALUES (?, ?, ?, ?)",
               (uid, producer.id, producer.epoch, producer.seq))
    else:
        tx.run("UPDATE ds_producers SET epoch = ?, last_seq = ? WHERE uid = ? AND producer_id = ?",
               (producer.epoch, producer.seq, uid, producer.id))
    return None


def run_producers(run_id: str) -> str:
    """The key a run's producers are kept under in ``ds_producers`` (a stream's ``uid`` is hex,
    so the two never meet)."""
    return "run:" + run_id


def append(tx: Tx, request: AppendRequest, now: float, lock: str) -> Outcome:
    state = live(tx, request.path, now, lock)
    producer = request.producer
    if state.closed:
        if producer is not None and state.closed_by == producer.key():
            return Outcome(state, producer=(producer.epoch, producer.seq))
        if not request.body and request.close:
            return Outcome(state)
        raise DsRefusal("closed", "the stream is closed", tail=state.tail)
    if not request.body and not request.close:
        raise DsRefusal("invalid", "an append needs a body (or Stream-Closed: true)")
    if request.body:
        if not request.content_type:
            raise DsRefusal("invalid", "an append needs a Content-Type")
        if ds.media_type(request.content_type) != ds.media_type(state.content_type):
            raise DsRefusal("conflict", f"the stream holds {state.content_type}, not {request.content_type}")
    entries = _entries(state.content_type, request, allow_empty=False)
    echo: tuple[int, int] | None = None
    if producer is not None:
        repeated = producer_repeat(tx, state.uid, producer)
        if repeated is not None:
            return Outcome(state, producer=repeated)
        echo = (producer.epoch, producer.seq)
    if request.stream_seq is not None:
        if state.stream_seq is not None and request.stream_seq <= state.stream_seq:
            raise DsRefusal("conflict", f"Stream-Seq {request.stream_seq!r} is not after {state.stream_seq!r}")
        state.stream_seq = request.stream_seq
    _insert(tx, state.uid, state.tail + 1, entries)
    state.tail += len(entries)
    state.touched_at = now
    if request.close:
        state.closed = True
        state.closed_by = producer.key() if producer is not None else None
    tx.run("UPDATE ds_streams SET tail = ?, touched_at = ?, closed = ?, closed_by = ?, stream_seq = ? WHERE path = ?",
           (state.tail, now, int(state.closed), state.closed_by, state.stream_seq, state.path))
    return Outcome(state, stored=bool(entries), producer=echo)


def delete(tx: Tx, path: str, now: float, lock: str) -> None:
    _drop(tx, live(tx, path, now, lock))


def touch(tx: Tx, path: str, now: float) -> None:
    """A read or write resets a sliding TTL."""
    tx.run("UPDATE ds_streams SET touched_at = ? WHERE path = ? AND ttl IS NOT NULL", (now, path))


def read(tx: Tx, path: str, position: int | str, now: float, max_bytes: int) -> Slice:
    """The entries after ``position`` (``"now"``: the tail), at most about ``max_bytes`` of them
    (at least one); the offset is checked against the tail here, under the same snapshot."""
    state = peek(tx, path, now)
    start = state.tail if position == ds.NOW else ds.parse_offset(str(position), state.tail) \
        if isinstance(position, str) else position
    assert isinstance(start, int)
    if start > state.tail:
        raise DsRefusal("invalid", "the offset is past the stream's tail")
    entries: list[bytes] = []
    size = 0
    for row in tx.rows("SELECT body FROM ds_entries WHERE uid = ? AND seq > ? ORDER BY seq LIMIT 4096", (state.uid, start)):
        body = bytes(row[0])
        if entries and size + len(body) > max_bytes:
            break
        entries.append(body)
        size += len(body)
    return Slice(state, start, entries)
