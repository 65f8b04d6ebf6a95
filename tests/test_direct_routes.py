"""The appends that take the short way in (``lastword.http.direct``, past FastAPI's router) are
the routes FastAPI's router would pick, and pass the app's middlewares as every request does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastword.http import direct as direct_way
from lastword.main import create_app
from lastword.settings import Settings
from tests.polling import wait_until
from tests.servers import threaded_server

INGEST, READ = "ingest-secret-1", "read-secret-2"
LISTED = "https://dash.example"

segment = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=12)
paths = st.lists(st.one_of(segment, st.sampled_from(["v1", "runs", "events", "chunks", "end", "ds", "ingest"])),
                 min_size=1, max_size=6).map(lambda parts: "/" + "/".join(parts))


def _routed_by_fastapi(app: Any, path: str) -> tuple[Any, Any]:
    """The endpoint and path parameters FastAPI's own router picks for ``POST path``: the router
    writes them into the scope before it calls the endpoint (which fails here, with no store
    open: it is not needed)."""
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"test"), (b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
        "server": ("test", 80), "state": {}, "app": app,
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    with contextlib.suppress(Exception):
        asyncio.run(app.router(scope, receive, send))
    return scope.get("endpoint"), scope.get("path_params")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    database = tmp_path_factory.mktemp("direct") / "db.sqlite"
    return create_app(Settings(database_url=f"sqlite:///{database}"))


@settings(max_examples=150, deadline=None)
@given(path=st.one_of(
    paths,
    st.builds("/v1/runs/{}/{}{}".format, segment, st.sampled_from(["events", "chunks", "end", "ingest", "turns"]),
              st.sampled_from(["", "/", "/x", "/events"])),
    st.builds("{}{}".format, st.sampled_from(["/ds/", "/ds", "/v1/ds/", "/ds//"]), segment)))
def test_a_post_the_short_way_takes_is_one_fastapis_router_gives_the_same_route(app: Any, path: str) -> None:
    found = direct_way.find(app.directs, {"method": "POST", "path": path})
    if found is not None:
        route, params = found
        assert _routed_by_fastapi(app, path) == (route.route.endpoint, params)


@pytest.fixture
def secured(make_settings: Any) -> Iterator[httpx.Client]:
    """A server with both tokens and a listed origin, and a run ``r``."""
    settings = make_settings(ingest_token=INGEST, read_token=READ, cors_origins=LISTED)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        made = http.post("/v1/runs", json={"runId": "r"}, headers={"Authorization": f"Bearer {INGEST}"})
        assert made.status_code == 201
        yield http


APPENDS = {
    "events": ("/v1/runs/r/events", b'{"type": "assistant/chunk", "delta": {"type": "text", "text": "hi"}}',
               "application/json", 200),
    "chunks": ("/v1/runs/r/chunks", b"hi", "text/plain", 200),
    "end": ("/v1/runs/r/end", b'{"stopReason": "completed"}', "application/json", 200),
}


def _append(http: httpx.Client, kind: str, token: str | None, **headers: str) -> httpx.Response:
    path, body, content_type, _ = APPENDS[kind]
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return http.post(path, content=body, headers={"Content-Type": content_type, **auth, **headers})


@pytest.mark.parametrize("kind", APPENDS)
def test_a_short_way_append_needs_the_ingest_token_and_a_listed_origin(secured: httpx.Client, kind: str) -> None:
    """No token is 401, the read token 403, a foreign origin 403, each a problem document; the
    ingest token from a listed origin appends and gets its CORS header."""
    missing, read = _append(secured, kind, None), _append(secured, kind, READ)
    foreign = _append(secured, kind, INGEST, origin="https://evil.example")
    assert missing.status_code == 401 and missing.json()["code"] == "missing_token"
    assert read.status_code == 403 and read.json()["code"] == "wrong_token_kind"
    assert foreign.status_code == 403 and foreign.json()["code"] == "cross_origin"
    run = secured.get("/v1/runs/r", headers={"Authorization": f"Bearer {READ}"}).json()
    stored = run["lastSeq"]
    listed = _append(secured, kind, INGEST, origin=LISTED)
    assert listed.status_code == APPENDS[kind][3], listed.text
    assert listed.headers["access-control-allow-origin"] == LISTED
    assert secured.get("/v1/runs/r", headers={"Authorization": f"Bearer {READ}"}).json()["lastSeq"] > stored


@pytest.mark.parametrize("kind", APPENDS)
def test_a_short_way_append_is_logged_with_its_request_id(secured: httpx.Client, kind: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    path = APPENDS[kind][0]

    def logged() -> list[tuple[str, int]]:
        return [(r.__dict__["path"], r.__dict__["status"]) for r in caplog.records if r.name == "lastword.access"]

    with caplog.at_level(logging.INFO, logger="lastword.access"):
        sent = _append(secured, kind, INGEST, **{"X-Request-ID": f"{kind}-7"})
        # The line is written once the answer is sent: the client may read it first.
        wait_until(lambda: (path, APPENDS[kind][3]) in logged(), "the append in the request log")
    assert sent.headers["x-request-id"] == f"{kind}-7"
