"""The sender's connections: resolve once, check every address, dial the address that was checked.

Checking a webhook's host and then letting the HTTP client look it up again leaves a gap: a name
can answer a public address to the check and ``127.0.0.1`` to the connection (DNS rebinding).
So the lookup happens here, inside the connection: :class:`CheckedBackend` is an httpcore
network backend whose ``connect_tcp`` resolves the URL's host, refuses the whole attempt if any
address is internal (:mod:`lastword.webhooks.addresses`), and opens the TCP connection to one of
the checked addresses itself — no second lookup. Everything above the socket is httpcore's as
usual: the ``Host`` header comes from the URL, and TLS is started with the URL's host name as
server name, so SNI and certificate verification are for the name, not the address.

This diverges from httpx on purpose in two ways: its transport has no parameter for a network
backend, so :func:`pinned_transport` swaps the pool of an ``AsyncHTTPTransport`` for one built
with this backend; and environment proxies (``HTTP_PROXY`` …) are not used — a proxy would do
its own lookup of the name, out of reach of the check.
"""

from __future__ import annotations

import functools
import ssl
import typing

import certifi
import httpcore
import httpx
from httpcore import (
    SOCKET_OPTION,
    AnyIOBackend,
    AsyncNetworkBackend,
    AsyncNetworkStream,
)

from lastword.webhooks import addresses


class CheckedBackend(AsyncNetworkBackend):
    """Dials only addresses that passed the check (all of them, unless ``allow_private``)."""

    def __init__(self, *, allow_private: bool, inner: AsyncNetworkBackend | None = None) -> None:
        self._allow_private = allow_private
        self._inner = inner or AnyIOBackend()  # the service runs on asyncio, through anyio

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        try:
            found = await addresses.resolve(host, port)
        except (OSError, UnicodeError) as unresolved:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {unresolved}") from unresolved
        if not found:
            raise httpcore.ConnectError(f"{host!r} has no IPv4 or IPv6 address")
        if not self._allow_private:
            addresses.check_addresses(host, found)
        options = list(socket_options or ())
        for address in found[:-1]:  # in the resolver's order, as a plain client would try them
            try:
                return await self._inner.connect_tcp(str(address), port, timeout=timeout,
                                                     local_address=local_address, socket_options=options)
            except httpcore.ConnectError:
                continue
        return await self._inner.connect_tcp(str(found[-1]), port, timeout=timeout,
                                             local_address=local_address, socket_options=options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: typing.Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are never delivered over a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one client TLS context of the process (certifi's roots).

    Made once: loading the roots takes ~50 ms of CPU, and a server made one for httpx's
    transport and another for the pool on every start. Nothing changes it after it is made,
    and an ``SSLContext`` may be shared by connections on any thread."""
    return ssl.create_default_context(cafile=certifi.where())


def pinned_transport(*, allow_private: bool) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose connections go through :class:`CheckedBackend`."""
    context = tls_context()
    transport = httpx.AsyncHTTPTransport(verify=context, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(  # no public parameter for the backend (see above)
        ssl_context=context,
        network_backend=CheckedBackend(allow_private=allow_private),
    )
    return transport
