"""Request bodies that are not JSON: a CLI's lines, text pieces, a provider's stream.

What the clients' ``ingest_cli_stream``, ``push_text_stream`` and ``push_provider_stream`` take,
and how it becomes bytes on the wire (NDJSON lines, or SSE pieces as they are), with the content
type a body's first bytes or first item say it has. Both clients stream the same pieces; the
asynchronous one also takes async iterables.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

import orjson
from pydantic import BaseModel


#: What ``ingest_cli_stream`` takes: an agent CLI's standard output as lines (str or bytes, with
#: or without their newline), each line written as the iterable yields it (the async client also
#: takes async iterables); after a failure the lines so far are sent again, then the rest.
CliLines = Iterable[str | bytes] | AsyncIterable[str | bytes]

#: What ``push_text_stream`` takes: pieces of text, written into one request as they come.
TextPieces = Iterable[str] | AsyncIterable[str]


async def _atext_body(pieces: AsyncIterable[str]) -> AsyncIterator[bytes]:
    async for piece in pieces:
        yield piece.encode()


def _cli_line(line: str | bytes) -> bytes:
    """One line of a CLI's output as NDJSON: bytes ending with a newline."""
    data = line.encode() if isinstance(line, str) else line
    return data if data.endswith(b"\n") else data + b"\n"


async def _acli_lines(lines: AsyncIterable[str | bytes]) -> AsyncIterator[bytes]:
    async for line in lines:
        yield _cli_line(line)


#: What ``push_provider_stream`` takes: a whole body (bytes or str, sent as is and retried on
#: failure), or an iterable of provider events (dicts or SDK models, sent as NDJSON) or of raw
#: body pieces (bytes, e.g. a provider response's ``iter_bytes()``), streamed once; the async
#: client also takes async iterables of either.
ProviderBody = bytes | str | Iterable[Any] | AsyncIterable[Any]


def _event_json(event: Any) -> bytes:
    """One provider event as NDJSON: a dict, or an SDK model serialised as its SDK does."""
    if hasattr(event, "to_dict"):  # the anthropic and openai SDKs' models
        event = event.to_dict()
    elif isinstance(event, BaseModel):  # e.g. agent-client-protocol's schema models
        event = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    return orjson.dumps(event) + b"\n"


def _encode(item: Any) -> bytes:
    return item if isinstance(item, bytes) else item.encode() if isinstance(item, str) else _event_json(item)


def _sniff(body: bytes) -> str:
    """The content type of a whole body: a JSON array, NDJSON, or (otherwise) SSE."""
    head = body.lstrip()[:1]
    return {b"[": "application/json", b"{": "application/x-ndjson"}.get(head, "text/event-stream")


def _kind_of(first: Any) -> str:
    """An iterable's content type, from its first item: raw pieces are SSE, events NDJSON."""
    return "text/event-stream" if isinstance(first, (bytes, str)) else "application/x-ndjson"


def _pieces(items: Iterable[Any]) -> tuple[Iterator[bytes], str]:
    iterator = iter(items)
    first = next(iterator, None)

    def pieces() -> Iterator[bytes]:
        if first is not None:
            yield _encode(first)
        for item in iterator:
            yield _encode(item)

    return pieces(), _kind_of(first)


async def _apieces(items: AsyncIterable[Any]) -> tuple[AsyncIterator[bytes], str]:
    iterator = aiter(items)
    first = await anext(iterator, None)

    async def pieces() -> AsyncIterator[bytes]:
        if first is not None:
            yield _encode(first)
        async for item in iterator:
            yield _encode(item)

    return pieces(), _kind_of(first)


async def _async_of(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
