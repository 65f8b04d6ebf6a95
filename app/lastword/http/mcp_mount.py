"""The ``/mcp`` route, which loads the MCP face on its first request.

Importing the MCP SDK costs more CPU than the rest of the service's imports together (about
0.9 s against 0.5 s here), and a replica restarting after a crash should be ready again as
soon as it can: so the SDK is imported, off the event loop, only when a parent first calls
``/mcp``, and its transport's task group lives in a task of its own until shutdown.

Before the face sees a request, the mount checks its ``Host`` and ``Origin`` (SPEC §18): a page
on a name its author controls can make that name resolve to ``127.0.0.1`` (DNS rebinding) and
then call ``/mcp`` as its own origin. So ``/mcp`` answers only a ``Host`` that is a loopback
name (``localhost``, ``*.localhost``), an address literal (a browser that asked for an address
got no name an attacker controls), ``LASTWORD_HOST``, or a name in ``LASTWORD_ALLOWED_HOSTS``
(``*`` turns the check off) — any port; others are 403 ``host_not_allowed``. A foreign
``Origin`` is 403 ``cross_origin`` on every method (``GET`` too, which opens a stream).

This is the MCP SDK's own DNS-rebinding protection (``TransportSecuritySettings``) done here on
purpose: its refusals are plain text where every other refusal here is a problem document with
a ``code``, its lists cannot say "any address literal" or "any origin" (``*``), and checking here
refuses a request without importing the SDK at all.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from lastword.errors import HostNotAllowed, LastwordError
from lastword.http.access import send_problem
from lastword.http.same_origin import foreign_origin, header, origin_set
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
        names = [name.strip() for name in settings.allowed_hosts.split(",") if name.strip()]
        self._any_host = "*" in names
        self._hosts = frozenset(_host_name(name) for name in [*names, settings.host])
        self._origins = origin_set(settings.cors_origin_list)
        self._any_origin = "*" in settings.cors_origin_list

    def refusal(self, scope: Scope) -> LastwordError | None:
        """Why ``/mcp`` does not answer this request (its Host or its Origin), or None."""
        host = header(scope, b"host")
        if not self._any_host and not self._serves(host or ""):
            return HostNotAllowed(
                f"/mcp does not answer for Host {host!r}: add the name to LASTWORD_ALLOWED_HOSTS if clients "
                "reach the service by it")
        return foreign_origin(scope, self._origins, self._any_origin)

    def _serves(self, host: str) -> bool:
        name = _host_name(host)
        if not name:
            return False
        if name == "localhost" or name.endswith(".localhost") or name in self._hosts:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.refusal(scope)
        if refused is not None:
            await send_problem(send, refused)
            return
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


def _host_name(host: str) -> str:
    """The name of a ``Host`` value: no port, no brackets, lower case, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")
