"""Limits that protect the service from clients that misbehave."""

from __future__ import annotations

import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from tests.servers import threaded_server


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return sock


def test_a_client_trickling_headers_is_cut_off(make_settings: Any) -> None:
    """Headers sent a byte at a time past the deadline get 408 and a closed connection; the service stays up."""
    with threaded_server(make_settings(header_timeout_seconds=0.5)) as url:
        sock = _connect(url)
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
        answer = b""
        sent = 0
        stop = time.monotonic() + 10  # a bound on the test, not an assertion on timing
        try:
            while sent < len(request) and time.monotonic() < stop:
                if select.select([sock], [], [], 0.02)[0]:
                    break  # the server spoke (or hung up) before the headers were done
                sock.sendall(request[sent : sent + 1])
                sent += 1
            sock.settimeout(5)
            while chunk := sock.recv(4096):
                answer += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            sock.close()
        assert sent < len(request), "the server waited for the whole trickle"
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert b'"code":"header_timeout"' in answer
        assert httpx.get(url + "/healthz").status_code == 200


def test_headers_within_the_deadline_are_served(make_settings: Any) -> None:
    """A client that finishes its headers in time is served normally on the same connection twice."""
    with threaded_server(make_settings(header_timeout_seconds=2)) as url:
        sock = _connect(url)
        try:
            for _ in range(2):
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = b""
                while not answer.endswith(b'{"status":"ok"}'):  # the head and body may come apart
                    piece = sock.recv(4096)
                    assert piece, answer
                    answer += piece
                assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
        finally:
            sock.close()


def _healthz(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while not answer.endswith(b'{"status":"ok"}'):
        piece = sock.recv(4096)
        if not piece:
            break  # the server closed the connection
        answer += piece
    return answer


def test_an_idle_connection_is_kept_longer_than_client_pools_keep_it(make_settings: Any) -> None:
    """A keep-alive connection idle for 6 s (past uvicorn's own 5 s, past Node's 4 s pool) is still
    served: the client closes an idle connection first, never the server under a request being
    sent. With LASTWORD_HTTP_KEEPALIVE_SECONDS=1 the server closes it after that."""
    with threaded_server(make_settings()) as url:
        sock = _connect(url)
        try:
            assert _healthz(sock).startswith(b"HTTP/1.1 200")
            time.sleep(6)  # the idle time is the scenario, not a synchronisation
            assert _healthz(sock).startswith(b"HTTP/1.1 200")
        finally:
            sock.close()
    with threaded_server(make_settings(http_keepalive_seconds=1)) as url:
        sock = _connect(url)
        try:
            assert _healthz(sock).startswith(b"HTTP/1.1 200")
            sock.settimeout(30)  # a bound on the test: the close comes after about a second
            assert sock.recv(4096) == b""
        finally:
            sock.close()


def test_an_event_over_the_size_limit_refuses_its_batch(make_settings: Any) -> None:
    """A JSON batch with one oversized event gets 413 naming its index, and stores nothing."""
    with threaded_server(make_settings(max_event_bytes=200)) as url, httpx.Client(base_url=url) as api:
        run = api.post("/v1/runs", json={}).json()["runId"]
        small = {"type": "assistant/chunk", "delta": {"type": "text", "text": "ok"}}
        big = {"type": "assistant/chunk", "delta": {"type": "text", "text": "x" * 300}}
        refused = api.post(f"/v1/runs/{run}/events", json=[small, big])
        assert refused.status_code == 413
        assert refused.json()["code"] == "event_too_large" and refused.json()["index"] == 1
        assert api.get(f"/v1/runs/{run}").json()["lastSeq"] == 1  # only subagent/start


def test_ndjson_keeps_the_events_before_an_oversized_line(make_settings: Any) -> None:
    """In a streamed NDJSON body the events before an oversized one are stored and counted."""
    with threaded_server(make_settings(max_event_bytes=200)) as url, httpx.Client(base_url=url) as api:
        run = api.post("/v1/runs", json={}).json()["runId"]
        lines = [orjson.dumps({"type": "x-n", "n": n}) for n in range(3)]
        lines.append(orjson.dumps({"type": "x-big", "pad": "y" * 300}))
        refused = api.post(f"/v1/runs/{run}/events", content=b"\n".join(lines),
                           headers={"content-type": "application/x-ndjson"})
        assert refused.status_code == 413
        assert refused.json()["index"] == 3 and refused.json()["accepted"] == 3


def test_a_batch_over_the_count_limit_is_refused(make_settings: Any) -> None:
    """More events than max_batch_events in one JSON batch gets 413 batch_too_large."""
    with threaded_server(make_settings(max_batch_events=5)) as url, httpx.Client(base_url=url) as api:
        run = api.post("/v1/runs", json={}).json()["runId"]
        refused = api.post(f"/v1/runs/{run}/events", json=[{"type": "x-a"}] * 6)
        assert refused.status_code == 413 and refused.json()["code"] == "batch_too_large"
        assert api.post(f"/v1/runs/{run}/events", json=[{"type": "x-a"}] * 5).json()["accepted"] == 5


def test_page_sizes_are_capped(make_settings: Any) -> None:
    """A limit above max_page_size returns at most max_page_size items, and paging goes on."""
    with threaded_server(make_settings(max_page_size=3)) as url, httpx.Client(base_url=url) as api:
        run = api.post("/v1/runs", json={}).json()["runId"]
        api.post(f"/v1/runs/{run}/events", json=[{"type": "x-a"}] * 7).raise_for_status()
        page = api.get(f"/v1/runs/{run}/events", params={"limit": 100}).json()
        assert [e["seq"] for e in page["events"]] == [1, 2, 3]
        for _ in range(4):
            api.post("/v1/runs", json={})
        runs = api.get("/v1/runs", params={"limit": 100}).json()
        assert len(runs["runs"]) == 3 and "nextCursor" in runs


def test_page_sizes_follow_the_setting_not_a_literal(make_settings: Any) -> None:
    """With max_page_size above the old fixed bounds (500 runs, 1000 events), a page that large is served."""
    with threaded_server(make_settings(max_page_size=2000)) as url, httpx.Client(base_url=url) as api:
        run = api.post("/v1/runs", json={}).json()["runId"]
        api.post(f"/v1/runs/{run}/events", json=[{"type": "x-a"}] * 1200).raise_for_status()
        page = api.get(f"/v1/runs/{run}/events", params={"limit": 1500})
        assert page.status_code == 200, page.text
        assert len(page.json()["events"]) == 1201
        runs = api.get("/v1/runs", params={"limit": 501})
        assert runs.status_code == 200, runs.text


def test_wait_is_lowered_to_the_setting_not_refused(make_settings: Any) -> None:
    """?wait= above any fixed bound is lowered to LASTWORD_MAX_WAIT_SECONDS, not refused with 422."""
    with threaded_server(make_settings(max_wait_seconds=0.05)) as url, httpx.Client(base_url=url) as api:
        run = api.post("/v1/runs", json={}).json()["runId"]
        for path in ("result", "tool-result"):
            answer = api.get(f"/v1/runs/{run}/{path}", params={"wait": 5000})
            assert answer.status_code in (200, 202), answer.text
        assert api.get(f"/v1/runs/{run}/result", params={"wait": 5000}).json()["status"] == "running"
