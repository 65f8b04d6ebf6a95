"""Which addresses a webhook may reach (SPEC §18 "Safe when left open").

A run's creator chooses the webhook URL, and ``GET …/deliveries`` shows the first characters of
the answer: without this check anyone who can create a run could read services that only the
host itself reaches (``169.254.169.254``, ``127.0.0.1:…``, the pod network). So by default a
target must be a *global* address; ``LASTWORD_WEBHOOK_ALLOW_PRIVATE=true`` lifts that.

Choices made here:

* **Addresses are classified with** :mod:`ipaddress`, never by string tests: ``is_global`` plus
  explicit checks for what it lets through (multicast is "global" to it) and for IPv4 addresses
  carried inside IPv6 ones (IPv4-mapped, IPv4-compatible, 6to4, NAT64, Teredo), which reach the
  embedded IPv4 host.
* **A literal host is parsed the way resolvers parse it.** ``getaddrinfo`` hands a numeric name to
  ``inet_aton``, which reads ``127.1``, ``2130706433``, ``0x7f.1`` and ``0177.0.0.1`` as
  127.0.0.1; :func:`socket.inet_aton` is that same parser, so a spelling is refused exactly when
  a resolver would turn it into a refused address. Percent-escapes and full-width digits are
  undone first (IDNA normalises them the same way).
* **Names are resolved, and every address must pass** (a name with one internal address among
  public ones is refused: the connection could go to any of them). ``localhost`` and its
  subdomains are loopback by definition (RFC 6761), whatever the resolver says.
* **The check happens twice**: at creation, on the URL (:func:`literal_refusal`) and on the
  name's addresses; at each delivery, on the addresses the sender then connects to
  (:mod:`lastword.webhooks.pinned`), so a name that changes its answer between the two
  (DNS rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import unicodedata
from socket import getaddrinfo
from urllib.parse import unquote

__all__ = ["IPAddress", "RefusedAddress", "check_addresses", "getaddrinfo", "literal_address",
           "literal_refusal", "normalised_host", "refusal", "resolve"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The RFC 1918 and ULA ranges, named "private" in refusals (other non-global ranges are named
#: for what :mod:`ipaddress` says they are, or "non-global").
_PRIVATE = tuple(ipaddress.ip_network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class RefusedAddress(Exception):
    """A webhook target that is, or resolved to, an address webhooks may not reach."""

    def __init__(self, host: str, address: IPAddress, reason: str) -> None:
        super().__init__(
            f"{host!r} is {_article(reason)} {reason} address ({address}); webhooks may not reach it "
            "unless LASTWORD_WEBHOOK_ALLOW_PRIVATE=true")
        self.host = host
        self.address = address
        self.reason = reason


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be a webhook target (``loopback``, ``private``, …), or None."""
    embedded = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if embedded is not None:
        return refusal(embedded)
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if any(address in net for net in _PRIVATE if net.version == address.version):
        return "private"
    if not address.is_global:
        return "non-global"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches (mapped, compatible, 6to4, NAT64, Teredo)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client, the host the packets end at
    if (address in _IPV4_COMPATIBLE and int(address) > 1) or address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def normalised_host(host: str) -> str:
    """The host as a resolver sees it: escapes undone, NFKC (IDNA's mapping), lower case, no
    trailing dot."""
    return unicodedata.normalize("NFKC", unquote(host)).lower().rstrip(".")


def literal_address(host: str) -> IPAddress | None:
    """The address a literal host names, in any spelling a resolver accepts; None for a name."""
    host = normalised_host(host)
    try:
        return ipaddress.ip_address(host)  # IPv6 (with a zone id or not) and dotted-quad IPv4
    except ValueError:
        pass
    if not host or not all(c.isascii() and (c.isalnum() or c == ".") for c in host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def literal_refusal(host: str) -> RefusedAddress | None:
    """The refusal of a host that needs no resolution to judge (an address, or ``localhost``)."""
    name = normalised_host(host)
    if name == "localhost" or name.endswith(".localhost"):
        return RefusedAddress(host, ipaddress.IPv4Address("127.0.0.1"), "loopback")
    address = literal_address(host)
    if address is None:
        return None
    reason = refusal(address)
    return None if reason is None else RefusedAddress(host, address, reason)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order (its lookup in a thread)."""
    # ``getaddrinfo`` is this module's name for it, so a test can put a hosts table in front.
    infos = await asyncio.to_thread(getaddrinfo, host, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        text = str(sockaddr[0])
        if family == socket.AF_INET6 and len(sockaddr) >= 4 and sockaddr[3]:
            text = f"{text.split('%')[0]}%{sockaddr[3]}"  # keep the zone: a link-local dial needs it
        address = ipaddress.ip_address(text)
        if address not in addresses:
            addresses.append(address)
    return addresses


def check_addresses(host: str, addresses: list[IPAddress]) -> None:
    """Raise :class:`RefusedAddress` if any of ``host``'s addresses may not be reached."""
    for address in addresses:
        reason = refusal(address)
        if reason is not None:
            raise RefusedAddress(host, address, reason)
