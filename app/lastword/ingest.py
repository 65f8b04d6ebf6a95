"""Reading request bodies: size limits, content types, JSON, NDJSON and streamed chunk text.

JSON bodies are all-or-nothing. NDJSON and ``text/plain`` bodies are applied as they stream in:
each piece of the body that completes lines (or, for text, each piece of text) is stored before
the next is read, so a producer streaming a long session never waits for its end, and a body cut
off midway keeps what arrived (a retry with the same ``eventId``s is then counted as duplicates).
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from lastword.errors import (
    EmptyBatch,
    InvalidUtf8,
    LastwordError,
    MalformedJson,
    PayloadTooLarge,
    TooDeeplyNested,
    Unprocessable,
    UnsupportedMedia,
)
from lastword.events import validate_events
from lastword.records import AppendOutcome

M = TypeVar("M", bound=BaseModel)
Append = Callable[[list[dict[str, Any]]], Awaitable[AppendOutcome]]


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def check_declared_length(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is {declared} bytes; the limit is {limit}", limit=limit)


async def body_pieces(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The body as it arrives, refused with 413 as soon as it passes ``limit`` bytes."""
    check_declared_length(request, limit)
    seen = 0
    async for piece in request.stream():
        seen += len(piece)
        if seen > limit:
            raise PayloadTooLarge(f"the body passed the limit of {limit} bytes", limit=limit)
        if piece:
            yield piece


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([piece async for piece in body_pieces(request, limit)])


def parse_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise MalformedJson(f"the body is not valid JSON: {error}") from None


#: Levels of nesting kept free for the envelopes that stored values are served in (a stream's
#: ``run/snapshot`` holds a run's metadata and a turn's error one level deeper than sent).
NESTING_HEADROOM = 4
MAX_NESTING = 254 - NESTING_HEADROOM


def storable_json(value: Any, index: int | None = None) -> bytes:
    """``value`` as it will be stored (JSON); 400 if it nests too deeply to be served back.

    orjson reads up to 1024 levels of nesting but writes at most 254, so a value between the
    two would parse and then fail every answer that holds it: it is refused as input instead.
    One encoding serves both the check and the store.
    """
    wrapped = value
    for _ in range(NESTING_HEADROOM):
        wrapped = [wrapped]
    try:
        return orjson.dumps(wrapped)[NESTING_HEADROOM:-NESTING_HEADROOM]
    except orjson.JSONEncodeError:
        where = "the body" if index is None else f"event {index}"
        extra = {} if index is None else {"index": index}
        raise TooDeeplyNested(f"{where} nests JSON deeper than {MAX_NESTING} levels", **extra) from None


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


async def ingest_json(request: Request, limit: int, append: Append) -> dict[str, Any]:
    raw = await read_body(request, limit)
    data = parse_json(raw)
    events = data if isinstance(data, list) else [data]
    if not events:
        raise EmptyBatch("the batch holds no event")
    validate_events(events)
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
    pending = b""
    try:
        async for piece in body_pieces(request, limit):
            lines = (pending + piece).split(b"\n")
            pending = lines.pop()
            await _apply_lines(lines, position, append, progress)
        if pending:
            await _apply_lines([pending], position, append, progress)
    except ClientDisconnect:
        # What arrived before the break is stored; the producer retries with its eventIds.
        pass
    except LastwordError as error:
        raise progress.annotate(error) from None
    if progress.last_seq is None:
        raise EmptyBatch("the body holds no event")
    return progress.answer()


async def _apply_lines(lines: list[bytes], position: _Position, append: Append, progress: Progress) -> None:
    """Store the complete lines of one body piece, as one batch.

    The body is applied line by line: at the first bad line (not JSON, not a valid event, or
    refused by the store) the lines before it are stored and the problem names the line, by
    event ``index`` and by ``line`` number.
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
            validate_events([event], index_offset=position.index)
        except orjson.JSONDecodeError as error:
            failure = MalformedJson(f"line {position.line} is not valid JSON: {error}", index=position.index)
        except Unprocessable as error:
            failure = error
        if failure is not None:
            failure.extra["line"] = position.line
            break
        events.append(event)
        line_numbers.append(position.line)
        position.index += 1
    if events:
        try:
            progress.add(await append(events))
        except LastwordError as error:
            at = error.extra.get("index")
            if not isinstance(at, int) or not 0 <= at < len(events):
                raise
            # The store takes or refuses a batch whole; in a stream the lines before the
            # refused one stand, as they would have had they come in their own pieces.
            if at > 0:
                progress.add(await append(events[:at]))
            error.extra.update(index=first_index + at, line=line_numbers[at])
            raise
    if failure is not None:
        raise failure


async def ingest_text(request: Request, limit: int, append: Append) -> dict[str, Any]:
    """Each piece of a ``text/plain`` body becomes one text delta, UTF-8 decoded across pieces."""
    progress = Progress()
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        async for piece in body_pieces(request, limit):
            try:
                text = decoder.decode(piece)
            except UnicodeDecodeError as error:
                raise InvalidUtf8(f"the body is not valid UTF-8: {error.reason}") from None
            if text:
                progress.add(await append([text_delta(text)]))
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InvalidUtf8("the body ends inside a UTF-8 character") from None
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
