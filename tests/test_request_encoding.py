"""Request bodies are read as sent or refused: gzip is decoded, other encodings and non-UTF-8
charsets get 415 instead of being misread, through a real server."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_problem, ingested, serving, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run
from tests.conftest import BACKENDS

EVENTS = [{"type": "assistant/chunk", "delta": {"type": "text", "text": f"é{i} "}} for i in range(50)]


def _post(api: httpx.Client, path: str, body: bytes, kind: str, **headers: str) -> httpx.Response:
    return api.post(path, content=body, headers={"content-type": kind, **headers})


@pytest.mark.parametrize("kind", ["application/json", "application/x-ndjson"])
def test_gzip_bodies_are_decoded(shared_api: httpx.Client, kind: str) -> None:
    """A gzip body (one member or several) is stored exactly as the same body sent plain."""
    plain = json.dumps(EVENTS).encode() if kind == "application/json" else b"\n".join(json.dumps(e).encode() for e in EVENTS)
    for body in (gzip.compress(plain), gzip.compress(plain[:100]) + gzip.compress(plain[100:])):
        run_id = create_run(shared_api)
        answer = _post(shared_api, f"/v1/runs/{run_id}/events", body, kind, **{"content-encoding": "gzip"})
        assert answer.status_code == 200, answer.text
        assert ingested(shared_api, run_id) == EVENTS
    run_id = create_run(shared_api)
    text = _post(shared_api, f"/v1/runs/{run_id}/chunks", gzip.compress("héllo wörld".encode()), "text/plain",
                 **{"content-encoding": "gzip"})
    assert text.status_code == 200, text.text
    assert shared_api.get(f"/v1/runs/{run_id}/result").json()["output"] == [{"type": "text", "text": "héllo wörld"}]


def test_bad_gzip_is_400_and_a_gzip_bomb_413(backend_settings_url: str) -> None:
    """Corrupt or truncated gzip: 400 invalid_gzip; a small body that decodes past the limit: 413."""
    with httpx.Client(base_url=backend_settings_url, timeout=30) as api:
        run_id = create_run(api)
        body = gzip.compress(json.dumps(EVENTS).encode())
        path = f"/v1/runs/{run_id}/events"
        gz = {"content-encoding": "gzip"}
        assert_problem(_post(api, path, body[:-12], "application/json", **gz), 400, "invalid_gzip")
        assert_problem(_post(api, path, b"\x1f\x8b" + b"not gzip at all", "application/json", **gz), 400, "invalid_gzip")
        bomb = gzip.compress(b"[" + b" " * (2 * 1024 * 1024) + b"]")
        assert len(bomb) < 10_000
        assert_problem(_post(api, path, bomb, "application/json", **gz), 413, "payload_too_large")
        assert ingested(api, run_id) == []


@pytest.fixture(params=BACKENDS)
def backend_settings_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    with serving(request.param, tmp_path_factory, max_body_bytes=1024 * 1024) as url:
        yield url


@pytest.mark.parametrize("encoding", ["br", "deflate", "compress", "zstd", "gzip, gzip", "gzip, br"])
def test_other_content_encodings_are_415(shared_api: httpx.Client, encoding: str) -> None:
    """A Content-Encoding the service does not decode is refused with 415, nothing stored."""
    run_id = create_run(shared_api)
    for path, kind, body in [(f"/v1/runs/{run_id}/events", "application/json", json.dumps(EVENTS).encode()),
                             (f"/v1/runs/{run_id}/chunks", "text/plain", b"plain text"),
                             ("/v1/runs", "application/json", b"{}")]:
        problem = assert_problem(_post(shared_api, path, body, kind, **{"content-encoding": encoding}),
                                 415, "unsupported_content_encoding")
        assert problem["contentEncoding"] == encoding
    assert ingested(shared_api, run_id) == []


@pytest.mark.parametrize("charset", ["latin-1", "iso-8859-1", "utf-16", "windows-1252", '"us-ascii"'])
def test_non_utf8_charsets_are_415(shared_api: httpx.Client, charset: str) -> None:
    """A body declared in another charset is refused with 415, not misread as UTF-8."""
    run_id = create_run(shared_api)
    for path, kind, body in [(f"/v1/runs/{run_id}/events", "application/json", json.dumps(EVENTS).encode()),
                             (f"/v1/runs/{run_id}/events", "application/x-ndjson", json.dumps(EVENTS[0]).encode()),
                             (f"/v1/runs/{run_id}/chunks", "text/plain", "caf\xe9".encode("latin-1")),
                             (f"/v1/runs/{run_id}/end", "application/json", b'{"stopReason":"completed"}')]:
        assert_problem(_post(shared_api, path, body, f"{kind}; charset={charset}"), 415, "unsupported_charset")
    assert ingested(shared_api, run_id) == []
    assert shared_api.get(f"/v1/runs/{run_id}/result").json()["status"] == "running"


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", '"utf-8"', "utf8"])
def test_utf8_charset_is_accepted(shared_api: httpx.Client, charset: str) -> None:
    """charset=utf-8, in any case or quoted, is what the service reads anyway."""
    run_id = create_run(shared_api)
    answer = _post(shared_api, f"/v1/runs/{run_id}/events", json.dumps(EVENTS).encode(), f"application/json; charset={charset}")
    assert answer.status_code == 200, answer.text
