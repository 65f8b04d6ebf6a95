"""A JSON-mode ``/ds`` write holds at most ``LASTWORD_DS_MAX_JSON_MESSAGES`` messages: more is 413
naming the limit, and nothing of it is stored (a small body of tiny messages must not become
millions of rows)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servers import threaded_server

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def ds(make_settings: Any) -> Iterator[httpx.Client]:
    with threaded_server(make_settings(ds_max_json_messages=3)) as url, \
            httpx.Client(base_url=f"{url}/ds", timeout=30) as client:
        yield client


def test_an_append_past_the_limit_is_413_and_stores_nothing(ds: httpx.Client) -> None:
    assert ds.put("/cap/a", headers=JSON).status_code == 201
    refused = ds.post("/cap/a", content=b"[1,2,3,4]", headers=JSON)
    assert refused.status_code == 413, refused.text
    problem = refused.json()
    assert problem["status"] == 413 and problem["limit"] == 3 and "LASTWORD_DS_MAX_JSON_MESSAGES" in problem["detail"]
    assert ds.get("/cap/a", params={"offset": "-1"}).json() == []
    assert ds.post("/cap/a", content=b"[1,2,3]", headers=JSON).status_code == 204
    assert ds.get("/cap/a", params={"offset": "-1"}).json() == [1, 2, 3]


def test_a_create_past_the_limit_is_413_and_makes_no_stream(ds: httpx.Client) -> None:
    refused = ds.put("/cap/b", content=b'[{"a":1},{"a":2},{"a":3},{"a":4}]', headers=JSON)
    assert refused.status_code == 413, refused.text
    assert ds.head("/cap/b").status_code == 404


def test_a_bad_body_to_a_missing_stream_is_still_404(ds: httpx.Client) -> None:
    """The body is split before the write, yet refused where the protocol checks it: after the stream."""
    assert ds.post("/cap/none", content=b"[1,2,3,4,", headers=JSON).status_code == 404
    assert ds.post("/cap/none", content=b"[1,2,3,4,5]", headers=JSON).status_code == 404
