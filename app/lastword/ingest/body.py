"""A request body as the ingest reads it: its bytes as they arrive, and the few header values
that say how to read them. Size limits, ``Content-Encoding`` (gzip), the charset.

A face (HTTP today) makes a :class:`Body` of its request; nothing here knows the transport.
A face whose client goes away mid-body ends the byte iterator with :class:`BodyCut`, so a
streamed ingest can keep what arrived and a whole-body read fails as it did before; one whose
drain runs out of time mid-body ends it with :class:`BodyDrained`.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from lastword.errors import (
    Draining,
    InvalidGzip,
    PayloadTooLarge,
    UnsupportedCharset,
    UnsupportedEncoding,
)


class BodyCut(Exception):
    """The body ended before its end: the client went away while sending it."""


class BodyDrained(Draining):
    """The body's bytes stop here: the replica's drain ran out of time while they still came
    (SPEC §16a). What the whole lines received made is kept; the answer is 503 ``draining``
    with ``Retry-After`` (a streamed ingest adds what it stored, ``lastSeq`` included)."""

    def __init__(self, detail: str = "the replica is shutting down and its body was cut where it stood: the whole "
                 "lines before the cut are stored; send the body again (eventIds store nothing twice)",
                 **extra: Any) -> None:
        super().__init__(detail, **extra)


@dataclass(frozen=True)
class Body:
    """One request's body: ``pieces`` as received (still encoded), and its header values
    (each as sent, ``None`` or ``""`` when absent)."""

    pieces: AsyncIterator[bytes]
    content_type: str = ""
    content_encoding: str | None = None
    content_length: str | None = None
    idempotency_key: str | None = None

    @property
    def media_type(self) -> str:
        return self.content_type.split(";")[0].strip().lower()


def check_declared_length(body: Body, limit: int) -> None:
    declared = body.content_length
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is {declared} bytes; the limit is {limit}", limit=limit)


def check_charset(body: Body) -> None:
    """415 for a ``charset`` other than UTF-8: the body would be misread as UTF-8."""
    for parameter in body.content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedCharset(f"the body must be UTF-8, not {value.strip()!r}", charset=value.strip())


def content_encoding(body: Body) -> str | None:
    """``"gzip"`` for a gzip body, None for a plain one; 415 for any other ``Content-Encoding``."""
    header = body.content_encoding or ""
    codings = [coding.strip().lower() for coding in header.split(",")]
    codings = [coding for coding in codings if coding and coding != "identity"]
    if not codings:
        return None
    if codings in (["gzip"], ["x-gzip"]):
        return "gzip"
    raise UnsupportedEncoding(
        f"Content-Encoding {header!r} is not supported (gzip or identity)",
        contentEncoding=header,
    )


#: Most decoded bytes of a gzip body handed on at once when the body has no total limit (a
#: small piece may decode to far more: it is handed on in pieces of this size).
GUNZIP_STEP = 1024 * 1024


async def body_pieces(body: Body, limit: int | None) -> AsyncIterator[bytes]:
    """The body as it arrives (gzip decoded), refused with 413 as soon as it passes ``limit``
    bytes; the limit counts decoded bytes, so a small gzip bomb is refused like a big body.
    ``limit`` None: no total limit (the reader bounds what it holds, an agent CLI's lines), and
    a gzip body is decoded :data:`GUNZIP_STEP` bytes at a time."""
    check_charset(body)
    encoding = content_encoding(body)
    if limit is not None:
        check_declared_length(body, limit)
    gunzip = _Gunzip() if encoding == "gzip" else None
    seen = 0
    async for received in body.pieces:
        if limit is None:
            if gunzip is None:
                if received:
                    yield received
                continue
            for piece in gunzip.steps(received, GUNZIP_STEP):
                yield piece
            continue
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

    def steps(self, data: bytes, step: int) -> Iterator[bytes]:
        """All of ``data`` decoded, handed on at most ``step`` bytes at a time."""
        try:
            while data:
                out = self._decoder.decompress(data, step)
                if out:
                    yield out
                if self._decoder.unconsumed_tail:
                    data = self._decoder.unconsumed_tail
                    continue
                data = self._decoder.unused_data
                if data:
                    self._decoder = zlib.decompressobj(wbits=31)  # the next member
        except zlib.error as error:
            raise InvalidGzip(f"the body is not valid gzip: {error}") from None

    def finish(self) -> None:
        if not self._decoder.eof:
            raise InvalidGzip("the gzip body ends before its end")


async def read_body(body: Body, limit: int) -> bytes:
    return b"".join([piece async for piece in body_pieces(body, limit)])
