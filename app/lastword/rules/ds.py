"""The Durable Streams protocol's rules (SPEC §17), with no I/O: offsets, headers, JSON mode,
idempotent producers, expiry, cursors and ETags.

A stream here is a list of entries numbered from 1: one per append in a byte stream, one per
message in a JSON stream (a POSTed array is flattened one level, so each element is an entry).
An offset is the number of entries before it, written ``0000000000000000_NNNNNNNNNNNNNNNN``
(16 zeros, then the count in 16 digits): the shape the protocol's reference server uses and its
conformance suite writes by hand for "the start", fixed width so that the protocol's
lexicographic order is the numeric one, and never ``-1`` or ``now``. The first field is always
zero here; an offset with anything else there is not ours (400). Reading
from offset ``n`` answers the entries after ``n``.

Each decision is a function of the stream's state and the request, answering what to do or
raising a :class:`~lastword.errors.DsRefusal` that says why (a reason and the facts a client needs,
such as the producer seq expected), never how a transport answers it; the store applies it in the
transaction that read the state, so check and write cannot be separated by another writer.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import orjson

from lastword.errors import DsRefusal

#: An offset's count is this many decimal digits, after the zero field.
OFFSET_DIGITS = 16
START = "-1"
NOW = "now"
#: JavaScript's largest safe integer: the protocol's bound on producer epochs and seqs.
MAX_SAFE = 2**53 - 1
#: The cursor's interval and epoch (2024-10-09T00:00:00Z), as the protocol's §10.1 proposes.
CURSOR_INTERVAL = 20
CURSOR_EPOCH = 1728432000

#: At most 16 digits: enough for 2^53-1, and short enough that ``int`` never refuses the text.
_SAFE_DIGITS = re.compile(r"0|[1-9][0-9]{0,15}")
_OFFSET = re.compile(rf"0{{{OFFSET_DIGITS}}}_([0-9]{{{OFFSET_DIGITS}}})")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _safe_int(text: str) -> int | None:
    """A whole number in plain decimal (no sign, no leading zero) from 0 to 2^53-1, or None:
    the protocol's integers are JavaScript numbers, and a store column holds any of these."""
    if _SAFE_DIGITS.fullmatch(text) is None:
        return None
    number = int(text)
    return number if number <= MAX_SAFE else None


def offset(position: int) -> str:
    return "0" * OFFSET_DIGITS + "_" + str(position).zfill(OFFSET_DIGITS)


def position_of(text: str) -> int | None:
    """The position an offset of ours names; None for any other text."""
    match = _OFFSET.fullmatch(text)
    return None if match is None else int(match.group(1))


def parse_offset(text: str | None, tail: int) -> int | Literal["now"]:
    """The position an ``offset`` query names: absent or ``-1`` is 0; ``now``; else ours only.

    An offset this server did not hand out (another shape, or past the tail) is 400.
    """
    if text is None or text == START:
        return 0
    if text == NOW:
        return "now"
    position = position_of(text)
    if position is None:
        raise DsRefusal("invalid", f"offset {text!r} is not one this server hands out")
    if position > tail:
        raise DsRefusal("invalid", f"offset {text!r} is past the stream's tail")
    return position


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` (no parameters), lower case; ``""`` when absent."""
    return (content_type or "").partition(";")[0].strip().lower()


def is_json(content_type: str) -> bool:
    return media_type(content_type) == "application/json"


def sse_base64(content_type: str) -> bool:
    """Whether SSE carries this stream's data as base64 (neither ``text/*`` nor JSON)."""
    kind = media_type(content_type)
    return not (kind.startswith("text/") or kind == "application/json")


def flag(value: str | None) -> bool:
    """``Stream-Closed``: only ``true`` (any case) counts; every other value is as if absent."""
    return value is not None and value.strip().lower() == "true"


def parse_ttl(value: str | None) -> int | None:
    if value is None:
        return None
    seconds = _safe_int(value)
    if seconds is None:
        raise DsRefusal("invalid", f"Stream-TTL {value!r} is not a whole number of seconds up to 2^53-1")
    return seconds


def parse_sub_offset(value: str | None) -> int:
    """A fork's ``Stream-Fork-Sub-Offset``: 0 when absent, else a whole number up to 2^53-1
    (a larger one could address no message and would not fit the store's columns)."""
    if value is None:
        return 0
    number = _safe_int(value.strip())
    if number is None:
        raise DsRefusal("invalid", f"Stream-Fork-Sub-Offset {value!r} is not a whole number up to 2^53-1")
    return number


def parse_expires_at(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip()
    if not _RFC3339.fullmatch(text):
        raise DsRefusal("invalid", f"Stream-Expires-At {value!r} is not an RFC 3339 time")
    try:
        # Python reads any one character between date and time, but only an upper-case Z.
        return datetime.fromisoformat(text.upper()).timestamp()
    except ValueError:
        raise DsRefusal("invalid", f"Stream-Expires-At {value!r} is not a valid time") from None


@dataclass(frozen=True)
class Producer:
    """An idempotent producer's ``(Producer-Id, Producer-Epoch, Producer-Seq)``."""

    id: str
    epoch: int
    seq: int

    def key(self) -> str:
        return f"{self.epoch}:{self.seq}:{self.id}"


def parse_producer(pid: str | None, epoch: str | None, seq: str | None) -> Producer | None:
    """The three producer headers, all or none (400 otherwise)."""
    if pid is None or epoch is None or seq is None:
        if pid is None and epoch is None and seq is None:
            return None
        raise DsRefusal("invalid", "Producer-Id, Producer-Epoch and Producer-Seq go together")
    if not pid.strip():
        raise DsRefusal("invalid", "Producer-Id is empty")
    numbers = []
    for name, value in (("Producer-Epoch", epoch), ("Producer-Seq", seq)):
        number = _safe_int(value.strip())
        if number is None:
            raise DsRefusal("invalid", f"{name} {value!r} is not an integer from 0 to 2^53-1")
        numbers.append(number)
    return Producer(pid, numbers[0], numbers[1])


ProducerVerdict = Literal["accept", "duplicate"]


def check_producer(producer: Producer, state: tuple[int, int] | None) -> ProducerVerdict:
    """Epoch fencing and sequence checks against the producer's stored ``(epoch, last seq)``."""
    if state is None:
        if producer.seq != 0:
            raise DsRefusal("conflict", f"a new producer starts at seq 0, not {producer.seq}",
                            expected_seq=0, received_seq=producer.seq)
        return "accept"
    epoch, last = state
    if producer.epoch < epoch:
        raise DsRefusal("stale_epoch", f"producer epoch {producer.epoch} is stale; the current one is {epoch}",
                        epoch=epoch)
    if producer.epoch > epoch:
        if producer.seq != 0:
            raise DsRefusal("invalid", f"a new epoch starts at seq 0, not {producer.seq}")
        return "accept"
    if producer.seq <= last:
        return "duplicate"
    if producer.seq > last + 1:
        raise DsRefusal("conflict", f"producer seq {producer.seq} leaves a gap after {last}",
                        expected_seq=last + 1, received_seq=producer.seq)
    return "accept"


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_decoder = json.JSONDecoder(parse_constant=_no_constants)
_SPACE = re.compile(r"[ \t\n\r]*")


#: Brackets and braces a body may hold for :func:`compact_messages` (its nesting is at most that):
#: well inside the depth :func:`parsed_messages` recurses to before it gives up.
COMPACT_NESTING = 500


def compact_messages(body: bytes, limit: int | None) -> list[bytes] | None:
    """The messages of an array written compactly, as ``JSON.stringify`` and orjson write one (no
    spaces, each value in its shortest form): orjson's text of each element, taken only when the
    array written back from them is ``body`` byte for byte, so each is the exact text
    :func:`parsed_messages` cuts out; None for any other body, which that parser then reads.
    About five times faster for a token stream's batch of small objects."""
    if body[:1] != b"[" or body.count(b"[") + body.count(b"{") > COMPACT_NESTING:
        return None
    try:
        values = orjson.loads(body)
        if not isinstance(values, list) or (limit is not None and len(values) > limit):
            return None
        messages = [orjson.dumps(value) for value in values]
    except (orjson.JSONDecodeError, TypeError):  # not JSON as orjson reads it, or not written back
        return None
    return messages if b"[" + b",".join(messages) + b"]" == body else None


def json_messages(body: bytes, *, limit: int | None = None) -> list[bytes]:
    """A JSON mode body as its messages, each the exact text of one value.

    An array is flattened one level; any other value is one message. Not JSON is refused, and
    so is an array of more than ``limit`` messages, as soon as the one past it is read: a small
    body of many tiny messages (``[0,0,…]``) must not become millions of rows.
    """
    compact = compact_messages(body, limit)
    return compact if compact is not None else parsed_messages(body, limit)


def parsed_messages(body: bytes, limit: int | None) -> list[bytes]:
    """:func:`json_messages` read by a parser that cuts each value's text out where it stands."""
    try:
        text = body.decode()
        start = _SPACE.match(text).end()  # type: ignore[union-attr]
        if text.startswith("[", start):
            messages: list[bytes] = []
            at = _SPACE.match(text, start + 1).end()  # type: ignore[union-attr]
            if text.startswith("]", at):
                at += 1
            else:
                while True:
                    _, end = _decoder.raw_decode(text, at)
                    if limit is not None and len(messages) == limit:
                        raise DsRefusal("too_large", f"a JSON append holds at most {limit} messages "
                                                     "(LASTWORD_DS_MAX_JSON_MESSAGES)", limit=limit)
                    messages.append(text[at:end].encode())
                    at = _SPACE.match(text, end).end()  # type: ignore[union-attr]
                    if text.startswith(",", at):
                        at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
                        continue
                    if text.startswith("]", at):
                        at += 1
                        break
                    raise ValueError("expected , or ]")
        else:
            _, end = _decoder.raw_decode(text, start)
            messages = [text[start:end].encode()]
            at = end
        if _SPACE.match(text, at).end() != len(text):  # type: ignore[union-attr]
            raise ValueError("extra data after the value")
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise DsRefusal("invalid", f"the body is not JSON: {error}") from None
    return messages


def split_json(body: bytes, limit: int) -> list[bytes] | DsRefusal:
    """:func:`json_messages` of a JSON-mode body, done before its transaction: the messages, or
    the refusal, which the transaction raises where the parse stood (after the stream's own
    checks, so a bad body to a missing stream is still a 404)."""
    try:
        return json_messages(body, limit=limit)
    except DsRefusal as refusal:
        return refusal


def body_of(entries: list[bytes], content_type: str) -> bytes:
    """Entries as a read's body: a JSON array in JSON mode, else the bytes back to back."""
    if is_json(content_type):
        return b"[" + b",".join(entries) + b"]"
    return b"".join(entries)


def sse_data(entries: list[bytes], content_type: str) -> str:
    """Entries as one SSE ``data`` event's text (base64 for a binary stream)."""
    if sse_base64(content_type):
        return base64.b64encode(b"".join(entries)).decode()
    return body_of(entries, content_type).decode(errors="replace")


def cursor(now: float, client_cursor: str | None, jitter: int) -> str:
    """The ``Stream-Cursor`` for a live answer: the interval number, past the client's own.

    ``jitter`` (1 to 3600 seconds, chosen by the caller) moves it on when the client's cursor is
    already this interval's or later, so a cached answer cannot come back round. A client's
    cursor that is not a number up to 2^53-1 is none this server handed out, and counts as none.
    """
    interval = int((now - CURSOR_EPOCH) // CURSOR_INTERVAL)
    theirs = None if client_cursor is None else _safe_int(client_cursor)
    if theirs is not None and theirs >= interval:
        return str(theirs + max(1, jitter // CURSOR_INTERVAL))
    return str(interval)


def etag(uid: str, start: int, end: int, closed: bool) -> str:
    """Changes with the range and with closure, so a 304 never hides the end of a stream."""
    return f'"{uid}:{offset(start)}:{offset(end)}{":c" if closed else ""}"'


@dataclass
class StreamState:
    """A stream's row, as the store reads it."""

    path: str
    uid: str
    content_type: str
    ttl: int | None
    expires_at: str | None
    expires_epoch: float | None
    closed: bool
    deleted: bool
    tail: int
    touched_at: float
    fork_of: str | None = None
    fork_offset: int | None = None
    closed_by: str | None = None
    stream_seq: str | None = None
    refs: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    def expired(self, now: float) -> bool:
        if self.expires_epoch is not None and now >= self.expires_epoch:
            return True
        return self.ttl is not None and now >= self.touched_at + self.ttl


@dataclass(frozen=True)
class CreateRequest:
    path: str
    content_type: str | None
    ttl: int | None
    expires_at: str | None
    expires_epoch: float | None
    closed: bool
    body: bytes
    fork_of: str | None = None
    fork_offset: str | None = None
    fork_sub_offset: int = 0
    #: A JSON-mode body split into its messages before the transaction (:func:`split_json`).
    split: list[bytes] | DsRefusal | None = None
    #: The most messages a JSON-mode body may hold.
    max_messages: int | None = None


@dataclass(frozen=True)
class AppendRequest:
    path: str
    content_type: str | None
    body: bytes
    close: bool
    producer: Producer | None
    stream_seq: str | None
    split: list[bytes] | DsRefusal | None = None
    max_messages: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What a write did: the stream after it, whether a create made it (or found the same one
    there) and whether an append stored anything (a repeat or a close alone stores nothing)."""

    state: StreamState
    created: bool = False
    stored: bool = False
    #: The producer's ``(epoch, seq)`` the write is acknowledged for, when one wrote.
    producer: tuple[int, int] | None = None


@dataclass(frozen=True)
class Slice:
    """What a read found: the stream, and its entries after the asked position (up to a size).

    ``last`` is the position after the entries when it is not ``start + len(entries)`` (a
    run's log read as a stream is numbered by ``seq``, which a fork's log starts past 1)."""

    state: StreamState
    start: int
    entries: list[bytes]
    last: int | None = None

    @property
    def end(self) -> int:
        return self.last if self.last is not None else self.start + len(self.entries)

    @property
    def up_to_date(self) -> bool:
        return self.end >= self.state.tail
