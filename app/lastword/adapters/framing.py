"""Reading a body of provider events: a JSON array, NDJSON, or a raw ``text/event-stream``.

Each yields ``(index, event)`` as the body streams in, ``index`` counting the events read
(array items, non-blank lines, SSE messages with data). A body that is not JSON where JSON
belongs is refused with 400 naming that index; an event that is not a JSON object with 422.

The ``text/event-stream`` body is parsed by httpx-sse (the parser of the SSE client that the
rest of lastword's tooling uses): the body pieces are handed to its line and message decoders,
so lines split across pieces, ``\\r\\n`` endings and multi-line ``data:`` fields are its
business, not ours. Its ``event:`` names are not used: Anthropic and OpenAI
repeat the name as the data's ``type``, and ACP has none. A ``data: [DONE]`` sentinel is
skipped. UTF-8 is decoded strictly: a bad byte is a 400, not a replacement character.

Integers are held to the one exact-integer rule of :mod:`lastword.rules.exact_ints`, as on
``/events``: one orjson would change is refused (422 ``number_out_of_range``, naming the event's
index and the field's path), never stored as a float.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from typing import Any

import orjson

# httpx-sse's own incremental decoders, driven piece by piece: its public ``EventSource``
# wants an ``httpx.Response``, and wrapping the body in one cost a sixth of the adapter's time
# (a chain of async generators per line). The version is pinned below 0.5 in pyproject.toml.
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from lastword.errors import InvalidProviderEvent, InvalidUtf8, LastwordError, MalformedJson
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

def provider_event(value: Any, index: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidProviderEvent(f"event {index} is not a JSON object", index=index)
    return value


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


async def body_lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[tuple[list[bytes], bool]]:
    """The lines (as bytes, blank ones included) that each body piece completes, so an NDJSON
    reader handles a line split across pieces once; a last line without its newline comes at
    the end. The one NDJSON splitter: ``/events`` and the CLI and provider ingests read it.

    Each list comes with ``exact``: no run of 19 digits in the text it was cut from, so none of
    its lines has an integer for the exact-integer rule to check (one search of the piece, not
    one call per line)."""
    pending = b""
    async for piece in pieces:
        text = pending + piece
        lines = text.split(b"\n")
        pending = lines.pop()
        if lines:
            yield lines, not may_hold_inexact(text)
    if pending:
        yield [pending], not may_hold_inexact(pending)


async def json_lines(pieces: AsyncIterator[bytes], noun: str = "event") -> AsyncIterator[list[tuple[int, Any]]]:
    """The JSON values of the lines each body piece completes, numbered across the body (blank
    lines skipped). A line that is not JSON raises after the lines before it were handed on,
    so a reader that stores as it reads keeps them."""
    index = 0
    async for lines, exact in body_lines(pieces):
        batch = []
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
    if framing in ("json", "ndjson"):
        async for batch in (json_array(pieces) if framing == "json" else json_lines(pieces)):
            for index, value in batch:
                yield index, provider_event(value, index)
    else:
        index = 0
        line_decoder, messages = SSELineDecoder(), SSEDecoder()
        async for text in body_text(pieces):
            for event in _sse_events(line_decoder.decode(text), messages):
                yield index, provider_event(loads(event, index), index)
                index += 1
        # As the SSE standard says, a message not closed by a blank line when the body ends
        # is incomplete, and is dropped (so is httpx-sse's EventSource).


def _sse_events(lines: list[str], messages: SSEDecoder) -> list[str]:
    """The ``data`` of the messages these lines complete (``[DONE]`` and empty data skipped)."""
    found = []
    for line in lines:
        message = messages.decode(line)
        if message is not None and message.data and message.data != "[DONE]":
            found.append(message.data)
    return found
