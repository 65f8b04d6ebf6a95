"""``HEAD`` on every ``GET`` endpoint (RFC 9110 §9.3.2): the same status and headers, no body.

Load balancers probe ``/healthz`` with ``HEAD``, and FastAPI routes ``GET`` only. This ASGI
middleware runs a ``HEAD`` request as the ``GET`` it mirrors and keeps only the response's
start: the headers (``Content-Length`` included) go out with an empty body at once, and the
app is then told the client has gone, so a stream or a long poll behind it ends right away
instead of running for a client that asked for headers only. uvicorn still sees the request
as ``HEAD`` and sends no body bytes of its own accord.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The Durable Streams face answers its own HEAD (its metadata is not a GET's headers).
        if scope["type"] != "http" or scope["method"] != "HEAD" or scope["path"].startswith("/ds/"):
            await self.app(scope, receive, send)
            return
        answered = asyncio.Event()

        async def send_head(message: Message) -> None:
            if answered.is_set():
                return
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                answered.set()

        async def receive_head() -> Message:
            if answered.is_set():
                return {"type": "http.disconnect"}
            incoming = asyncio.ensure_future(receive())
            done = asyncio.ensure_future(answered.wait())
            try:
                await asyncio.wait((incoming, done), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (incoming, done):
                    if not task.done():
                        task.cancel()
            if incoming.done() and not incoming.cancelled():
                return incoming.result()
            return {"type": "http.disconnect"}

        await self.app({**scope, "method": "GET"}, receive_head, send_head)
