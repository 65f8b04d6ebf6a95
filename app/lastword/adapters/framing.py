"""Reading a body of provider events: a JSON array, NDJSON, or a raw ``text/event-stream``.

Each yields ``(index, event)`` as the body streams in, ``index`` counting the events read
(array items, non-blank lines, SSE messages with data). A body that is not JSON where JSON
belongs is refused with 400 naming that index; an event that is not a JSON object with 422.

The ``text/event-stream`` body is split into lines by httpx-sse's line decoder (of the SSE
client that the rest of lastword's tooling uses), so lines split across pieces and ``\\r\\n``
endings are its business, not ours; the messages' ``data`` is gathered from the lines here, by
the rules of its message decoder (:func:`_sse_data`). ``event:`` names are not used: Anthropic and OpenAI
repeat the name as the data's ``type``, and ACP has none. A ``data: [DONE]`` sentinel is
skipped. UTF-8 is decoded strictly: a bad byte is a 400, not a replacement character.

Integers are held to the one exact-integer rule of :mod:`lastword.rules.exact_ints`, as on
``/events``: one orjson would change is refused (422 ``number_out_of_range``, naming the event's
index and the field's path), never stored as a float.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator, Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

# httpx-sse's own incremental line decoder, driven piece by piece: its public ``EventSource``
# wants an ``httpx.Response``, and wrapping the body in one cost a sixth of the adapter's time
# (a chain of async generators per line). The version is pinned below 0.5 in pyproject.toml.
from httpx_sse._decoders import SSELineDecoder

from lastword.errors import InvalidProviderEvent, InvalidUtf8, LastwordError, LineTooLarge, MalformedJson
from lastword.rules.exact_ints import check_exact, may_hold_inexact

#: Content types → body framing.
FRAMINGS = {
    "application/json": "json",
    "": "json",
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "text/event-stream": "sse",
}
_VALUE = itemgetter(1)


def provider_event(value: Any, index: int, noun: str = "event") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidProviderEvent(f"{noun} {index} is not a JSON object", index=index)
    return value


def provider_objects(values: Iterable[tuple[int, Any]], noun: str = "event"
                     ) -> tuple[list[tuple[int, dict[str, Any]]], LastwordError | None]:
    """The numbered values as provider events (CLI lines: ``noun``), up to the first that cannot
    be read (from ``values`` as they are made) or is not an object, and then its problem: a
    reader hands on the events before it first, so the problem of an earlier one comes first."""
    batch = []
    try:
        for index, value in values:
            batch.append((index, provider_event(value, index, noun)))
    except LastwordError as problem:
        return batch, problem
    return batch, None


def read_objects(values: list[tuple[int, Any]], noun: str = "event"
                 ) -> tuple[list[tuple[int, dict[str, Any]]], LastwordError | None]:
    """:func:`provider_objects` of values already read: ``values`` itself when all are objects,
    looked at by ``map``, not by a line of Python per value (the usual body: every one is)."""
    if all(map(isinstance, map(_VALUE, values), repeat(dict))):
        return values, None
    return provider_objects(values, noun)


def loads(raw: bytes | str, index: int, noun: str = "event", *, exact: bool = False) -> Any:
    """One JSON value of a body, held to the exact-integer rule of ``/events`` (422
    ``number_out_of_range``); 400 naming the ``noun`` and its index when it is not JSON.
    ``exact``: the caller found no run of 19 digits in text holding ``raw`` (nothing to check)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise MalformedJson(f"{noun} {index} is not valid JSON: {error}", index=index) from None
    if not exact:
        check_exact(raw, first_index=index)
    return value


async def body_lines(
    pieces: AsyncIterator[bytes], max_line: int | None = None
) -> AsyncIterator[tuple[list[bytes], bool]]:
    """The lines (as bytes, blank ones included) that each body piece completes, so an NDJSON
    reader handles a line split across pieces once; a last line without its newline comes at
    the end. The one NDJSON splitter: ``/events`` and the CLI and provider ingests read it.

    Each list comes with ``exact``: no run of 19 digits in the text it was cut from, so none of
    its lines has an integer for the exact-integer rule to check (one search of the piece, not
    one call per line).

    A line is read in time linear in its length however it is cut: the parts of a line not yet
    finished are kept as they came and joined once, when its newline comes (joining them at
    every piece made a line sent a byte at a time cost its length squared). ``max_line``: a
    line longer than this many bytes, finished or not, raises :class:`LineTooLarge` (its index
    is the caller's to name) once the lines before it were handed on.
    """
    pending: list[bytes] = []  # the parts of the line not finished yet
    pending_size = 0
    async for piece in pieces:
        last = piece.rfind(b"\n")
        if last < 0:
            pending.append(piece)
            pending_size += len(piece)
            if max_line is not None and pending_size > max_line:
                raise _too_long(max_line)
            continue
        pending.append(piece[:last])
        text = pending[0] if len(pending) == 1 else b"".join(pending)
        rest = piece[last + 1 :]
        pending, pending_size = ([rest], len(rest)) if rest else ([], 0)
        lines = text.split(b"\n")
        if max_line is not None and len(text) > max_line:
            over = next((at for at, line in enumerate(lines) if len(line) > max_line), None)
            if over is not None:
                if over:
                    yield lines[:over], not may_hold_inexact(b"\n".join(lines[:over]))
                raise _too_long(max_line)
        if max_line is not None and pending_size > max_line:
            yield lines, not may_hold_inexact(text)
            raise _too_long(max_line)
        yield lines, not may_hold_inexact(text)
    if pending_size:
        text = pending[0] if len(pending) == 1 else b"".join(pending)
        yield [text], not may_hold_inexact(text)


def _too_long(max_line: int) -> LineTooLarge:
    return LineTooLarge(f"a line is longer than {max_line} bytes", limit=max_line)


async def json_lines(
    pieces: AsyncIterator[bytes], noun: str = "event", max_line: int | None = None
) -> AsyncIterator[list[tuple[int, Any]]]:
    """The JSON values of the lines each body piece completes, numbered across the body (blank
    lines skipped). A line that is not JSON, or longer than ``max_line`` bytes, raises naming
    its index after the lines before it were handed on, so a reader that stores as it reads
    keeps them."""
    index = 0
    lines_of = body_lines(pieces, max_line)
    while True:
        try:
            lines, exact = await anext(lines_of)
        except StopAsyncIteration:
            return
        except LineTooLarge as error:
            error.extra["index"] = index
            error.detail = f"{noun} {index} is longer than {max_line} bytes"
            raise
        values = _parsed(lines) if exact else None
        if values is not None:  # (most pieces: no line blank, none malformed)
            yield list(enumerate(values, index))
            index += len(values)
            continue
        batch: list[tuple[int, Any]] = []
        for line in lines:
            if line.strip():
                try:
                    batch.append((index, loads(line, index, noun, exact=exact)))
                except LastwordError:
                    if batch:
                        yield batch
                    raise
                index += 1
        if batch:
            yield batch


async def json_array(pieces: AsyncIterator[bytes]) -> AsyncIterator[list[tuple[int, Any]]]:
    """A JSON body read whole: an array's items (or the one value), numbered."""
    body = b"".join([piece async for piece in pieces])
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise MalformedJson(f"the body is not valid JSON: {error}", index=0) from None
    check_exact(body, items=isinstance(data, list), first_index=0)
    yield list(enumerate(data if isinstance(data, list) else [data]))


async def body_text(pieces: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The text of each body piece, UTF-8 decoded strictly across pieces (a character split
    between two pieces comes whole with the second); 400 ``invalid_utf8`` for a bad byte, or a
    body that ends inside a character. The one decoder of ``text/plain`` and SSE bodies."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    async for piece in pieces:
        try:
            text = decoder.decode(piece)
        except UnicodeDecodeError as error:
            raise InvalidUtf8(f"the body is not valid UTF-8: {error.reason}") from None
        if text:
            yield text
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise InvalidUtf8("the body ends inside a UTF-8 character") from None


async def provider_events(pieces: AsyncIterator[bytes], framing: str) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """The body's events one at a time (see :func:`provider_event_batches`)."""
    async for batch in provider_event_batches(pieces, framing):
        for item in batch:
            yield item


async def provider_event_batches(
    pieces: AsyncIterator[bytes], framing: str
) -> AsyncIterator[list[tuple[int, dict[str, Any]]]]:
    """The body's events, in lists of those each body piece completes (one step of an async
    generator per piece, not per event). At an event that cannot be read, the events before it
    come first, then the problem."""
    if framing in ("json", "ndjson"):
        async for values in (json_array(pieces) if framing == "json" else json_lines(pieces)):
            batch, problem = read_objects(values)
            if batch:
                yield batch
            if problem is not None:
                raise problem
        return
    index = 0
    line_decoder = SSELineDecoder()
    data: list[str] = []  # the data lines of the message being read
    async for text in body_text(pieces):
        found = _sse_found(text, line_decoder, data)
        if not found:
            continue
        batch, problem = _sse_events(found, index)
        index += len(found)
        if batch:
            yield batch
        if problem is not None:
            raise problem
    # As the SSE standard says, a message not closed by a blank line when the body ends
    # is incomplete, and is dropped (so is httpx-sse's EventSource).


def _sse_events(found: list[str], index: int) -> tuple[list[tuple[int, dict[str, Any]]], LastwordError | None]:
    """:func:`provider_objects` of the messages' data ``found`` (the first numbered ``index``):
    when none needs the exact-integer check and all are objects, parsed by ``map`` (most of an
    SSE body's events, each a few dozen bytes, so the calls per event of the one-at-a-time way
    cost as much as the parse)."""
    # One search of the piece's data for a run of 19 digits, not one per event.
    exact = not may_hold_inexact("\n".join(found))
    if exact and (values := _all_objects(found)) is not None:
        return list(enumerate(values, index)), None
    # Some event to check or to refuse: one at a time, so the first problem is named.
    return provider_objects((at, loads(message, at, exact=exact)) for at, message in enumerate(found, index))


#: Whole messages of the shape providers send (an optional ``event:`` line, one ``data: `` line,
#: a blank line), one after the other.
_PLAIN_MESSAGES = re.compile(r"(?:(?:event:[^\n]*\n)?data: [^\n]*\n\n)+")
#: The data of each message, in text :data:`_PLAIN_MESSAGES` matched: there each ``data: `` line
#: ends its message, and a ``data: `` inside an ``event:`` line or a data value is not followed
#: by a blank line (or, in a data value, is taken with the line it is in). Not anchored at line
#: starts: a literal first is found by a fast search (``^…`` with MULTILINE tried every position,
#: twice the time).
_PLAIN_DATA = re.compile(r"data: ([^\n]*)\n\n")


def _sse_found(text: str, line_decoder: SSELineDecoder, data: list[str]) -> list[str]:
    """The data of the messages that ``text`` (a piece of the body) completes: those of the
    usual shape (:data:`_PLAIN_MESSAGES`) read by two regular expressions, when the reader is
    between two messages; the rest (a message begun in the piece before, the piece's last one,
    anything else) line by line (:func:`_sse_data`). A line at a time was most of the cost of
    reading an SSE body."""
    if "\r" in text or line_decoder.trailing_cr:
        return _sse_data(line_decoder.decode(text), data)
    found: list[str] = []
    if data or line_decoder.buffer:  # the piece before ended inside a message: its end first
        end = text.find("\n\n") + 2
        if end < 2:
            return _sse_data(line_decoder.decode(text), data)
        found = _sse_data(line_decoder.decode(text[:end]), data)
        text = text[end:]
    plain = _PLAIN_MESSAGES.match(text)
    if plain is not None:
        messages: list[str] = _PLAIN_DATA.findall(text, 0, plain.end())
        if "" in messages or "[DONE]" in messages:
            messages = [message for message in messages if message and message != "[DONE]"]
        found += messages
        text = text[plain.end() :]
    if text:
        found += _sse_data(line_decoder.decode(text), data)
    return found


def _parsed(texts: list[str] | list[bytes]) -> list[Any] | None:
    """Each of ``texts`` parsed, when every one is JSON; else None (then they are read one by
    one, to name the first that is not). By ``map``: no line of Python per text, which for an
    event of a few dozen bytes cost as much as its parse."""
    try:
        return list(map(orjson.loads, texts))
    except orjson.JSONDecodeError:
        return None


def _all_objects(texts: list[str]) -> list[dict[str, Any]] | None:
    """:func:`_parsed`, when every one is a JSON object."""
    values = _parsed(texts)
    return values if values is not None and set(map(type, values)) <= {dict} else None


def _sse_data(lines: list[str], data: list[str]) -> list[str]:
    """The ``data`` of the messages these lines complete (``[DONE]`` and empty data skipped);
    ``data`` holds the data lines read of the message not yet complete.

    The standard's field rules as httpx-sse's ``SSEDecoder`` applies them, kept to the one
    field used here (a line per call of its decoder was a tenth of the adapter's time): a
    ``data`` field is a line ``data`` or ``data:<value>`` (one leading space of the value
    dropped); a blank line completes the message, its data the data lines joined by newlines;
    comments and every other field are ignored."""
    found = []
    for line in lines:
        if not line:
            if data:
                message = data[0] if len(data) == 1 else "\n".join(data)
                data.clear()
                if message and message != "[DONE]":
                    found.append(message)
        elif line.startswith("data"):
            if len(line) == 4:
                data.append("")
            elif line[4] == ":":
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
    return found
