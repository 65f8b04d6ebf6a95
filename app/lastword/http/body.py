"""A request's body handed to the ingest (:mod:`lastword.ingest`): its bytes as they arrive and
the header values that say how to read them. A client that goes away mid-body ends the bytes
with :class:`~lastword.ingest.body.BodyCut`, the ingest's word for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request

from lastword.ingest.body import Body, BodyCut


async def _pieces(request: Request) -> AsyncIterator[bytes]:
    try:
        async for piece in request.stream():
            yield piece
    except ClientDisconnect:
        raise BodyCut from None


def body_of(request: Request) -> Body:
    headers = request.headers
    return Body(
        _pieces(request),
        content_type=headers.get("content-type", ""),
        content_encoding=headers.get("content-encoding"),
        content_length=headers.get("content-length"),
        idempotency_key=headers.get("idempotency-key"),
    )
