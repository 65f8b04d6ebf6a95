"""Replicas cut off from their database or from NATS (SPEC §20): hosts of their own, links cut and healed.

PostgreSQL runs in one network namespace, a lastword replica in another, joined by a veth link;
the test reaches the replica over a second link from this machine. Cutting the database link
drops packets (a partition, not a refused connection): the replica's ``/readyz`` must say 503 in
time for an orchestrator's probe (each answer within the probe's timeout) instead of hanging,
and say 200 again once the link is healed, by itself. With wake-ups over NATS (PostgreSQL, NATS
and two replicas each on a host of their own), a replica cut off from NATS still serves its own
subscribers, says 503 once it noticed, and catches up from the log when the link is healed.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.netns import Host, Network, available, network
from tests.conftest import require
from tests.polling import wait_until
from tests.servers import stop

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
#: What an orchestrator's readiness probe gives an answer (deploy/kubernetes: timeoutSeconds 3).
PROBE_TIMEOUT = 3.0
#: How soon after the cut the replica must be found not ready (a few probe periods).
NOT_READY_WITHIN = 15.0


def probe(url: str) -> int | None:
    """``/readyz``'s status; None when it did not answer within the probe's time-out, 0 when
    nothing listens yet."""
    try:
        return httpx.get(f"{url}/readyz", timeout=PROBE_TIMEOUT).status_code
    except httpx.TimeoutException:
        return None
    except httpx.TransportError:
        return 0


class Postgres:
    """A PostgreSQL of its own, started inside ``host`` and listening on ``address``."""

    def __init__(self, host: Host, address: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lastword-partition-pg-"))
        postgres = pwd.getpwnam("postgres")
        os.chown(self.root, postgres.pw_uid, postgres.pw_gid)
        data = self.root / "data"
        subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                        "-U", "postgres"], check=True, capture_output=True, timeout=120)
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 10.213.0.0/16 trust\n")
        self.log = open(self.root / "postgres.log", "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            host.command(["runuser", "-u", "postgres", "--", str(PG_BIN / "postgres"), "-D", str(data),
                          "-c", f"listen_addresses={address}", "-c", f"unix_socket_directories={self.root}",
                          "-p", "5432"]),
            stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"postgresql://postgres@{address}:5432/postgres"

    def stop(self) -> None:
        stop(self.process)
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def hosts() -> Iterator[Network]:
    require(available() or (None if (PG_BIN / "postgres").exists() else f"no PostgreSQL 15 at {PG_BIN}"),
            "LASTWORD_REQUIRE_PATRONI")
    with network() as made:
        yield made


def test_a_replica_cut_off_from_its_database_is_not_ready_in_time_and_ready_again_when_healed(
    hosts: Network, tmp_path: Path,
) -> None:
    db, replica = hosts.host("db"), hosts.host("replica")
    to_db = hosts.link(db, replica)
    front = hosts.link(Host(None), replica)
    database = Postgres(db, to_db.address(db))
    server = None
    log = open(tmp_path / "replica.log", "ab")  # noqa: SIM115 - closed below
    try:
        wait_until(lambda: subprocess.run(
            db.command([str(PG_BIN / "pg_isready"), "-h", to_db.address(db), "-p", "5432"]),
            capture_output=True).returncode == 0, "PostgreSQL ready", within=60)
        url = f"http://{front.address(replica)}:8000"
        env = {**os.environ, "LASTWORD_DATABASE_URL": database.url, "LASTWORD_HOST": front.address(replica),
               "LASTWORD_PORT": "8000", "LASTWORD_LOG_LEVEL": "warning"}
        server = subprocess.Popen(replica.command([sys.executable, "-m", "lastword.cli", "serve"]), env=env,
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
        wait_until(lambda: probe(url) == 200, "the replica ready", within=60)
        run_id = httpx.post(f"{url}/v1/runs", json={"agent": "cut-off"}).json()["runId"]

        to_db.cut()
        cut_at = time.monotonic()
        answers: list[int | None] = []
        while time.monotonic() - cut_at < NOT_READY_WITHIN and (not answers or answers[-1] != 503):
            answers.append(probe(url))
        assert answers[-1] == 503, f"probes after the cut answered {answers} (None: no answer in {PROBE_TIMEOUT} s)"
        assert None not in answers, f"a probe got no answer in {PROBE_TIMEOUT} s: {answers}"
        refused = httpx.post(f"{url}/v1/runs/{run_id}/chunks", json={"text": "lost?"}, timeout=30)
        assert refused.status_code == 503 and refused.headers.get("retry-after"), refused.text

        to_db.heal()
        wait_until(lambda: probe(url) == 200, "the replica ready again after the heal", within=60)
        stored = httpx.post(f"{url}/v1/runs/{run_id}/chunks", json={"text": "back"}, timeout=30)
        assert stored.status_code == 200, stored.text
    finally:
        if server is not None:
            stop(server)
        log.close()
        database.stop()


def _replica(host: Host, address: str, database_url: str, nats_url: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LASTWORD_DATABASE_URL": database_url, "LASTWORD_FANOUT_URL": nats_url,
           "LASTWORD_HOST": address, "LASTWORD_PORT": "8000", "LASTWORD_LOG_LEVEL": "info",
           "LASTWORD_LEASE_SECONDS": "0", "LASTWORD_KEEPALIVE_SECONDS": "1"}
    with open(log_path, "ab") as log:
        return subprocess.Popen(host.command([sys.executable, "-m", "lastword.cli", "serve"]), env=env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=log)


class _Reader:
    """One SSE run stream read in a thread: the (event, id) pairs, as they arrive."""

    def __init__(self, url: str) -> None:
        import threading

        self.seen: list[tuple[str, int]] = []
        self.opened = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(30, read=None))
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()
        assert self.opened.wait(30), "the stream did not open"

    def _read(self, url: str) -> None:
        from httpx_sse import connect_sse

        with contextlib.suppress(httpx.HTTPError), connect_sse(self._client, "GET", url) as source:
            for event in source.iter_sse():
                if event.event == "run/snapshot":
                    self.opened.set()
                else:
                    self.seen.append((event.event, int(event.id)))

    def close(self) -> None:
        self._client.close()


def test_a_replica_cut_off_from_nats_serves_its_own_subscribers_and_catches_up_when_healed(
    hosts: Network, tmp_path: Path,
) -> None:
    """PostgreSQL, NATS and replicas A and B each on a host of their own. A's link to NATS cut:
    a subscriber on A still hears what is written through A, A says 503 notices_unavailable
    once it noticed, and what B wrote meanwhile reaches A's subscriber after the heal, in order."""
    from tests.nats_server import NatsServer, nats_server_binary

    nats_server_binary()
    db, broker, a, b = hosts.host("db"), hosts.host("nats"), hosts.host("a"), hosts.host("b")
    db_a, db_b = hosts.link(db, a), hosts.link(db, b)
    nats_a, nats_b = hosts.link(broker, a), hosts.link(broker, b)
    front_a, front_b = hosts.link(Host(None), a), hosts.link(Host(None), b)
    database = Postgres(db, f"{db_a.address(db)},{db_b.address(db)}")
    nats = NatsServer(port=4222, inside=broker.command)
    servers: list[subprocess.Popen[bytes]] = []
    readers: list[_Reader] = []
    try:
        nats.start()
        wait_until(lambda: subprocess.run(
            db.command([str(PG_BIN / "pg_isready"), "-h", db_a.address(db), "-p", "5432"]),
            capture_output=True).returncode == 0, "PostgreSQL ready", within=60)
        url_a, url_b = f"http://{front_a.address(a)}:8000", f"http://{front_b.address(b)}:8000"
        servers.append(_replica(a, front_a.address(a), f"postgresql://postgres@{db_a.address(db)}:5432/postgres",
                                f"nats://{nats_a.address(broker)}:4222", tmp_path / "a.log"))
        wait_until(lambda: probe(url_a) == 200, "replica A ready", within=60)  # A made the schema
        servers.append(_replica(b, front_b.address(b), f"postgresql://postgres@{db_b.address(db)}:5432/postgres",
                                f"nats://{nats_b.address(broker)}:4222", tmp_path / "b.log"))
        wait_until(lambda: probe(url_b) == 200, "replica B ready", within=60)
        own = httpx.post(f"{url_a}/v1/runs", json={"agent": "own"}).json()["runId"]
        other = httpx.post(f"{url_b}/v1/runs", json={"agent": "other"}).json()["runId"]
        readers = [_Reader(f"{url_a}/v1/runs/{own}/stream?include=chunks"),
                   _Reader(f"{url_a}/v1/runs/{other}/stream?include=chunks")]
        mine, theirs = readers
        assert httpx.post(f"{url_b}/v1/runs/{other}/chunks", json={"text": "before"}).status_code == 200
        wait_until(lambda: theirs.seen == [("assistant/chunk", 2)], "A hears B before the cut", within=15)

        nats_a.cut()
        for n in range(3):
            assert httpx.post(f"{url_a}/v1/runs/{own}/chunks", json={"text": f"own {n}"}).status_code == 200
            assert httpx.post(f"{url_b}/v1/runs/{other}/chunks", json={"text": f"other {n}"}).status_code == 200
        # A's own subscriber is served from A's own commits, NATS or not.
        wait_until(lambda: mine.seen == [("assistant/chunk", seq) for seq in (2, 3, 4)], "A's own commits heard",
                   within=15)
        wait_until(lambda: probe(url_a) == 503, "A not ready once it noticed the cut", within=60)
        assert httpx.get(f"{url_a}/readyz").json()["code"] == "notices_unavailable"
        assert httpx.post(f"{url_b}/v1/runs/{other}/end", json={"stopReason": "completed"}).status_code == 200

        nats_a.heal()
        wait_until(lambda: probe(url_a) == 200, "A ready again after the heal", within=60)
        wait_until(lambda: theirs.seen[-1:] == [("subagent/end", 6)], "B's commits caught up on A", within=30)
        assert theirs.seen == [("assistant/chunk", seq) for seq in (2, 3, 4, 5)] + [("subagent/end", 6)]
    finally:
        for reader in readers:
            reader.close()
        for server in servers:
            stop(server)
        nats.stop()
        database.stop()
