"""The ``/mcp`` route, which loads the MCP face on its first request.

Importing the MCP SDK costs more CPU than the rest of the service's imports together (about
0.9 s against 0.5 s here), and a replica restarting after a crash should be ready again as
soon as it can: so the SDK is imported, off the event loop, only when a parent first calls
``/mcp``, and its transport's task group lives in a task of its own until shutdown.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from lastword.settings import Settings

if TYPE_CHECKING:
    from lastword.http.mcp_face import McpFace
    from lastword.service import RunService


class McpMount:
    """An ASGI app for ``/mcp`` that starts :class:`lastword.http.mcp_face.McpFace` when first asked."""

    def __init__(self, service: Callable[[], RunService], settings: Settings) -> None:
        self._service = service
        self._settings = settings
        self._face: McpFace | None = None
        self._starting: asyncio.Lock | None = None
        self._stopping: asyncio.Event | None = None
        self._serving: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        face = self._face or await self._start()
        await face(scope, receive, send)

    async def _start(self) -> McpFace:
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self._face is not None:
                return self._face
            module = await asyncio.to_thread(importlib.import_module, "lastword.http.mcp_face")
            face: McpFace = module.McpFace(self._service, self._settings)
            ready, self._stopping = asyncio.Event(), asyncio.Event()
            self._serving = asyncio.create_task(self._serve(face, ready, self._stopping))
            await ready.wait()
            self._face = face
            return face

    @staticmethod
    async def _serve(face: McpFace, ready: asyncio.Event, stopping: asyncio.Event) -> None:
        async with face.running():
            ready.set()
            await stopping.wait()

    async def close(self) -> None:
        """Stop the transport, if it was ever started (called by the application's lifespan)."""
        if self._serving is not None and self._stopping is not None:
            self._stopping.set()
            await self._serving
