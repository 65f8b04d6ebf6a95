"""The primary partitioned away under load (SPEC §20): what a kill does not show.

etcd, three Patroni/PostgreSQL nodes (synchronous replication) and two lastword replicas each run
on a host of their own (tests/netns.py): the nodes linked to each other and to etcd, each replica
to every node, the replicas on the cluster's multi-host URL with ``target_session_attrs=read-write``.
Writers stream events with eventIds through both replicas; then every link of the primary is cut
(from etcd, from the other nodes, from the replicas). Unlike a kill, the old primary stays up,
with connections to it hanging instead of refused, until Patroni demotes it, and it may have
written WAL of its own no standby has. A new primary must be elected, both replicas must find it
by themselves and go on acknowledging writes, answering 503 ``store_unavailable`` with
``Retry-After`` (never 500) while they cannot. Once the links are healed the old primary rejoins as
a standby, and the log holds every acknowledged event once, in each writer's order, and nothing
else but at most each writer's last event in flight when the writers stopped. The test also
commits a row of its own on the old primary once it is cut off (``synchronous_commit = local``,
over the test's own link to it): WAL no other node has, seen there before the heal and gone from
every node after it (Patroni rewinds the old primary with pg_rewind).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests import netns
from tests.conftest import require
from tests.failover_writers import Writers, out_of_order, pause_after
from tests.netns import Host, Network
from tests.patroni_cluster import Node, PatroniCluster, patroni_cluster
from tests.patroni_cluster import available as patroni_available
from tests.polling import wait_until
from tests.servers import stop
from tests.test_failover import whole_log

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: Acknowledged events before the cut, after the new primary was elected (through each replica),
#: and after the heal.
BEFORE, AFTER, AFTER_HEAL = 40, 20, 20
#: Patroni's leader key outlives the replicas' link checks (libpq's ``tcp_user_timeout``, 10 s):
#: a statement hanging on the lost primary fails well before a new primary is promoted, so every
#: run has a stretch where the replicas know their connections are dead and no node takes
#: writes, the stretch in which they must answer 503 (with ttl 10 the two ended together, and a
#: run could see no 503 at all).
LEADER_TTL = 20


@pytest.fixture
def hosts() -> Iterator[tuple[Network, PatroniCluster]]:
    require(netns.available() or patroni_available(), "LASTWORD_REQUIRE_PATRONI")
    with netns.network() as made, patroni_cluster(made, ttl=LEADER_TTL) as cluster:
        yield made, cluster


def _replica(host: Host, address: str, database_url: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LASTWORD_DATABASE_URL": database_url, "LASTWORD_HOST": address, "LASTWORD_PORT": "8000",
           "LASTWORD_LOG_LEVEL": "warning", "LASTWORD_LEASE_SECONDS": "0"}
    with open(log_path, "ab") as log:
        return subprocess.Popen(host.command([sys.executable, "-m", "lastword.cli", "serve"]), env=env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=log)


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def acknowledged_through_each(writers: Writers, urls: list[str], since: int, count: int) -> bool:
    """Whether each replica acknowledged ``count`` events among those after the first ``since``."""
    with writers.lock:
        by = writers.acknowledged_by[since:]
    return all(by.count(url) >= count for url in urls)


def notes(node: Node) -> list[str] | None:
    """The marker rows on ``node``'s PostgreSQL, or None while it does not answer."""
    try:
        with psycopg.connect(node.dsn, connect_timeout=2) as connection:
            return [note for (note,) in connection.execute("SELECT note FROM partition_marker ORDER BY note")]
    except psycopg.Error:
        return None


def in_flight_at_the_end(acknowledged: list[str]) -> set[str]:
    """Each writer's next event after its last acknowledged one: sent, perhaps stored, when the
    writers stopped, and never acknowledged."""
    last: dict[str, int] = {}
    for event_id in acknowledged:
        writer, _, number = event_id.rpartition("-")
        last[writer] = max(last.get(writer, -1), int(number))
    return {f"{writer}-{number + 1}" for writer, number in last.items()}


def test_a_primary_cut_off_from_everything_under_load_loses_nothing_acknowledged_and_rejoins(
    hosts: tuple[Network, PatroniCluster], tmp_path: Path,
) -> None:
    network, cluster = hosts
    a, b = network.host("a"), network.host("b")
    cluster.attach(a)
    cluster.attach(b)
    front_a, front_b = network.link(Host(None), a), network.link(Host(None), b)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        url_a, url_b = f"http://{front_a.address(a)}:8000", f"http://{front_b.address(b)}:8000"
        servers.append(_replica(a, front_a.address(a), cluster.url(), tmp_path / "a.log"))
        wait_until(lambda: ready(url_a), "replica A ready", within=60)  # A made the schema
        servers.append(_replica(b, front_b.address(b), cluster.url(), tmp_path / "b.log"))
        wait_until(lambda: ready(url_b), "replica B ready", within=60)
        urls = [url_a, url_b]
        run_id = httpx.post(f"{url_a}/v1/runs", json={"agent": "partition"}).json()["runId"]
        writers = Writers(urls, run_id)
        writers.start()
        try:
            wait_until(lambda: writers.count() >= BEFORE, f"{BEFORE} events acknowledged", within=60)
            old = cluster.primary()
            assert old is not None
            with psycopg.connect(old.dsn, autocommit=True) as marker:
                marker.execute("CREATE TABLE partition_marker (note text)")
                marker.execute("INSERT INTO partition_marker VALUES ('before')")  # on a standby too
                marker.execute("SET synchronous_commit = local")
                cut = network.isolate(old.host)
                # A commit of the old primary's own while cut off (the test still reaches it), not
                # waiting for a standby: WAL no other node has, which must not survive the rejoin.
                marker.execute("INSERT INTO partition_marker VALUES ('isolated')")
            cut_at, at_cut = time.monotonic(), writers.count()
            new = cluster.wait_for_new_primary(old, within=120)
            elected = writers.count()
            wait_until(lambda: acknowledged_through_each(writers, urls, elected, AFTER),
                       lambda: f"{AFTER} events acknowledged through each replica after {new.name} was elected "
                               f"(answers {dict(writers.answers)}, 503 codes {dict(writers.codes)})", within=120)
            pause = pause_after(writers.acknowledged_at, cut_at)
            # Demoted by its Patroni (etcd out of reach) but still holding its own commit.
            assert wait_until(lambda: notes(old), f"{old.name} readable while cut off", within=60) == [
                "before", "isolated"]
            for link in cut:
                link.heal()
            healed = writers.count()
            # Patroni rewinds the old primary (pg_rewind) and starts it as a standby of the new one.
            wait_until(lambda: cluster.streaming_standby(old),
                       f"{old.name} back as a streaming standby", within=180)
            wait_until(lambda: writers.count() >= healed + AFTER_HEAL, f"{AFTER_HEAL} events after the heal",
                       within=60)
        finally:
            writers.finish()
        print(f"\n[partition] {old.name} cut off -> {new.name}: writes acknowledged again after {pause:.1f} s "
              f"({at_cut} before the cut, {len(writers.acknowledged)} in all); answers {dict(writers.answers)}, "
              f"503 codes {dict(writers.codes)}, unanswered {dict(writers.unanswered)}; "
              f"{old.name} rewound: {'pg_rewind' in old.log.read_text(errors='replace')}")
        assert writers.unexpected == [], writers.unexpected[:5]
        assert set(writers.answers) <= {200, 503}, writers.answers
        assert writers.answers[503] > 0, "no write was refused while no primary could be reached"
        assert set(writers.codes) == {"store_unavailable"}, writers.codes
        assert cluster.primary() is new
        assert notes(new) == ["before"] and notes(old) == ["before"], "the old primary's own commit survived"
        for url in urls:
            wait_until(lambda: ready(url), f"{url} ready", within=60)
        logged = whole_log(url_b, run_id)
        ids = [item["event"]["eventId"] for item in logged if item["event"]["type"] == "assistant/chunk"]
        assert len(ids) == len(set(ids)), "an event was stored twice"
        missing = set(writers.acknowledged) - set(ids)
        assert missing == set(), f"{len(missing)} acknowledged events lost in the partition: {sorted(missing)[:5]}"
        # Nothing else: the old primary's writes while cut off (never acknowledged: no synchronous
        # standby could confirm them) were rewound away, and only the writers' last sends remain.
        unacknowledged = set(ids) - set(writers.acknowledged)
        assert unacknowledged <= in_flight_at_the_end(writers.acknowledged), sorted(unacknowledged)[:5]
        assert out_of_order(ids) == [], "a writer's events are out of the order it sent them"
        seqs = [item["seq"] for item in logged]
        assert seqs == list(range(1, len(seqs) + 1)), "the run's seqs are not 1, 2, 3, … without a gap"
    finally:
        for server in servers:
            stop(server)
