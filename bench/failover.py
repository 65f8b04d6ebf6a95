"""(p) The write pause of a PostgreSQL failover under load: two replicas on a Patroni cluster.

etcd and three Patroni PostgreSQL nodes (synchronous replication) on loopback, from Debian
(tests/patroni_cluster.py; ``ttl`` 10 s, ``loop_wait`` 1 s); two lastword replicas on the
multi-host URL; four writers appending one chunk per request with eventIds through both,
retrying each until it is acknowledged (tests/failover_writers.py). The primary is killed with
SIGKILL three times, each victim coming back as a standby before the next; the pause is the time
from the kill to the first acknowledgement of a request sent after it. The baseline, in the same
run: a planned switchover (Patroni demotes the primary, which stays up).

Also counted: the 503s answered meanwhile, any other answer (none expected), and the
acknowledged events missing from the log or stored twice (none expected).
"""

from __future__ import annotations

import time
import httpx

from bench.context import Context, Skip
from bench.report import Result
from bench.server import Server
from tests.failover_writers import Writers, out_of_order, pause_after
from tests.patroni_cluster import available, patroni_cluster

TITLE = "PostgreSQL failover under load: the write pause per SIGKILL of the primary, against a switchover"

KILLS = 3
BEFORE = 40  # acknowledged events before each failover


def _whole_log(url: str, run_id: str) -> list[str]:
    ids: list[str] = []
    after = 0
    while True:
        page = httpx.get(f"{url}/v1/runs/{run_id}/events", params={"after": after, "limit": 1000},
                         timeout=30).json()["events"]
        if not page:
            return ids
        ids.extend(item["event"]["eventId"] for item in page if item["event"]["type"] == "assistant/chunk")
        after = page[-1]["seq"]


def run(ctx: Context) -> Result:
    problem = available()
    if problem:
        raise Skip(problem)
    result = Result("p", TITLE)
    with patroni_cluster() as cluster:
        env = {"LASTWORD_LEASE_SECONDS": "0"}
        servers = [Server(database_url=cluster.url(), env=env) for _ in range(2)]
        try:
            for server in servers:
                server.start()
            urls = [server.url for server in servers]
            run_id = httpx.post(f"{urls[0]}/v1/runs", json={"agent": "failover"}, timeout=30).json()["runId"]
            writers = Writers(urls, run_id)
            writers.start()
            kills: list[float] = []
            switchover = float("nan")
            try:
                for how in ["switchover"] + ["kill"] * ctx.pick(KILLS, 1):
                    at = writers.count()
                    while writers.count() < at + BEFORE:
                        time.sleep(0.05)
                    old = cluster.primary()
                    assert old is not None
                    if how == "kill":
                        cluster.kill(old)
                    else:
                        cluster.switchover(old)
                    killed_at, at_kill = time.monotonic(), writers.count()
                    new = cluster.wait_for_new_primary(old)
                    while writers.count() < at_kill + BEFORE:
                        time.sleep(0.05)
                    pause = pause_after(writers.acknowledged_at, killed_at)
                    if how == "kill":
                        kills.append(pause)
                        result.add(f"kill_{len(kills)}", f"SIGKILL {len(kills)} ({old.name} → {new.name}): write pause",
                                   pause, "s")
                        cluster.start_node(old)  # back as a standby before the next one
                    else:
                        switchover = pause
                        result.add("switchover", f"switchover ({old.name} → {new.name}): write pause", pause, "s")
                    cluster.wait_for_sync_standby()
            finally:
                writers.finish()
            ids = _whole_log(urls[1], run_id)
        finally:
            for server in servers:
                server.stop()
                server.cleanup()
    mean = sum(kills) / len(kills)
    result.add("kill_mean", "SIGKILL: mean write pause", mean, "s", f"{len(kills)} failovers; Patroni ttl 10 s")
    result.ratio("kill_vs_switchover", "SIGKILL pause ÷ switchover pause", mean / switchover)
    result.add("answers_503", "requests answered 503 (Retry-After) meanwhile", writers.answers[503], "")
    result.add("unexpected", "answers other than 200 and 503", len(writers.unexpected), "")
    missing = set(writers.acknowledged) - set(ids)
    result.add("missing", "acknowledged events missing from the log", len(missing), "")
    result.add("twice", "events stored twice", len(ids) - len(set(ids)), "")
    result.add("out_of_order", "events out of their writer's order", len(out_of_order(ids)), "")
    result.note(f"{len(writers.acknowledged):,} events acknowledged in all; a loaded 2-core machine shared with other jobs")
    return result
