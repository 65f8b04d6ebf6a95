"""Access tokens over HTTP: who may ingest, who may read, what stays open (SPEC §11)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from lastword.main import create_app

from tests.servers import threaded_server

INGEST, READ = "ingest-secret-1", "read-secret-2"


@pytest.fixture
def secured(make_settings: Any) -> Iterator[tuple[str, str]]:
    """A server with both tokens, and one run in it."""
    with threaded_server(make_settings(ingest_token=INGEST, read_token=READ, cors_origins="https://dash.example")) as url:
        response = httpx.post(url + "/v1/runs", json={"runId": "r1"}, headers={"Authorization": f"Bearer {INGEST}"})
        assert response.status_code == 201
        yield url, "r1"


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


# (token presented, expected status for an ingest POST, expected status for a read GET)
BOTH_TOKENS = [
    (None, 401, 401),
    (INGEST, 200, 200),
    (READ, 403, 200),
    ("wrong", 401, 401),
]


@pytest.mark.parametrize(("token", "ingest_status", "read_status"), BOTH_TOKENS)
def test_both_tokens_set(secured: tuple[str, str], token: str | None, ingest_status: int, read_status: int) -> None:
    """Ingest needs the ingest token (the read token is 403); reads take either; others are 401."""
    url, run = secured
    chunk = httpx.post(f"{url}/v1/runs/{run}/chunks", json={"text": "x"}, headers=_auth(token))
    assert chunk.status_code == ingest_status
    for path in (f"/v1/runs/{run}", f"/v1/runs/{run}/result", f"/v1/runs/{run}/events", "/v1/runs", "/metrics"):
        assert httpx.get(url + path, headers=_auth(token)).status_code == read_status, path


def test_refusals_are_problem_documents_that_change_nothing(secured: tuple[str, str]) -> None:
    """A refused ingest answers problem+json with a code and stores nothing."""
    url, run = secured
    missing = httpx.post(f"{url}/v1/runs/{run}/chunks", json={"text": "lost"})
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["code"] == "missing_token"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong_kind = httpx.post(f"{url}/v1/runs/{run}/end", json={"stopReason": "completed"}, headers=_auth(READ))
    assert wrong_kind.json()["code"] == "wrong_token_kind"
    events = httpx.get(f"{url}/v1/runs/{run}/events", headers=_auth(READ)).json()["events"]
    assert [e["event"]["type"] for e in events] == ["subagent/start"]


def test_health_stays_open(secured: tuple[str, str]) -> None:
    """/healthz, /livez and /readyz answer without a token."""
    url, _ = secured
    assert httpx.get(url + "/healthz").status_code == 200
    assert httpx.get(url + "/livez").status_code == 200
    assert httpx.get(url + "/readyz").status_code == 200


def test_query_token_works_for_reads_only(secured: tuple[str, str]) -> None:
    """?access_token= opens reads (EventSource cannot send headers) but never ingest."""
    url, run = secured
    assert httpx.get(f"{url}/v1/runs/{run}", params={"access_token": READ}).status_code == 200
    with httpx.stream("GET", f"{url}/v1/runs/{run}/stream", params={"access_token": READ}, timeout=10) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
    refused = httpx.post(f"{url}/v1/runs/{run}/chunks", params={"access_token": INGEST}, json={"text": "x"})
    assert refused.status_code == 401


def test_cors_preflight_needs_no_token(secured: tuple[str, str]) -> None:
    """A browser's preflight from a configured origin is answered without a token."""
    url, run = secured
    preflight = httpx.options(f"{url}/v1/runs/{run}/stream", headers={
        "Origin": "https://dash.example", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://dash.example"
    other = httpx.options(f"{url}/v1/runs/{run}/stream", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize(
    ("configured", "token", "ingest_status", "read_status"),
    [
        ({}, None, 200, 200),
        ({"ingest_token": INGEST}, None, 401, 401),
        ({"ingest_token": INGEST}, INGEST, 200, 200),
        ({"read_token": READ}, None, 200, 401),
        ({"read_token": READ}, READ, 200, 200),
    ],
)
def test_one_or_no_token_configured(
    make_settings: Any, configured: dict[str, str], token: str | None, ingest_status: int, read_status: int
) -> None:
    """With no token everything is open; with one, what it guards needs it."""
    with threaded_server(make_settings(**configured)) as url:
        headers = {"Authorization": f"Bearer {INGEST}"} if "ingest_token" in configured else {}
        run = httpx.post(url + "/v1/runs", json={}, headers=headers).json()["runId"]
        chunk = httpx.post(f"{url}/v1/runs/{run}/chunks", json={"text": "x"}, headers=_auth(token))
        assert chunk.status_code == ingest_status
        assert httpx.get(f"{url}/v1/runs/{run}", headers=_auth(token)).status_code == read_status


def test_tokens_never_reach_the_log(make_settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Neither token appears in anything the service logs, query-string tokens included."""
    caplog.set_level("DEBUG")
    with threaded_server(make_settings(ingest_token=INGEST, read_token=READ)) as url:
        httpx.get(url + "/v1/runs", params={"access_token": READ})
        httpx.get(url + "/v1/runs", headers=_auth("wrong-guess"))
        httpx.post(url + "/v1/runs", json={}, headers=_auth(INGEST))
    service = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    logged = "\n".join(f"{record.getMessage()} {vars(record)}" for record in service)
    assert "GET /v1/runs 401" in logged  # the request log saw the refused read
    assert READ not in logged and INGEST not in logged and "wrong-guess" not in logged


@pytest.mark.parametrize("host, tokens, warned", [
    ("0.0.0.0", {}, True),
    ("::", {}, True),
    ("10.1.2.3", {}, True),
    ("lastword.example", {}, True),
    ("0.0.0.0", {"read_token": READ}, True),  # ingest still open
    ("0.0.0.0", {"ingest_token": INGEST}, False),
    ("127.0.0.1", {}, False),
    ("localhost", {}, False),
    ("::1", {}, False),
])
def test_an_open_service_on_a_reachable_address_warns_at_start(
        make_settings: Any, caplog: pytest.LogCaptureFixture, host: str, tokens: dict[str, str], warned: bool) -> None:
    """A non-loopback LASTWORD_HOST with ingest left open logs one warning naming the risk; loopback does not."""
    caplog.set_level("WARNING", logger="lastword")
    create_app(make_settings(host=host, **tokens))
    warnings = [r.getMessage() for r in caplog.records if "LASTWORD_HOST" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert host in warnings[0] and "LASTWORD_INGEST_TOKEN" in warnings[0]
