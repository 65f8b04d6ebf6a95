"""A highly available PostgreSQL on this machine: etcd and three Patroni nodes, for failover tests.

Debian's ``etcd-server`` and ``patroni`` (``.ci/run`` installs them) run as real processes on
loopback ports of their own: one etcd member, and three PostgreSQL 15 nodes each under a Patroni
that elects a leader through etcd, with synchronous replication (``synchronous_mode: true``), so a
commit the primary acknowledged is on a standby too and survives the primary's death. Patroni and
PostgreSQL run as the ``postgres`` user (PostgreSQL refuses root); their files live in a
temporary folder owned by it.

:class:`PatroniCluster` starts it all and hands out a multi-host database URL with
``target_session_attrs=read-write``: libpq tries the hosts in turn and keeps the one that takes
writes, so a client finds the new primary by itself after a failover. Timings are shortened
(``ttl`` 10 s, ``loop_wait`` 1 s) so a failover takes seconds; every wait is bounded.

Given a :class:`tests.netns.Network`, the cluster runs on hosts of its own instead: etcd and each
node in a network namespace, at the host's own address, the nodes linked to each other and to
etcd, and each host to this machine (the test's view: Patroni's REST API, etcd's health).
:meth:`PatroniCluster.attach` links a client's host (a lastword replica's) to every node, and
``network.isolate(node.host)`` partitions a node from all the others.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from tests.netns import Host, Network

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PASSWORD = "patroni-test"


def available() -> str | None:
    """Why a Patroni cluster cannot be run here, or None when it can."""
    for tool in ("patroni", "etcd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y patroni etcd-server)"
    if not (PG_BIN / "postgres").exists():
        return f"no PostgreSQL 15 server binaries at {PG_BIN}"
    if os.geteuid() != 0:
        return "PostgreSQL runs as the postgres user: the test must start as root"
    return None


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait(check: object, what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except (OSError, httpx.HTTPError, psycopg.Error):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} within {within} s")


@dataclass
class Node:
    name: str
    pg_port: int
    api_port: int
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    #: Where the node runs (this machine's own namespace on loopback) and the address it is reached by.
    host: Host = field(default_factory=lambda: Host(None))
    address: str = "127.0.0.1"

    @property
    def api(self) -> str:
        return f"http://{self.address}:{self.api_port}"

    @property
    def dsn(self) -> str:
        """This node's PostgreSQL alone (a test's own look at it, whatever its role)."""
        return f"postgresql://postgres:{PASSWORD}@{self.address}:{self.pg_port}/postgres"

    def role(self) -> str | None:
        """``primary``, ``replica``, or None when its Patroni does not answer."""
        try:
            answer = httpx.get(f"{self.api}/patroni", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return None
        role = answer.get("role")
        return "primary" if role in ("master", "primary") else role

    def streaming_ready(self) -> bool:
        return httpx.get(f"{self.api}/health", timeout=2).status_code == 200


class PatroniCluster:
    """etcd and three Patroni-managed PostgreSQL nodes; :meth:`url` is the multi-host URL."""

    def __init__(self, nodes: int = 3, network: Network | None = None, ttl: int = 10) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lastword-patroni-"))
        os.chmod(self.root, 0o755)
        postgres = pwd.getpwnam("postgres")
        self._uid, self._gid = postgres.pw_uid, postgres.pw_gid
        os.chown(self.root, self._uid, self._gid)
        self.network = network
        #: Seconds the leader key outlives its holder's last word: how soon a lost primary is replaced.
        self.ttl = ttl
        self._etcd: subprocess.Popen[bytes] | None = None
        if network is None:
            ports = _free_ports(2 + 2 * nodes)
            self.etcd_client, self.etcd_peer = ports[0], ports[1]
            self.etcd_host, self.etcd_address = Host(None), "127.0.0.1"
            self.nodes = [Node(f"pg{i}", ports[2 + 2 * i], ports[3 + 2 * i], self.root / f"pg{i}.yml",
                               self.root / f"pg{i}.log") for i in range(nodes)]
            return
        # Hosts of their own: the same ports on every host, each host at its own address.
        self.etcd_client, self.etcd_peer = 2379, 2380
        self.etcd_host = network.host("etcd")
        assert self.etcd_host.address is not None
        self.etcd_address = self.etcd_host.address
        self.nodes = []
        for i in range(nodes):
            host = network.host(f"pg{i}")
            assert host.address is not None
            self.nodes.append(Node(f"pg{i}", 5432, 8008, self.root / f"pg{i}.yml", self.root / f"pg{i}.log",
                                   host=host, address=host.address))
        network.link(Host(None), self.etcd_host)
        for i, node in enumerate(self.nodes):
            network.link(Host(None), node.host)
            network.link(self.etcd_host, node.host)
            for other in self.nodes[:i]:
                network.link(other.host, node.host)

    def attach(self, client: Host) -> None:
        """Link ``client``'s host to every node (hosts of their own only)."""
        assert self.network is not None, "attach() is for a cluster on hosts of its own"
        for node in self.nodes:
            self.network.link(node.host, client)

    # -- life ------------------------------------------------------------------------------

    def start(self) -> PatroniCluster:
        self._start_etcd()
        for node in self.nodes:
            self._write_config(node)
            self.start_node(node)
        _wait(lambda: self.primary() is not None, "a Patroni leader", 120)
        _wait(lambda: all(node.role() is not None and node.streaming_ready() for node in self.nodes),
              "every node running", 120)
        _wait(self._has_sync_standby, "a synchronous standby", 60)
        return self

    def close(self) -> None:
        for node in self.nodes:
            self.kill(node)
        if self._etcd is not None and self._etcd.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._etcd.pid, signal.SIGKILL)
            self._etcd.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def start_node(self, node: Node) -> None:
        log = open(node.log, "ab")  # noqa: SIM115 - the child keeps it
        env = {"PATH": f"{PG_BIN}:/usr/bin:/bin", "HOME": str(self.root)}
        if node.host.name is None:
            node.process = subprocess.Popen(["patroni", str(node.config)], stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.root, user=self._uid, group=self._gid, start_new_session=True,
                                            env=env)
        else:  # entering the namespace needs root: the user changes inside it
            node.process = subprocess.Popen(
                node.host.command(["runuser", "-u", "postgres", "--", "env", *(f"{k}={v}" for k, v in env.items()),
                                   "patroni", str(node.config)]),
                stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True)
        log.close()

    def kill(self, node: Node) -> None:
        """``kill -9`` of the node's Patroni and its PostgreSQL (their whole process group)."""
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(timeout=10)
        # The postmaster is in Patroni's group; a server that outlived it is found by its pid file.
        pid_file = self.root / node.name / "data" / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)

    # -- what a test asks --------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        hosts = ",".join(f"{node.address}:{node.pg_port}" for node in self.nodes)
        return (f"postgresql://postgres:{PASSWORD}@{hosts}/{dbname}"
                "?target_session_attrs=read-write&connect_timeout=2")

    def primary(self) -> Node | None:
        primaries = [node for node in self.nodes if node.role() == "primary"]
        return primaries[0] if len(primaries) == 1 else None

    def switchover(self, old: Node) -> None:
        """A planned switchover: Patroni demotes ``old`` (it stays up, as a standby) and promotes
        the synchronous standby."""
        # A node that came back (the kill test restarts its victim) is a synchronous standby only
        # once it has caught up; Patroni refuses a switchover with none.
        _wait(self._has_sync_standby, "a synchronous standby", 90)
        answer = httpx.post(f"{old.api}/switchover", json={"leader": old.name}, timeout=30)
        assert answer.status_code == 200, answer.text

    def wait_for_new_primary(self, old: Node, within: float = 90) -> Node:
        _wait(lambda: (p := self.primary()) is not None and p is not old, "a new primary", within)
        new = self.primary()
        assert new is not None
        return new

    def wait_for_sync_standby(self, within: float = 120) -> None:
        """Until the primary has a synchronous standby again (a restarted node has caught up)."""
        _wait(self._has_sync_standby, "a synchronous standby", within)

    def streaming_standby(self, node: Node) -> bool:
        """Whether ``node`` is a standby (to Patroni and to its PostgreSQL) whose WAL receiver
        streams from a primary."""
        if node.role() != "replica":
            return False
        try:
            with psycopg.connect(node.dsn, connect_timeout=2, autocommit=True) as connection:
                row = connection.execute(
                    "SELECT pg_is_in_recovery(), (SELECT status FROM pg_stat_wal_receiver)").fetchone()
        except psycopg.Error:
            return False
        return row == (True, "streaming")

    def _has_sync_standby(self) -> bool:
        primary = self.primary()
        if primary is None:
            return False
        answer = httpx.get(f"{primary.api}/cluster", timeout=2).json()
        return any(member.get("role") in ("sync_standby", "sync standby") for member in answer.get("members", []))

    # -- set-up ------------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        log = open(self.root / "etcd.log", "ab")  # noqa: SIM115 - the child keeps it
        peer = f"http://{self.etcd_address}:{self.etcd_peer}"
        client = f"http://{self.etcd_address}:{self.etcd_client}"
        self._etcd = subprocess.Popen(
            self.etcd_host.command(
                ["etcd", "--name", "e0", "--data-dir", str(data), "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer,
                 "--initial-advertise-peer-urls", peer, "--initial-cluster", f"e0={peer}",
                 "--initial-cluster-state", "new"]),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        _wait(lambda: httpx.get(f"{client}/health", timeout=2).status_code == 200, "etcd", 30)

    def _write_config(self, node: Node) -> None:
        data = self.root / node.name / "data"
        data.parent.mkdir()
        os.chown(data.parent, self._uid, self._gid)
        # On hosts of their own, peers and clients come from the links' addresses (10.213/16) to
        # the hosts' own (10.214/16); Patroni's own connections come over loopback.
        listen = "127.0.0.1" if node.host.name is None else f"127.0.0.1,{node.address}"
        clients = "127.0.0.1/32" if node.host.name is None else "0.0.0.0/0"
        config = f"""\
scope: lastword-test
name: {node.name}
restapi:
  listen: {node.address}:{node.api_port}
  connect_address: {node.address}:{node.api_port}
etcd3:
  hosts: {self.etcd_address}:{self.etcd_client}
bootstrap:
  dcs:
    ttl: {self.ttl}
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 100
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
  initdb:
    - encoding: UTF8
    - data-checksums
  pg_hba:
    - host replication replicator {clients} md5
    - host all all {clients} md5
postgresql:
  listen: {listen}:{node.pg_port}
  connect_address: {node.address}:{node.pg_port}
  data_dir: {data}
  bin_dir: {PG_BIN}
  pgpass: {self.root / node.name / "pgpass"}
  authentication:
    superuser:
      username: postgres
      password: {PASSWORD}
    replication:
      username: replicator
      password: {PASSWORD}
  parameters:
    unix_socket_directories: {self.root / node.name}
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
"""
        node.config.write_text(config)
        os.chown(node.config, self._uid, self._gid)


@contextlib.contextmanager
def patroni_cluster(network: Network | None = None, ttl: int = 10) -> Iterator[PatroniCluster]:
    """A running cluster, on loopback or (given ``network``) on hosts of its own; stopped after."""
    cluster = PatroniCluster(network=network, ttl=ttl)
    try:
        yield cluster.start()
    finally:
        cluster.close()
