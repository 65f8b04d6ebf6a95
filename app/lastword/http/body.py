"""A request's body handed to the ingest (:mod:`lastword.ingest`): its bytes as they arrive and
the header values that say how to read them. A client that goes away mid-body ends the bytes
with :class:`~lastword.ingest.body.BodyCut`, the ingest's word for it; a drain that runs out of
time while the body still comes ends them with :class:`~lastword.ingest.body.BodyDrained`.

The server (:mod:`lastword.server`) offers :data:`BODY_DRAINED` in every request's scope: a
function that says whether the drain has cut this request's body. When it cuts one it wakes the
request's read, so a body in flight ends at once, with what arrived before, instead of being
cancelled with the task that reads it (a 500).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from starlette.requests import ClientDisconnect, Request

from lastword.ingest.body import Body, BodyCut, BodyDrained

#: The scope extension: ``() -> bool``, whether the drain has cut this request's body.
BODY_DRAINED = "lastword.body_drained"


async def _pieces(request: Request) -> AsyncIterator[bytes]:
    drained: Callable[[], bool] | None = request.scope.get("extensions", {}).get(BODY_DRAINED)
    if drained is None:  # served by another server (an ASGI test transport)
        try:
            async for piece in request.stream():
                yield piece
        except ClientDisconnect:
            raise BodyCut from None
        return
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise BodyCut
        piece = message.get("body", b"")
        if piece:
            yield piece
        if not message.get("more_body", False):
            return
        if drained():
            raise BodyDrained()


def body_of(request: Request) -> Body:
    headers = request.headers
    return Body(
        _pieces(request),
        content_type=headers.get("content-type", ""),
        content_encoding=headers.get("content-encoding"),
        content_length=headers.get("content-length"),
        idempotency_key=headers.get("idempotency-key"),
    )
