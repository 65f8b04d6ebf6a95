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

import time
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import httpx
import pytest

from tests.failover_writers import Writers, out_of_order, pause_after
from tests.patroni_cluster import Node, PatroniCluster, available, patroni_cluster
from tests.conftest import require
from tests.polling import wait_until
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BEFORE, AFTER = 40, 40  # acknowledged events before the kill, and after the new primary answers
#: Primaries killed one after the other in the ``kill`` variant (each victim back as a standby).
KILLS = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    require(available(), "LASTWORD_REQUIRE_PATRONI")
    with patroni_cluster() as running:
        yield running


def whole_log(url: str, run_id: str) -> list[dict[str, Any]]:
    """The run's log, page after page (a page holds at most LASTWORD_MAX_PAGE_SIZE events)."""
    found: list[dict[str, Any]] = []
    while True:
        params = {"after": found[-1]["seq"] if found else 0, "limit": 1000}
        page = httpx.get(f"{url}/v1/runs/{run_id}/events", params=params, timeout=30).json()["events"]
        if not page:
            return found
        found.extend(page)


def ready(url: str) -> bool:
    return httpx.get(f"{url}/readyz").status_code == 200


@pytest.mark.parametrize("how", ["kill", "switchover"])
def test_a_primary_lost_under_load_loses_nothing_acknowledged(cluster: PatroniCluster, how: str) -> None:
    """``kill``: the primary dies (kill -9), three times over, each victim coming back as a
    standby before the next. ``switchover``: it is demoted and stays up as a standby, so
    connections to it still answer, read-only: writes must move to the new primary. Every
    acknowledged event is in the log once, and each writer's in the order it sent them."""
    env = {"LASTWORD_DATABASE_URL": cluster.url(), "LASTWORD_LEASE_SECONDS": "0", "LASTWORD_LOG_LEVEL": "warning"}
    replicas = [ServerProcess(env, cwd=REPO).start() for _ in range(2)]
    victims: list[Node] = []
    try:
        urls = [replica.url for replica in replicas]
        run_id = httpx.post(f"{urls[0]}/v1/runs", json={"agent": "failover"}).json()["runId"]
        writers = Writers(urls, run_id)
        writers.start()
        pauses: list[str] = []
        try:
            wait_until(lambda: writers.count() >= BEFORE, f"{BEFORE} events acknowledged", within=60)
            for _ in range(KILLS if how == "kill" else 1):
                old = cluster.primary()
                assert old is not None
                if how == "kill":
                    cluster.kill(old)
                    victims.append(old)
                else:
                    cluster.switchover(old)
                killed_at, at_kill = time.monotonic(), writers.count()
                new = cluster.wait_for_new_primary(old)
                wait_until(lambda: writers.count() >= at_kill + AFTER, f"{AFTER} more events after the failover",
                           within=120)
                pauses.append(f"{old.name} -> {new.name}: {pause_after(writers.acknowledged_at, killed_at):.1f} s")
                if how == "kill":
                    cluster.start_node(old)  # back as a standby (pg_rewind), the next one's synchronous standby
                    cluster.wait_for_sync_standby()
                    victims.remove(old)
        finally:
            writers.finish()
        print(f"\n[failover] {how}: writes acknowledged again after {'; '.join(pauses)}; "
              f"answers {dict(writers.answers)}")
        assert writers.unexpected == [], writers.unexpected[:5]
        assert set(writers.answers) <= {200, 503}, writers.answers
        for url in urls:
            wait_until(lambda: ready(url), f"{url} ready", within=60)
        logged = whole_log(urls[1], run_id)
        ids = [item["event"]["eventId"] for item in logged if item["event"]["type"] == "assistant/chunk"]
        assert len(ids) == len(set(ids)), "an event was stored twice"
        missing = set(writers.acknowledged) - set(ids)
        assert missing == set(), f"{len(missing)} acknowledged events lost in the failovers ({pauses})"
        assert out_of_order(ids) == [], "a writer's events are out of the order it sent them"
        seqs = [item["seq"] for item in logged]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    finally:
        for replica in replicas:
            replica.stop()
        for victim in victims:
            cluster.start_node(victim)  # back as a standby, for the tests after this one
