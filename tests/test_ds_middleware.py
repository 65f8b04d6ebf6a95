"""A Durable Streams append (``POST /ds/…``) passes the app's middlewares as every request does:
the request log and its id, CORS, the same-origin check and the tokens (``lastword.main.App``
takes it a shorter way past FastAPI's own layers)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.polling import wait_until
from tests.servers import threaded_server

INGEST, READ = "ingest-secret-1", "read-secret-2"
LISTED = "https://dash.example"


@pytest.fixture
def secured(make_settings: Any) -> Iterator[httpx.Client]:
    """A server with both tokens and a listed origin, and a text stream at ``/ds/chat``."""
    settings = make_settings(ingest_token=INGEST, read_token=READ, cors_origins=LISTED)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        made = http.put("/ds/chat", headers={"Authorization": f"Bearer {INGEST}", "Content-Type": "text/plain"})
        assert made.status_code == 201
        yield http


def _append(http: httpx.Client, token: str | None, **headers: str) -> httpx.Response:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return http.post("/ds/chat", content=b"hello", headers={"Content-Type": "text/plain", **auth, **headers})


def test_an_append_needs_the_ingest_token(secured: httpx.Client) -> None:
    """No token is 401, the read token 403, each a problem document; the ingest token appends."""
    missing, read = _append(secured, None), _append(secured, READ)
    assert missing.status_code == 401 and missing.json()["code"] == "missing_token"
    assert missing.headers["www-authenticate"] == 'Bearer realm="lastword"'
    assert read.status_code == 403 and read.json()["code"] == "wrong_token_kind"
    assert _append(secured, INGEST).status_code == 204
    tail = secured.head("/ds/chat", headers={"Authorization": f"Bearer {READ}"})
    assert tail.headers["stream-next-offset"].endswith("_0000000000000001")  # only the accepted append


def test_an_append_from_a_foreign_origin_is_refused(secured: httpx.Client) -> None:
    """A foreign ``Origin`` is refused 403 even with the ingest token; a listed one gets its CORS header."""
    foreign = _append(secured, INGEST, origin="https://evil.example")
    assert foreign.status_code == 403 and foreign.json()["code"] == "cross_origin"
    listed = _append(secured, INGEST, origin=LISTED)
    assert listed.status_code == 204 and listed.headers["access-control-allow-origin"] == LISTED


def test_an_append_is_logged_with_its_request_id(secured: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    """The answer carries the ``X-Request-ID`` sent (or one given), and the request log has its line."""
    def appends_logged() -> int:
        return [(r.__dict__["method"], r.__dict__["path"], r.__dict__["status"])
                for r in caplog.records if r.name == "lastword.access"].count(("POST", "/ds/chat", 204))

    with caplog.at_level(logging.INFO, logger="lastword.access"):
        sent = _append(secured, INGEST, **{"X-Request-ID": "ds-append-7"})
        given = _append(secured, INGEST)
        # The line is written once the answer is sent: the client may read it first.
        wait_until(lambda: appends_logged() == 2, "two appends in the request log")
    assert sent.headers["x-request-id"] == "ds-append-7"
    assert len(given.headers["x-request-id"]) == 32
