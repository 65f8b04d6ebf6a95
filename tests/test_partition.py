"""A replica cut off from its database (SPEC §20): hosts of their own, a link cut and healed.

PostgreSQL runs in one network namespace, a lastword replica in another, joined by a veth link;
the test reaches the replica over a second link from this machine. Cutting the database link
drops packets (a partition, not a refused connection): the replica's ``/readyz`` must say 503 in
time for an orchestrator's probe (each answer within the probe's timeout) instead of hanging,
and say 200 again once the link is healed, by itself.
"""

from __future__ import annotations

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
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
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
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        log.close()
        database.stop()
