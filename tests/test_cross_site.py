"""Cross-site writes refused (SPEC §18 "Safe when left open"): a foreign Origin is 403, an
undeclared body is 415, on a server with no tokens — the default a page on another origin meets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servers import threaded_server

RUN = b'{"runId": "planted"}'


@pytest.fixture
def open_server(make_settings: Any) -> Iterator[httpx.Client]:
    """A default (tokenless) server allowing one extra origin, with one running run."""
    with threaded_server(make_settings(cors_origins="https://dash.example")) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        http.post("/v1/runs", json={"runId": "r1"}).raise_for_status()
        yield http


@pytest.mark.parametrize("path, body", [
    ("/v1/runs", RUN),
    ("/v1/runs/r1/events", b'{"type": "assistant/chunk", "text": "injected"}'),
    ("/v1/runs/r1/end", b'{"stopReason": "end_turn"}'),
])
def test_a_json_body_without_a_content_type_is_415_and_changes_nothing(open_server: httpx.Client, path: str,
                                                                        body: bytes) -> None:
    """A body that does not declare its type is never parsed as JSON (no CORS preflight guards it)."""
    refused = open_server.post(path, content=body)
    assert refused.status_code == 415 and refused.json()["code"] == "unsupported_media_type"
    assert refused.headers["content-type"] == "application/problem+json"
    assert open_server.get("/v1/runs/planted").status_code == 404
    assert open_server.get("/v1/runs/r1").json()["status"] == "running"
    assert open_server.get("/v1/runs/r1/events").json()["events"][-1]["event"]["type"] != "assistant/chunk"


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "text/html", "application/octet-stream"])
def test_a_body_of_an_unknown_type_is_415(open_server: httpx.Client, content_type: str) -> None:
    """Types a form or a simple request can send, other than the ones the endpoint takes, are 415."""
    refused = open_server.post("/v1/runs", content=RUN, headers={"content-type": content_type})
    assert refused.status_code == 415 and refused.json()["code"] == "unsupported_media_type"


def test_a_body_less_post_needs_no_content_type(open_server: httpx.Client) -> None:
    """An empty body declares nothing and is parsed as nothing: /turns and /close with none work."""
    open_server.post("/v1/runs", json={"runId": "chat", "mode": "continuable"}).raise_for_status()
    open_server.post("/v1/runs/chat/end", json={"stopReason": "end_turn"}).raise_for_status()
    assert open_server.post("/v1/runs/chat/turns").status_code == 201
    open_server.post("/v1/runs/chat/end", json={"stopReason": "end_turn"}).raise_for_status()
    assert open_server.post("/v1/runs/chat/close").status_code == 200


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1.evil.example",
                                    "https://dash.example.evil"])
@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v1/runs", {"runId": "planted"}),
    ("POST", "/v1/runs/r1/chunks", {"text": "injected"}),
    ("POST", "/v1/runs/r1/end", {"stopReason": "cancelled"}),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ("DELETE", "/mcp", None),
])
def test_a_foreign_origin_cannot_write(open_server: httpx.Client, origin: str, method: str, path: str,
                                       body: Any) -> None:
    """A state-changing request from a page on another origin is 403 cross_origin and changes nothing."""
    refused = open_server.request(method, path, json=body, headers={"origin": origin,
                                                                     "accept": "application/json, text/event-stream"})
    assert refused.status_code == 403 and refused.json()["code"] == "cross_origin"
    assert origin in refused.json()["detail"] and "LASTWORD_CORS_ORIGINS" in refused.json()["detail"]
    assert open_server.get("/v1/runs/planted").status_code == 404
    assert open_server.get("/v1/runs/r1").json()["status"] == "running"


def test_own_and_listed_origins_may_write(open_server: httpx.Client) -> None:
    """The service's own origin (the dashboard) and an origin in LASTWORD_CORS_ORIGINS write as before;
    reads from any origin are untouched."""
    own = str(open_server.base_url).rstrip("/")
    assert open_server.post("/v1/runs", json={"runId": "mine"}, headers={"origin": own}).status_code == 201
    listed = open_server.post("/v1/runs", json={"runId": "dash"}, headers={"origin": "https://dash.example"})
    assert listed.status_code == 201 and listed.headers["access-control-allow-origin"] == "https://dash.example"
    assert open_server.get("/v1/runs/r1", headers={"origin": "https://evil.example"}).status_code == 200


def test_a_listed_origin_gets_its_preflight(open_server: httpx.Client) -> None:
    """LASTWORD_CORS_ORIGINS answers the preflight of a JSON write; a foreign origin's preflight is not allowed."""
    ask = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}
    listed = open_server.options("/v1/runs", headers={"origin": "https://dash.example", **ask})
    foreign = open_server.options("/v1/runs", headers={"origin": "https://evil.example", **ask})
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == "https://dash.example"
    assert "access-control-allow-origin" not in foreign.headers


def test_any_origin_when_cors_allows_any(make_settings: Any) -> None:
    """LASTWORD_CORS_ORIGINS='*' lets every origin write (a deliberate choice, like tokens are)."""
    with threaded_server(make_settings(cors_origins="*")) as url, httpx.Client(base_url=url) as http:
        allowed = http.post("/v1/runs", json={"runId": "any"}, headers={"origin": "https://elsewhere.example"})
    assert allowed.status_code == 201
