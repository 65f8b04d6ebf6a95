"""Readiness follows the store (SPEC §18): a PostgreSQL of the test's own is stopped and started
under a real ``lastword serve``; ``/readyz`` turns 503 ``store_unavailable`` within one readiness
check period and back to 200 once the database is back, while ``/livez`` stays 200 throughout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.own_postgres import OwnPostgres
from tests.servers import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parent.parent


def readiness_period() -> float:
    """The readiness probe's period in the kustomize base: what "within one check" means."""
    deployment = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml").read_text())
    sidecars = deployment["spec"]["template"]["spec"]["initContainers"]
    (lastword,) = [container for container in sidecars if container["name"] == "lastword"]
    return float(lastword["readinessProbe"]["periodSeconds"])


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    server = OwnPostgres()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def readyz(url: str) -> httpx.Response:
    return httpx.get(url + "/readyz", timeout=10)


def first_answer(url: str, status: int, within: float) -> tuple[httpx.Response, float]:
    """Ask /readyz until it answers ``status``; that answer and how long it took."""
    began = time.monotonic()
    while True:
        response = readyz(url)
        if response.status_code == status:
            return response, time.monotonic() - began
        if time.monotonic() - began > within:
            raise AssertionError(f"/readyz did not answer {status} within {within} s: {response.status_code} "
                                 f"{response.text}")
        time.sleep(0.05)


def test_readyz_follows_the_store_down_and_back_while_livez_stays_200(own_postgres: OwnPostgres) -> None:
    period = readiness_period()
    server = ServerProcess({"LASTWORD_DATABASE_URL": own_postgres.url, "LASTWORD_LOG_LEVEL": "warning"}, ROOT)
    server.start()
    try:
        assert readyz(server.url).json() == {"status": "ready"}
        for _ in range(2):  # down and back twice: the recovery leaves nothing behind
            own_postgres.stop()
            down, took = first_answer(server.url, 503, within=period)
            assert down.headers["content-type"].startswith("application/problem+json")
            assert down.json()["code"] == "store_unavailable", down.text
            assert took < period
            live = httpx.get(server.url + "/livez", timeout=10)
            assert live.status_code == 200 and live.json() == {"status": "ok"}
            assert readyz(server.url).status_code == 503  # still down: not a passing blip

            own_postgres.start()
            up, took = first_answer(server.url, 200, within=period)
            assert up.json() == {"status": "ready"}
            assert took < period
            created = httpx.post(server.url + "/v1/runs", json={}, timeout=10)
            assert created.status_code == 201, created.text
    finally:
        server.stop()
