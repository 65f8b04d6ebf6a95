"""Hosts of their own on one machine: network namespaces joined by veth links a test can cut.

Each :class:`Host` is a Linux network namespace (``ip netns``); :meth:`Network.link` joins two
hosts (or a host and this machine's own namespace) with a veth pair on a /30 of the test's own
(10.213.N.0/30: addresses that exist only inside the namespaces this harness made), and
:meth:`Link.cut` / :meth:`Link.heal` take the pair down and up: packets are then dropped, not
refused, as a real partition drops them. Processes run inside a host with ``ip netns exec``.

Each host also has an address of its own (10.214.0.N, on its loopback interface), the one a
service advertises when several hosts must reach it (a Patroni node's ``connect_address``): every
link carries a route to each end's own address, so a host reaches another's over their direct
link, and over nothing else (no host forwards). :meth:`Network.isolate` cuts every link a host
has to other hosts, a partition of that host; :meth:`Link.heal` puts the routes back.
Everything made is removed by :meth:`Network.close`. Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

_SUBNETS = itertools.count(1)
_OWN_ADDRESSES = itertools.count(1)


def available() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2 is not installed (apt-get install -y iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _ip(*args: str, namespace: str | None = None) -> None:
    command = ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *args]
    subprocess.run(command, check=True, capture_output=True, timeout=30)


@dataclass
class Host:
    """A network namespace; ``None`` as a host's name is this machine's own namespace."""

    name: str | None
    #: The host's own address (on its loopback), reached over any of its links; None for this machine.
    address: str | None = None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host."""
        return argv if self.name is None else ["ip", "netns", "exec", self.name, *argv]


@dataclass
class Link:
    """A veth pair between two hosts, each end with its address."""

    ends: tuple[tuple[Host, str, str], tuple[Host, str, str]]  # (host, interface, address)
    #: (host, route) for each end's route to the other end's own address, put back by :meth:`heal`
    #: (taking an interface down takes its routes with it).
    routes: list[tuple[Host, list[str]]] = field(default_factory=list)

    def address(self, host: Host) -> str:
        """The address ``host`` has on this link (the one the other end reaches it by)."""
        for end_host, _, address in self.ends:
            if end_host is host:
                return address
        raise KeyError(host.name)

    def cut(self) -> None:
        for host, interface, _ in self.ends:
            _ip("link", "set", interface, "down", namespace=host.name)

    def heal(self) -> None:
        for host, interface, _ in self.ends:
            _ip("link", "set", interface, "up", namespace=host.name)
        for host, route in self.routes:
            _ip("route", "replace", *route, namespace=host.name)

    def joins(self, host: Host) -> bool:
        return any(end_host is host for end_host, _, _ in self.ends)

    def to_this_machine(self) -> bool:
        """Whether one end is this machine's own namespace (the test's view of a host)."""
        return any(end_host.name is None for end_host, _, _ in self.ends)


@dataclass
class Network:
    hosts: list[Host] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def host(self, name: str) -> Host:
        namespace = f"lw-{self.tag}-{name}"
        subprocess.run(["ip", "netns", "add", namespace], check=True, capture_output=True, timeout=30)
        own = next(_OWN_ADDRESSES) % 250 + 1
        host = Host(namespace, f"10.214.0.{own}")
        self.hosts.append(host)
        _ip("link", "set", "lo", "up", namespace=namespace)
        _ip("addr", "add", f"{host.address}/32", "dev", "lo", namespace=namespace)
        return host

    def link(self, a: Host, b: Host) -> Link:
        subnet = next(_SUBNETS) % 250 + 1
        number = len(self.links)
        names = (f"lw{self.tag}{number}a", f"lw{self.tag}{number}b")
        _ip("link", "add", names[0], "type", "veth", "peer", "name", names[1])
        ends = []
        for host, interface, last in ((a, names[0], 1), (b, names[1], 2)):
            if host.name is not None:
                _ip("link", "set", interface, "netns", host.name)
            address = f"10.213.{subnet}.{last}"
            _ip("addr", "add", f"{address}/30", "dev", interface, namespace=host.name)
            _ip("link", "set", interface, "up", namespace=host.name)
            ends.append((host, interface, address))
        link = Link((ends[0], ends[1]))
        for (host, interface, _), (other, _, gateway) in ((ends[0], ends[1]), (ends[1], ends[0])):
            if other.address is not None:
                route = [f"{other.address}/32", "via", gateway, "dev", interface, "onlink"]
                _ip("route", "replace", *route, namespace=host.name)
                link.routes.append((host, route))
        self.links.append(link)
        return link

    def isolate(self, host: Host) -> list[Link]:
        """Cut every link between ``host`` and the other hosts (those to this machine, the
        test's own view of it, stay up); the links cut, for :meth:`Link.heal`."""
        cut = [link for link in self.links if link.joins(host) and not link.to_this_machine()]
        for link in cut:
            link.cut()
        return cut

    def close(self) -> None:
        for link in self.links:
            host, interface, _ = link.ends[0]
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", interface, namespace=host.name)  # takes its peer with it
        for host in self.hosts:
            if host.name is not None:
                subprocess.run(["ip", "netns", "del", host.name], capture_output=True, timeout=30)


@contextlib.contextmanager
def network() -> Iterator[Network]:
    made = Network()
    try:
        yield made
    finally:
        made.close()
