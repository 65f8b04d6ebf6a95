"""HEAD on every GET endpoint of the OpenAPI document answers like GET, without a body.

Load balancers probe ``/healthz`` with HEAD; a 405 there takes a healthy replica out of
rotation. Streams answer their headers and end at once (HEAD wants no events).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from lastword.openapi import DOCUMENT

from tests.api_helpers import shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run

GET_PATHS = [path for path, operations in json.loads(Path(DOCUMENT).read_text())["paths"].items() if "get" in operations]
#: Headers a HEAD answer must share with the GET answer (RFC 9110 §9.3.2).
SAME = ("content-type", "cache-control")


@pytest.mark.parametrize("path", GET_PATHS)
def test_head_answers_like_get_without_a_body(shared_api: httpx.Client, path: str) -> None:
    """HEAD has GET's status and headers (Content-Length too, where it is fixed) and an empty body."""
    run_id = create_run(shared_api)
    shared_api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"}).raise_for_status()
    url = path.replace("{runId}", run_id)
    started = time.monotonic()
    head = shared_api.head(url, timeout=15)
    assert time.monotonic() - started < 15  # a bound on the test: a stream's HEAD must end
    assert head.status_code != 405, head.text
    assert head.content == b""
    if url.endswith("stream"):
        assert head.status_code == 200
        assert head.headers["content-type"].startswith("text/event-stream")
        return
    get = shared_api.get(url)
    assert head.status_code == get.status_code
    for name in SAME:
        assert head.headers.get(name) == get.headers.get(name), name
    if path not in ("/metrics",):  # metrics change between two scrapes
        assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))


def test_head_of_an_unknown_run_is_a_404_and_post_only_paths_allow_no_head(shared_api: httpx.Client) -> None:
    """HEAD follows GET's answer (404 here); on a POST-only path it is a 405 whose Allow says POST."""
    assert shared_api.head("/v1/runs/no-such-run").status_code == 404
    refused = shared_api.head("/v1/runs/no-such-run/end")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "POST"
    allowed = shared_api.put("/v1/runs")
    assert allowed.headers["allow"] == "GET, HEAD, POST"
