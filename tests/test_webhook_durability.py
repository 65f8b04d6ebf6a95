"""The webhook outbox survives kill -9, and replicas on PostgreSQL never attempt one delivery together."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.receiver import Answer, Received, Receiver
from tests.servers import ServerProcess
from tests.polling import wait_until

pytestmark = pytest.mark.slow
WAIT = 60.0
ROOT = Path(__file__).resolve().parent.parent


def start(database_url: str, **env: str) -> ServerProcess:
    return ServerProcess({
        "LASTWORD_DATABASE_URL": database_url,
        "LASTWORD_LEASE_SECONDS": "0",
        "LASTWORD_LOG_LEVEL": "info",
        "LASTWORD_WEBHOOK_BACKOFF_SECONDS": "0.05",
        "LASTWORD_WEBHOOK_MAX_ATTEMPTS": "1000",
        "LASTWORD_WEBHOOK_ALLOW_PRIVATE": "true",  # the receiver is on loopback
        **env,
    }, ROOT).start()


def all_settled(url: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each run's one delivery, once none is pending (polled, bounded)."""
    found: dict[str, Any] = {}

    def settled() -> dict[str, dict[str, Any]] | None:
        found.update({run_id: http.get(f"/v1/runs/{run_id}/deliveries").json()["deliveries"] for run_id in run_ids})
        if all(len(ds) == 1 and ds[0]["state"] != "pending" for ds in found.values()):
            return {run_id: ds[0] for run_id, ds in found.items()}
        return None

    with httpx.Client(base_url=url, timeout=10) as http:
        return wait_until(settled, lambda: f"no delivery pending (found {found})", within=WAIT, every=0.05)


def test_kill_9_with_deliveries_pending_and_in_flight_loses_none(tmp_path: Path) -> None:
    """Ends whose deliveries were pending, retrying or mid-request at a kill -9 all arrive after the restart."""
    healthy = threading.Event()
    in_flight = threading.Event()

    def answer(request: Received) -> Answer:
        if healthy.is_set():
            return Answer(200)
        if request.webhook_id.endswith("held_1"):
            in_flight.set()
            return Answer(200, hold=healthy)  # mid-request when the server dies
        return Answer(503)

    receiver = Receiver(answer)
    database = f"sqlite:///{tmp_path / 'lastword.db'}"
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    server = start(database, LASTWORD_WEBHOOK_TIMEOUT_SECONDS="30")
    run_ids = ["held"] + [f"child-{index}" for index in range(12)]
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for run_id in run_ids:
                http.post("/v1/runs", json={"runId": run_id, "webhook": {"url": receiver.url, "secret": secret}})
                http.post(f"/v1/runs/{run_id}/end", json={"stopReason": "end_turn"}).raise_for_status()
        assert in_flight.wait(WAIT)
        server.kill()
        healthy.set()
        server.start()
        delivered = all_settled(server.url, run_ids)
        log = server.log_path.read_text()
    finally:
        server.stop()
        receiver.close()
    assert {run_id: d["state"] for run_id, d in delivered.items()} == {run_id: "delivered" for run_id in run_ids}
    arrived = set(receiver.ids())
    assert arrived == {f"msg_{run_id}_1" for run_id in run_ids}
    assert secret.removeprefix("whsec_") not in log
    assert receiver.url not in log and "/hook" not in log


@pytest.mark.postgres
def test_replicas_never_attempt_one_delivery_at_once_and_a_dead_ones_lease_passes(database_url: str) -> None:
    """Two replicas on one database: each delivery by one at a time; a replica killed mid-attempt
    leaves its delivery to the other once the lease runs out."""
    release = threading.Event()
    seen_first = threading.Event()
    first_port: list[int] = []

    def answer(request: Received) -> Answer:
        if request.webhook_id == "msg_orphan_1" and not seen_first.is_set():
            first_port.append(request.client_port)
            seen_first.set()
            return Answer(200, hold=release)
        # Every third delivery fails its first attempt, so retries mix with first attempts.
        first = receiver.ids().count(request.webhook_id) == 1
        return Answer(503 if first and request.webhook_id.endswith(("0_1", "3_1", "6_1")) else 200)

    receiver = Receiver(answer)
    env = {"LASTWORD_WEBHOOK_TIMEOUT_SECONDS": "2"}
    a, b = start(database_url, **env), start(database_url, **env)
    run_ids = [f"busy-{index}" for index in range(30)]
    try:
        with httpx.Client(base_url=a.url, timeout=10) as via_a, httpx.Client(base_url=b.url, timeout=10) as via_b:
            for index, run_id in enumerate(run_ids):
                via = via_a if index % 2 else via_b
                via.post("/v1/runs", json={"runId": run_id, "webhook": {"url": receiver.url}}).raise_for_status()
                (via_b if index % 2 else via_a).post(f"/v1/runs/{run_id}/end", json={"stopReason": "end_turn"})
            delivered = all_settled(a.url, run_ids)
            via_a.post("/v1/runs", json={"runId": "orphan", "webhook": {"url": receiver.url}}).raise_for_status()
            via_a.post("/v1/runs/orphan/end", json={"stopReason": "end_turn"}).raise_for_status()
        assert seen_first.wait(WAIT)
        holder = owner_of(first_port[0], [a, b])
        survivor = b if holder is a else a
        holder.kill()
        release.set()  # the dead replica's request ends; its lease has not
        orphan = all_settled(survivor.url, ["orphan"])["orphan"]
    finally:
        release.set()
        a.stop()
        b.stop()
        receiver.close()
    assert all(d["state"] == "delivered" for d in delivered.values())
    assert max(receiver.max_concurrent.values()) == 1
    assert orphan["state"] == "delivered"
    assert len(orphan["attempts"]) == 1  # the dead replica never recorded its attempt
    assert receiver.ids().count("msg_orphan_1") == 2


def owner_of(client_port: int, servers: list[ServerProcess]) -> ServerProcess:
    """The server process whose socket has ``client_port`` as its local port."""
    for server in servers:
        assert server.process is not None
        for connection in psutil.Process(server.process.pid).net_connections(kind="tcp"):
            if connection.laddr and connection.laddr.port == client_port:
                return server
    raise AssertionError(f"no server holds local port {client_port}")
