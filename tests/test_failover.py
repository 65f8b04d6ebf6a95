"""PostgreSQL failover under load (SPEC §20): lastword replicas on a Patroni cluster.

Two lastword replicas share a three-node Patroni cluster (synchronous replication) through a
multi-host URL with ``target_session_attrs=read-write``. Writers stream events with eventIds into
one run through both replicas; the primary is killed with ``kill -9`` mid-stream. While the
cluster elects a new primary the replicas answer 503 ``store_unavailable`` with ``Retry-After``
(never 500, never a 2xx for an event that is not stored); the writers retry each event until it is
acknowledged, as a client does. Afterwards every acknowledged event is in the log exactly once,
and both replicas are ready again on the new primary by themselves.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.patroni_cluster import PatroniCluster, available, patroni_cluster
from tests.conftest import require
from tests.polling import wait_until
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
WRITERS = 4
BEFORE, AFTER = 40, 40  # acknowledged events before the kill, and after the new primary answers


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    require(available(), "LASTWORD_REQUIRE_PATRONI")
    with patroni_cluster() as running:
        yield running


class Writers:
    """Threads appending one chunk per request, each retried with its eventId until acknowledged."""

    def __init__(self, urls: list[str], run_id: str) -> None:
        self.urls = urls
        self.run_id = run_id
        self.acknowledged: list[str] = []
        self.acknowledged_at: list[float] = []
        self.answers: Counter[int] = Counter()
        self.unexpected: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(n,), daemon=True) for n in range(WRITERS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def count(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def _write(self, number: int) -> None:
        sequence = 0
        with httpx.Client(timeout=20) as client:
            while not self.stop.is_set():
                event_id = f"w{number}-{sequence}"
                url = f"{self.urls[sequence % len(self.urls)]}/v1/runs/{self.run_id}/events"
                body = {"type": "assistant/chunk", "eventId": event_id, "delta": {"type": "text", "text": "x"}}
                while not self.stop.is_set():
                    try:
                        response = client.post(url, json=body)
                    except httpx.TransportError:
                        continue  # the replica's connection died with the request: send it again
                    with self.lock:
                        self.answers[response.status_code] += 1
                    if response.status_code == 200:
                        with self.lock:
                            self.acknowledged.append(event_id)
                            self.acknowledged_at.append(time.monotonic())
                        break
                    if response.status_code != 503 or "retry-after" not in response.headers:
                        with self.lock:
                            self.unexpected.append(f"{response.status_code} {response.text[:300]}")
                    self.stop.wait(float(response.headers.get("retry-after", "1")) / 4)
                sequence += 1

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def ready(url: str) -> bool:
    return httpx.get(f"{url}/readyz").status_code == 200


@pytest.mark.parametrize("how", ["kill", "switchover"])
def test_a_primary_lost_under_load_loses_nothing_acknowledged(cluster: PatroniCluster, how: str) -> None:
    """``kill``: the primary dies (kill -9). ``switchover``: it is demoted and stays up as a
    standby, so connections to it still answer, read-only: writes must move to the new primary."""
    env = {"LASTWORD_DATABASE_URL": cluster.url(), "LASTWORD_LEASE_SECONDS": "0", "LASTWORD_LOG_LEVEL": "warning"}
    replicas = [ServerProcess(env, cwd=REPO).start() for _ in range(2)]
    old = None
    try:
        urls = [replica.url for replica in replicas]
        run_id = httpx.post(f"{urls[0]}/v1/runs", json={"agent": "failover"}).json()["runId"]
        writers = Writers(urls, run_id)
        writers.start()
        try:
            wait_until(lambda: writers.count() >= BEFORE, f"{BEFORE} events acknowledged", within=60)
            old = cluster.primary()
            assert old is not None
            if how == "kill":
                cluster.kill(old)
            else:
                cluster.switchover(old)
            killed_at, at_kill = time.monotonic(), writers.count()
            new = cluster.wait_for_new_primary(old)
            wait_until(lambda: writers.count() >= at_kill + AFTER, f"{AFTER} more events after the failover",
                       within=120)
        finally:
            writers.finish()
        resumed = next(at for at in writers.acknowledged_at if at > killed_at + 0.5)
        print(f"\n[failover] {how} {old.name} -> {new.name}: writes acknowledged again {resumed - killed_at:.1f} s "
              f"after; answers {dict(writers.answers)}")
        assert writers.unexpected == [], writers.unexpected[:5]
        assert set(writers.answers) <= {200, 503}, writers.answers
        for url in urls:
            wait_until(lambda: ready(url), f"{url} ready", within=60)
        logged = httpx.get(f"{urls[1]}/v1/runs/{run_id}/events", params={"limit": 10_000}).json()["events"]
        ids = [item["event"]["eventId"] for item in logged if item["event"]["type"] == "assistant/chunk"]
        assert len(ids) == len(set(ids)), "an event was stored twice"
        missing = set(writers.acknowledged) - set(ids)
        assert missing == set(), f"{len(missing)} acknowledged events lost in the failover from {old.name} to {new.name}"
        seqs = [item["seq"] for item in logged]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    finally:
        for replica in replicas:
            replica.stop()
        if how == "kill" and old is not None:
            cluster.start_node(old)  # back as a standby (pg_rewind), for the tests after this one
