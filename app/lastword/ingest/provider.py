"""``POST /v1/runs/{runId}/ingest/{format}`` (SPEC §13): a provider's own stream, stored as §4 events.

The body is translated as it streams (the adapter holds one message at a time), and the
translated events are **staged, then stored in one transaction at the end of the body**. So a
body whose 900th event is unreadable stores nothing (400/422 naming that event's index) rather
than 899 events of a step that a retry would then have to reconcile, and a retry of the same
body finds every event already stored (duplicates). The price: live subscribers see a body's
chunks when the body ends, not as it streams. A producer that wants chunks live as they arrive
pushes ``/events`` NDJSON instead.

Memory. Each event is checked (§4 rules, nesting, size) and encoded as the adapter makes it,
and only its JSON is staged (:class:`Staging`): up to :data:`SPOOL_BYTES` in memory, the rest in
a temporary file, so what a body costs is not its number of events times the size of a Python
dict. The store reads the staged JSON back a batch of :data:`STORE_BATCH` events at a time,
all in one transaction (a body's first megabyte of chunks is kept as values too: most bodies
are smaller, and then nothing is parsed twice). A message's source (a tool call's input deltas: most of such a body)
is staged from its one buffer and read back into the buffer of the stored text (:class:`Staging`).
A 16 MB body of one-character deltas used to raise the server's peak memory by twenty times its
size; the test that measures it (``tests/test_provider_memory.py``) holds every shape of body,
and four at once, to four.

The event loop. A big JSON array is parsed a slice at a time (:mod:`lastword.ingest.json_input`)
and the translation gives the loop back every :data:`SLICE_SECONDS`; the end of the body (a
message assembled from every delta, checked and encoded) runs in a worker thread.

For the same reason the per-request limits differ from ``/events``: the events of one body
are not held to ``max_batch_events`` (a long message is thousands of deltas) and an
adapter-made event may be as large as the body limit (an OpenAI message's ``source`` holds the
terminal ``response`` object, which repeats the output).
"""

from __future__ import annotations

import array
import asyncio
import re
import tempfile
import time
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Iterator
from itertools import accumulate, compress, islice
from operator import itemgetter
from typing import Any, cast

import orjson

from lastword.adapters import ADAPTERS
from lastword.adapters.acp import ACPAdapter
from lastword.adapters.framing import FRAMINGS, provider_event_batches, provider_objects
from lastword.errors import (
    BadRequest,
    TooDeeplyNested,
    EmptyBatch,
    InvalidIdempotencyKey,
    MalformedJson,
    UnsupportedMedia,
)
from lastword.ingest import json_input
from lastword.ingest.body import Body, BodyCut, body_pieces
from lastword.ingest.checks import check_made, encode_plainly, storable_json, storable_made, too_large_made
from lastword.ingest.outcome import Stored
from lastword.service import RunService
from lastword.settings import Settings

#: Room left in an ``eventId`` (200 characters) after the key for ``:<position>``.
MAX_IDEMPOTENCY_KEY = 160
_KEY = re.compile(r"[\x21-\x7e]+")
#: Staged JSON kept in memory before the rest goes to a temporary file.
SPOOL_BYTES = 4 * 1024 * 1024
#: Staged events the store reads back and writes at a time (all in one transaction).
STORE_BATCH = 1000
#: The most the translation holds the event loop before giving it a turn.
SLICE_SECONDS = 0.005
#: Provider events translated and staged at a time (the clock is read between two such steps).
FEED_STEP = 64
#: A staged event bigger than this is handed to the store with its ``source`` as text (_SourceText).
LAZY_SOURCE = 64 * 1024
#: Staged JSON up to which the chunks are kept as values too, and read back without parsing
#: their JSON: about six times its size as dicts, so a body's chunks cost at most some 6 MB
#: more, and a typical model call's body (a few thousand deltas) is read back for nothing.
KEEP_BYTES = 1024 * 1024
#: Staged bytes gathered before they are written to the staging file.
_PENDING = 64 * 1024
#: Most staged bytes :meth:`Staging.batches` reads and parses at once (one event may be more).
_RUN_BYTES = 1024 * 1024
#: Room for the ``eventId`` of an event staged before its id was known (200 characters at most).
_ID_ROOM = len(',"eventId":""') + 200


def idempotency_key(body: Body) -> str | None:
    key = body.idempotency_key
    if key is None:
        return None
    if not _KEY.fullmatch(key) or len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidIdempotencyKey(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters")
    return key


async def ingest_provider_stream(
    body: Body, service: RunService, settings: Settings, run_id: str, format: str, end: bool,
    *, acp_version: int | None = None,
) -> Stored:
    framing = FRAMINGS.get(body.media_type)
    if framing is None:
        raise UnsupportedMedia(
            f"expected application/json, application/x-ndjson or text/event-stream, got {body.media_type!r}"
        )
    key = idempotency_key(body)
    adapter = ACPAdapter(key, version=acp_version) if format == ACPAdapter.format else ADAPTERS[format](key)
    limit = settings.max_body_bytes
    with Staging(limit) as staging:
        last = -1
        pause = time.perf_counter() + SLICE_SECONDS
        try:
            async for batch in _provider_events(body, framing, limit):
                for start in range(0, len(batch), FEED_STEP):
                    made: list[dict[str, Any]] = []
                    origins: list[int] = []
                    try:
                        adapter.feed_many(batch[start : start + FEED_STEP], made, origins)
                    finally:
                        # What the events before a refused one made is checked first: as when
                        # each was staged before the next was read, its problem is the answer.
                        staging.add(made, origins, adapter.take_unnamed())
                    if time.perf_counter() >= pause:
                        await asyncio.sleep(0)  # the loop's turn: a body already received never waits
                        pause = time.perf_counter() + SLICE_SECONDS
                last = batch[-1][0]
        except BodyCut:
            raise BadRequest("the body was cut off before its end; nothing was stored") from None
        if adapter.events_read == 0:
            raise EmptyBatch("the body holds no event", index=0)

        def finish() -> None:
            made = adapter.finish(end=end)
            staging.add(made, [last] * len(made), adapter.take_unnamed())

        # The message is every delta assembled, checked and encoded: a long one is work.
        await asyncio.to_thread(finish)
        # A body that never named its call has ids digested from it and the turn it came in (so the
        # same body in a later turn of the run is that turn's own): read the turn only then.
        base = adapter.id_base(f"turn {(await service.reads.get_run(run_id)).turn}" if adapter.needs_scope else "")
        if staging.count:
            outcome = await service.append_batches(run_id, staging.batches(base, STORE_BATCH))
            stored = Stored(outcome.accepted, outcome.duplicates, outcome.last_seq)
        else:  # only skipped events (pings): nothing to store, but the run must exist
            stored = Stored(0, 0, (await service.reads.get_run(run_id)).last_seq)
    stored.stop_reason, stored.provider_stop_reason = adapter.stop.stop_reason, adapter.stop.provider
    return stored


async def _provider_events(
    body: Body, framing: str, limit: int
) -> AsyncIterator[list[tuple[int, dict[str, Any]]]]:
    """The body's provider events, a list at a time; a JSON array bigger than
    ``json_input.WHOLE_BYTES`` a slice at a time (one ``orjson.loads`` of 16 MB holds the loop
    for a quarter of a second, and makes every event's dict at once)."""
    pieces = body_pieces(body, limit)
    if framing != "json":
        async for batch in provider_event_batches(pieces, framing):
            yield batch
        return
    # Received into one growing buffer: a list of the pieces and their join would hold it twice.
    whole = bytearray()
    async for piece in pieces:
        whole += piece
    slices = json_input.array_slices(whole) if len(whole) > json_input.WHOLE_BYTES else None
    if slices is None:
        async for batch in provider_event_batches(_one(bytes(whole)), framing):
            yield batch
        return
    index = 0
    for piece in slices:
        try:
            items = json_input.parse_slice(piece, index)
        except MalformedJson as error:
            error.extra.setdefault("index", index)  # the first event of the slice that holds the fault
            raise
        batch, problem = provider_objects(enumerate(items, index))
        index += len(items)
        del items
        if batch:
            yield batch
        if problem is not None:
            raise problem
        del batch
        await asyncio.sleep(0)


async def _one(body: bytes) -> AsyncIterator[bytes]:
    yield body


class Staging:
    """The encoded events of one body until the body ends: each checked as it is made, then only
    its JSON kept, up to :data:`SPOOL_BYTES` in memory and the rest in a temporary file (and the
    chunks of the first :data:`KEEP_BYTES` as values too, read back without a parse).

    The staged bytes are the events' JSON, each followed by a comma; where each ends is kept
    aside (eight bytes an event), so :meth:`batches` reads a run of events back with one read
    and parses it with one ``orjson.loads`` of ``[<run>]``: the text is orjson's own writing,
    one value an event, so the array splits exactly where the events do. (Parsed one by one,
    with a line of metadata each, reading back was the costliest part of the adapter's ingest.)

    A few events are staged apart from the runs (:attr:`_apart`): a big event whose JSON is a
    head and a tail, the tail its ``,"source":…}`` (a message's source is every raw event of its
    tool calls' input: most of the body), written from its own encoding and read back straight
    into the buffer of the stored text, so a big source is never copied whole more than once at
    a time; and an event still waiting for its id (made before the body named its call), staged
    without it, which :meth:`batches` writes into its JSON when the base is known.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._file = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed in __exit__
        #: Staged bytes not yet written to the file (one write per :data:`_PENDING` bytes).
        self._pending = bytearray()
        self._written = 0
        #: Where each staged event's bytes end (its comma included), from the first byte staged.
        self._ends = array.array("q")
        #: By position: ``(suffix, head bytes, tail bytes)`` of an event staged apart.
        self._apart: dict[int, tuple[bytes, int, int]] = {}
        #: By position: the chunks staged while the staged bytes were at most :data:`KEEP_BYTES`,
        #: as values too (None once the body is past it: the values are let go).
        self._kept: dict[int, dict[str, Any]] | None = {}
        #: Whether the chunks are written by one ``map`` (:meth:`_add_chunks`).
        self._plainly = True

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def add(self, made: list[dict[str, Any]], origins: list[int],
            unnamed: list[tuple[dict[str, Any], str | int]]) -> None:
        """Check and stage ``made``, ``origins[i]`` the provider event that completed ``made[i]``
        (in order; ``unnamed``: those of them that wait for their id); refuse one that cannot be
        stored, naming its provider event. ``made`` is emptied as it is staged."""
        if not made:
            return
        # The provider events that made something other than a chunk with its id: their events
        # are checked together, as :meth:`_add_made` does; the chunks between them are staged
        # by the run (most events of a body).
        special = set(compress(origins, map(_CHUNK.__ne__, map(_TYPE, made))))
        waiting = {id(event): suffix for event, suffix in unnamed} if unnamed else {}
        if waiting:
            special.update(origin for event, origin in zip(made, origins, strict=True) if id(event) in waiting)
        start = 0
        for origin in sorted(special):
            first, end = bisect_left(origins, origin, start), bisect_right(origins, origin, start)
            if first > start:
                self._add_chunks(made, origins, start, first)
            self._add_made(made, first, end, origin, waiting)
            start = end
        if start < len(made):
            self._add_chunks(made, origins, start, len(made))
        made.clear()
        unnamed.clear()  # (the caller's list, taken from the adapter for this call)

    def _add_made(self, made: list[dict[str, Any]], first: int, end: int, origin: int,
                  waiting: dict[int, str | int]) -> None:
        """Stage ``made[first:end]``, the events provider event ``origin`` completed, each let go
        once encoded (a message's source is most of the body)."""
        check_made(made[first:end], [origin] * (end - first))
        for position in range(first, end):
            event = made[position]
            made[position] = _STAGED
            suffix = waiting.get(id(event)) if waiting else None
            head, tail = _encoded(event, origin)
            del event
            tail_size = sum(len(part) for part in tail) if tail else 0
            # An id to come adds at most ``,"eventId":"<200 characters>"``.
            size = len(head) + tail_size + (0 if suffix is None else _ID_ROOM)
            if size > self.limit:
                raise too_large_made(origin, size, self.limit)
            if suffix is not None or tail:
                self._apart[self.count] = (b"" if suffix is None else str(suffix).encode(), len(head), tail_size)
            if size > _PENDING:
                self._write(head, *tail)
            else:
                self._pending += head
                for part in tail:
                    self._pending += part
            self._pending += b","
            if len(self._pending) >= _PENDING:
                self._write()
            self._ends.append(self._written + len(self._pending))
            self.count += 1

    def _add_chunks(self, made: list[dict[str, Any]], origins: list[int], first: int, end: int) -> None:
        """Stage the chunks ``made[first:end]``, each with its id (nothing apart, no tail): written
        by one ``map`` when each is short enough not to nest too deeply (the usual deltas of a
        few words), else one at a time, so a refusal names the first that is."""
        chunks = made[first:end]
        plain = encode_plainly(chunks, shallow_only=True) if self._plainly else None
        if plain is None or plain[1] > min(self.limit, _PENDING):
            # A body of long chunks is staged one by one from here on: written plainly, they
            # would be written twice.
            self._plainly = False
            for chunk, origin in zip(chunks, origins[first:end], strict=True):
                self._add_chunk(chunk, origin)
            return
        bodies = plain[0]
        start = self._written + len(self._pending)
        self._pending += b",".join(bodies)
        self._pending += b","
        # Where each ends, its comma included: the running sum of their sizes and commas.
        self._ends.extend(islice(accumulate(map(_PLUS_COMMA, map(len, bodies)), initial=start), 1, None))
        if self._kept is not None:
            if self._ends[-1] <= KEEP_BYTES:
                self._kept.update(zip(range(self.count, self.count + len(chunks)), chunks))
            else:
                self._kept = None
        self.count += len(chunks)
        if len(self._pending) >= _PENDING:
            self._write()

    def _add_chunk(self, event: dict[str, Any], origin: int) -> None:
        """:meth:`add` of one chunk with its id: no tail (see :func:`_encoded`), nothing apart."""
        try:
            body = storable_json(event)
        except TooDeeplyNested:
            body = storable_made(event, origin)  # refused again, naming the provider event
        if len(body) > self.limit:
            raise too_large_made(origin, len(body), self.limit)
        if len(body) > _PENDING:
            self._write(body)
        else:
            self._pending += body
        self._pending += b","
        if len(self._pending) >= _PENDING:
            self._write()
        self._ends.append(self._written + len(self._pending))
        if self._kept is not None:
            if self._ends[-1] <= KEEP_BYTES:
                # A fresh dict of strings and of the provider event orjson read, which the
                # adapter does not change: what reading its JSON back would make.
                self._kept[self.count] = event
            else:
                self._kept = None
        self.count += 1

    def _write(self, *parts: bytes | memoryview) -> None:
        """Write what is pending, then ``parts`` (a big event's, not copied into the pending bytes)."""
        size = len(self._pending) + sum(len(part) for part in parts)
        if self._written + size > SPOOL_BYTES:
            self._file.rollover()  # before a big write, not after it was copied into memory
        self._written += size
        self._file.write(self._pending)
        self._pending.clear()
        for part in parts:
            self._file.write(part)

    def batches(self, base: str, size: int) -> Iterator[tuple[list[dict[str, Any]], list[str]]]:
        """The staged events read back ``size`` at a time, as (events, their JSON), the ids of
        those that waited for one written in (their ``base`` is known now). Read in the store's
        worker thread, inside its transaction."""
        self._write()
        self._file.seek(0)
        position = 0
        while position < self.count:
            events: list[dict[str, Any]] = []
            encoded: list[str] = []
            last = min(position + size, self.count)
            while position < last:
                if position in self._apart:
                    event, text = self._read_apart(position, base)
                    events.append(event)
                    encoded.append(text)
                    position += 1
                    continue
                position = self._read_run(position, last, events, encoded)
            yield events, encoded

    def _start(self, position: int) -> int:
        return self._ends[position - 1] if position else 0

    def _read_run(self, position: int, last: int, events: list[dict[str, Any]], encoded: list[str]) -> int:
        """Read the events from ``position`` on, up to ``last``, the next one staged apart or
        :data:`_RUN_BYTES`, whichever comes first (at least one); the position after them."""
        start = self._start(position)
        end = position + 1
        while end < last and end not in self._apart and self._ends[end] - start <= _RUN_BYTES:
            end += 1
        size = self._ends[end - 1] - start
        # ``[`` + the run, its last comma overwritten by ``]``: one array of the run's events.
        run = bytearray(size + 1)
        run[0] = ord("[")
        self._file.readinto(memoryview(run)[1:])
        run[-1] = ord("]")
        kept = self._kept
        values = [kept.pop(at, None) for at in range(position, end)] if kept is not None else [None]
        if None in values:  # not all kept: read back (the ones that were are let go)
            events.extend(orjson.loads(run))
        else:
            events.extend(cast("list[dict[str, Any]]", values))
        text = run.decode()
        ascii_only = len(text) == len(run)  # then character offsets are byte offsets
        offset = start - 1  # run[i] is staged byte offset + i
        begin = 1
        for finish in self._ends[position:end]:
            finish -= offset  # (the event's comma: its end in the run)
            encoded.append(text[begin : finish - 1] if ascii_only else run[begin : finish - 1].decode())
            begin = finish
        return end

    def _read_apart(self, position: int, base: str) -> tuple[dict[str, Any], str]:
        suffix, head_size, tail_size = self._apart[position]
        head = self._file.read(head_size)
        if suffix:  # it waited for its id: written first
            head = b'{"eventId":' + orjson.dumps(f"{base}:{suffix.decode()}") + b"," + head[1:]
        if tail_size:
            event, text = self._with_tail(head, tail_size)
        else:
            event, text = orjson.loads(head), head.decode()
        self._file.seek(1, 1)  # its comma
        return event, text

    def _with_tail(self, head: bytes, tail_size: int) -> tuple[dict[str, Any], str]:
        """A big event read back: its head parsed, its source kept as the text it is stored as."""
        event = orjson.loads(head + b"}")
        whole = bytearray(len(head) + tail_size)
        whole[: len(head)] = head
        self._file.readinto(memoryview(whole)[len(head):])
        text = whole.decode()
        # Where the source begins, in characters: the head's bytes when all are ASCII.
        start = len(head) if len(text) == len(whole) else len(head.decode())
        del whole
        event["source"] = _SourceText(text, start + len(',"source":'), len(text) - 1)
        return event, text


_CHUNK = "assistant/chunk"
_TYPE = itemgetter("type")
_PLUS_COMMA = (1).__add__
#: What takes the place of an event in the caller's list once it is staged.
_STAGED: dict[str, Any] = {}


def _encoded(event: dict[str, Any], origin: int) -> tuple[bytes, list[bytes | memoryview]]:
    """``event``'s stored JSON as a head and the parts of a tail: the tail is ``,"source":…}``
    when the event is big and its source is its last field (the head then lacks its closing
    brace), else nothing. The parts are written one after the other, never joined."""
    source = event.get("source")
    events = source.get("events") if isinstance(source, dict) else None
    if isinstance(events, orjson.Fragment) and list(event)[-1] == "source":
        # A message's raw events, kept as JSON (their nesting was checked as they were read).
        head = storable_made({key: value for key, value in event.items() if key != "source"}, origin)
        return head[:-1], [b',"source":', orjson.dumps(source), b"}"]
    body = storable_made(event, origin)
    if len(body) > LAZY_SOURCE and event["type"] != "assistant/chunk" and list(event)[-1] == "source":
        # Where its source begins: the store gets that part as text (_SourceText).
        split = len(storable_json({key: value for key, value in event.items() if key != "source"})) - 1
        return body[:split], [memoryview(body)[split:]]
    return body, []


class _SourceText:
    """A big event's ``source`` as the JSON text it is stored as, not as values: the store only
    compares it (a retried body's event with the one in the log), and an OpenAI message's or a
    long tool call's source holds thousands of raw events, each a dict once parsed. It is a
    stretch of the event's stored text (``text[start:end]``), not a copy of it."""

    __slots__ = ("_text", "_start", "_end")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, text: str, start: int, end: int) -> None:
        self._text, self._start, self._end = text, start, end

    @property
    def text(self) -> bytes:
        return self._text[self._start : self._end].encode()

    def __eq__(self, other: object) -> bool:
        # The text was written by orjson from values like ``other``: equal values, equal text.
        return isinstance(other, _SourceText) and other.text == self.text or orjson.dumps(other) == self.text
