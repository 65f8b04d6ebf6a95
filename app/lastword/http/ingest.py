"""Reading request bodies: size limits, content types, JSON, NDJSON and streamed chunk text.

JSON bodies are all-or-nothing (big arrays are read a slice at a time, see
:mod:`lastword.http.json_input`). NDJSON and ``text/plain`` bodies are applied as they stream in:
the lines each piece of the body completes (in groups of a bounded size), or for text each
piece of text, are stored before the next is read, so a producer streaming a long session never waits for its end, and a body cut
off midway keeps what arrived (a retry with the same ``eventId``s is then counted as duplicates).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from lastword.adapters.framing import body_lines, body_text
from lastword.errors import (
    BatchTooLarge,
    EmptyBatch,
    EventTooLarge,
    InvalidGzip,
    LastwordError,
    MalformedJson,
    PayloadTooLarge,
    TooDeeplyNested,
    Unprocessable,
    UnsupportedCharset,
    UnsupportedEncoding,
    UnsupportedMedia,
)
from lastword.http import json_input
from lastword.rules.events import validate_events
from lastword.rules.records import AppendOutcome

M = TypeVar("M", bound=BaseModel)
Append = Callable[[list[dict[str, Any]]], Awaitable[AppendOutcome]]


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def check_declared_length(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is {declared} bytes; the limit is {limit}", limit=limit)


def check_charset(request: Request) -> None:
    """415 for a ``charset`` other than UTF-8: the body would be misread as UTF-8."""
    for parameter in request.headers.get("content-type", "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedCharset(f"the body must be UTF-8, not {value.strip()!r}", charset=value.strip())


def content_encoding(request: Request) -> str | None:
    """``"gzip"`` for a gzip body, None for a plain one; 415 for any other ``Content-Encoding``."""
    codings = [coding.strip().lower() for coding in request.headers.get("content-encoding", "").split(",")]
    codings = [coding for coding in codings if coding and coding != "identity"]
    if not codings:
        return None
    if codings in (["gzip"], ["x-gzip"]):
        return "gzip"
    raise UnsupportedEncoding(
        f"Content-Encoding {request.headers['content-encoding']!r} is not supported (gzip or identity)",
        contentEncoding=request.headers["content-encoding"],
    )


async def body_pieces(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The body as it arrives (gzip decoded), refused with 413 as soon as it passes ``limit``
    bytes; the limit counts decoded bytes, so a small gzip bomb is refused like a big body."""
    check_charset(request)
    encoding = content_encoding(request)
    check_declared_length(request, limit)
    gunzip = _Gunzip() if encoding == "gzip" else None
    seen = 0
    async for received in request.stream():
        piece = received if gunzip is None else gunzip.decode(received, limit - seen + 1)
        seen += len(piece)
        if seen > limit:
            raise PayloadTooLarge(f"the body passed the limit of {limit} bytes", limit=limit)
        if piece:
            yield piece
    if gunzip is not None:
        gunzip.finish()


class _Gunzip:
    """Incremental gzip decoding (members one after another, as RFC 1952 allows)."""

    def __init__(self) -> None:
        self._decoder = zlib.decompressobj(wbits=31)

    def decode(self, data: bytes, most: int) -> bytes:
        """Up to ``most`` decoded bytes of ``data`` (more are not decoded: the body is too big)."""
        out = b""
        try:
            while data and len(out) < most:
                out += self._decoder.decompress(data, most - len(out))
                if self._decoder.unconsumed_tail:
                    break  # ``most`` reached: the caller refuses the body
                data = self._decoder.unused_data
                if data:
                    self._decoder = zlib.decompressobj(wbits=31)  # the next member
        except zlib.error as error:
            raise InvalidGzip(f"the body is not valid gzip: {error}") from None
        return out

    def finish(self) -> None:
        if not self._decoder.eof:
            raise InvalidGzip("the gzip body ends before its end")


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([piece async for piece in body_pieces(request, limit)])


def parse_json(raw: bytes) -> Any:
    """One JSON value, exactly (see :mod:`lastword.http.json_input`): 400 if malformed."""
    return json_input.loads(raw)


#: Levels of nesting kept free for the envelopes that stored values are served in (a stream's
#: ``run/snapshot`` holds a run's metadata and a turn's error one level deeper than sent).
NESTING_HEADROOM = 4  # storable_json's literal holds as many lists
MAX_NESTING = 254 - NESTING_HEADROOM


def storable_json(value: Any, index: int | None = None) -> bytes:
    """``value`` as it will be stored (JSON); 400 if it nests too deeply to be served back.

    orjson reads up to 1024 levels of nesting but writes at most 254, so a value between the
    two would parse and then fail every answer that holds it: it is refused as input instead.
    One encoding serves both the check and the store.
    """
    try:
        # The four lists written as one literal: built in a loop they cost a quarter of the
        # call for a small event. (Writing the value plain first, and wrapped only when its
        # brackets could nest that deep, made a bracket-heavy event 3-4 times slower.)
        return orjson.dumps([[[[value]]]])[NESTING_HEADROOM:-NESTING_HEADROOM]
    except orjson.JSONEncodeError:
        where = "the body" if index is None else f"event {index}"
        extra = {} if index is None else {"index": index}
        raise TooDeeplyNested(f"{where} nests JSON deeper than {MAX_NESTING} levels", **extra) from None


#: Events encoded between two looks at the event loop.
ENCODE_SLICE = 256


async def encode_events(events: list[dict[str, Any]], max_event_bytes: int) -> list[str]:
    """Each event's JSON as it will be stored; 413 naming the first event over ``max_event_bytes``
    (its index, so a streamed body keeps the events before it)."""
    encoded = []
    for index, event in enumerate(events):
        if index % ENCODE_SLICE == ENCODE_SLICE - 1:
            await asyncio.sleep(0)  # a big batch is encoded without holding the event loop
        body = storable_json(event, index)
        if len(body) > max_event_bytes:
            raise EventTooLarge(
                f"event {index} is {len(body)} bytes as JSON; the limit is {max_event_bytes}",
                index=index, limit=max_event_bytes,
            )
        encoded.append(body.decode())
    return encoded


def require_json(request: Request) -> None:
    if media_type(request) not in ("application/json", ""):
        raise UnsupportedMedia(f"expected application/json, got {media_type(request)!r}")


async def read_model(request: Request, model: type[M], limit: int, *, optional: bool = False) -> M:
    """A JSON body validated against ``model`` (an empty body is ``{}`` when ``optional``)."""
    require_json(request)
    raw = await read_body(request, limit)
    if not raw.strip() and optional:
        return model.model_validate({})
    data = parse_json(raw)
    storable_json(data)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise Unprocessable(f"{field}: {first['msg']}", field=field) from None


class Progress:
    """What a streamed body has stored so far (reported in the answer, or in a problem)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.duplicates = 0
        self.last_seq: int | None = None

    def add(self, outcome: AppendOutcome) -> None:
        self.accepted += outcome.accepted
        self.duplicates += outcome.duplicates
        self.last_seq = outcome.last_seq

    def answer(self) -> dict[str, Any]:
        """The ``AppendResult``; ``lastSeq`` is None when nothing was appended at all."""
        return {"accepted": self.accepted, "duplicates": self.duplicates, "lastSeq": self.last_seq}

    def annotate(self, error: LastwordError) -> LastwordError:
        """Tell the producer what was kept before the failure."""
        error.extra.setdefault("accepted", self.accepted)
        error.extra.setdefault("duplicates", self.duplicates)
        if self.last_seq is not None:
            error.extra.setdefault("lastSeq", self.last_seq)
        return error


def _too_many(max_events: int) -> BatchTooLarge:
    return BatchTooLarge(f"the batch holds more than {max_events} events; the limit is {max_events}", limit=max_events)


async def ingest_json(request: Request, limit: int, max_events: int, append: Append) -> dict[str, Any]:
    """A JSON event or array of events, all or nothing; an array of more than ``max_events``
    is refused (413 ``batch_too_large``).

    An array larger than :data:`json_input.WHOLE_BYTES` is parsed, then validated, a slice at
    a time (:func:`json_input.array_slices`), giving the event loop back between slices: a
    maximum-size batch must not stall every other request, stream and lease sweep while it is
    read. A smaller body is parsed and validated in one go.
    """
    raw = await read_body(request, limit)
    slices = json_input.array_slices(raw) if len(raw) > json_input.WHOLE_BYTES else None
    if slices is None:
        events = json_input.loads_events(raw)
        if len(events) > max_events:
            raise _too_many(max_events)
        validate_events(events)
    else:
        parsed: list[list[Any]] = []
        count = 0
        for piece in slices:
            items = json_input.parse_slice(piece, count)
            count += len(items)
            if count > max_events:
                raise _too_many(max_events)
            parsed.append(items)
            await asyncio.sleep(0)
        events = []
        for items in parsed:
            validate_events(items, index_offset=len(events))
            events.extend(items)
            await asyncio.sleep(0)
    if not events:
        raise EmptyBatch("the batch holds no event")
    progress = Progress()
    progress.add(await append(events))
    return progress.answer()


class _Position:
    """Where an NDJSON body has got to: the next event's index and the last line's number."""

    def __init__(self) -> None:
        self.index = 0  # events so far (blank lines are not events)
        self.line = 0  # lines so far, 1-based once counted, blank ones included


async def ingest_ndjson(request: Request, limit: int, append: Append) -> dict[str, Any]:
    progress = Progress()
    position = _Position()
    try:
        async for lines, exact in body_lines(body_pieces(request, limit)):
            await _apply_lines(lines, position, append, progress, exact=exact)
    except ClientDisconnect:
        # What arrived before the break is stored; the producer retries with its eventIds.
        pass
    except LastwordError as error:
        raise progress.annotate(error) from None
    if progress.last_seq is None:
        raise EmptyBatch("the body holds no event")
    return progress.answer()


#: Most lines of an NDJSON body stored in one commit. How the body's bytes were split in
#: transit decides only where groups may end, never how large one is: a network piece holding
#: thousands of lines is stored in several groups. (``LASTWORD_MAX_BATCH_EVENTS`` is for JSON
#: arrays, which are all or nothing; an NDJSON body is a stream and has no such limit.)
NDJSON_GROUP = 500


async def _apply_lines(lines: list[bytes], position: _Position, append: Append, progress: Progress, *,
                       exact: bool) -> None:
    """Store the complete lines of one body piece, in groups of at most :data:`NDJSON_GROUP`.

    The body is applied line by line: at the first bad line (not JSON, not a valid event, or
    refused by the store) the lines before it are stored and the problem names the line, by
    event ``index`` and by ``line`` number. ``exact``: the piece has no run of 19 digits, so no
    line can hold an inexact integer and none is searched for one (one search of the piece
    costs far less than a call per line).
    """
    events: list[dict[str, Any]] = []
    line_numbers: list[int] = []
    first_index = position.index
    failure: LastwordError | None = None
    for line in lines:
        position.line += 1
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
            if not exact:
                json_input.refuse_inexact(line, index=position.index)
            validate_events([event], index_offset=position.index)
        except orjson.JSONDecodeError as error:
            failure = MalformedJson(f"line {position.line} is not valid JSON: {error}", index=position.index)
        except (Unprocessable, TooDeeplyNested) as error:
            failure = error
        if failure is not None:
            failure.extra["line"] = position.line
            break
        events.append(event)
        line_numbers.append(position.line)
        position.index += 1
    for start in range(0, len(events), NDJSON_GROUP):
        group = events[start : start + NDJSON_GROUP]
        try:
            progress.add(await append(group))
        except LastwordError as error:
            at = error.extra.get("index")
            if not isinstance(at, int) or not 0 <= at < len(group):
                raise
            # The store takes or refuses a group whole; in a stream the lines before the
            # refused one stand, as they would have had they come in their own pieces.
            if at > 0:
                progress.add(await append(group[:at]))
            error.extra.update(index=first_index + start + at, line=line_numbers[start + at])
            raise
    if failure is not None:
        raise failure


async def ingest_text(request: Request, limit: int, append: Append) -> dict[str, Any]:
    """Each piece of a ``text/plain`` body becomes one text delta, UTF-8 decoded across pieces."""
    progress = Progress()
    try:
        async for text in body_text(body_pieces(request, limit)):
            progress.add(await append([text_delta(text)]))
    except ClientDisconnect:
        pass
    except LastwordError as error:
        raise progress.annotate(error) from None
    return progress.answer()


def text_delta(text: str, event_id: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}
    if event_id is not None:
        event["eventId"] = event_id
    return event
