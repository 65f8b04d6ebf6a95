"""The request body's idle deadline (LASTWORD_BODY_TIMEOUT_SECONDS), through a real server.

A client that stops sending its body part-way gets 408 ``body_timeout`` and a closed
connection, instead of holding it (and its buffers) open for ever; a slow body whose pauses
stay under the deadline is served; an NDJSON body cut off that way keeps the lines that came.
"""

from __future__ import annotations

import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.servers import threaded_server

CONNECTIONS = 60


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=15)


def _answer(sock: socket.socket, within: float = 15.0) -> bytes:
    """Everything the server sends until it closes the connection (bounded)."""
    answer = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], 0.5)
        if ready:
            piece = sock.recv(65536)
            if not piece:
                return answer
            answer += piece
    raise AssertionError(f"the server kept the connection open: {answer[:200]!r}")


def _head(path: str, length: int, kind: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\ncontent-type: {kind}\r\n"
            f"content-length: {length}\r\n\r\n").encode()


def test_stalled_bodies_get_408_and_are_closed(make_settings: Any) -> None:
    """Many connections that stop part-way through their body (or before it) each get 408 body_timeout."""
    with threaded_server(make_settings(body_timeout_seconds=1)) as url, httpx.Client(base_url=url) as api:
        run_id = api.post("/v1/runs", json={}).json()["runId"]
        socks = []
        for index in range(CONNECTIONS):
            sock = _connect(url)
            body = b'[{"type":"x-a"}]'
            sock.sendall(_head(f"/v1/runs/{run_id}/events", len(body)) + body[: index % 5])  # 0..4 bytes of it
            socks.append(sock)
        for sock in socks:
            answer = _answer(sock)
            sock.close()
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
            assert b'"code":"body_timeout"' in answer
        assert api.get("/healthz").status_code == 200
        assert api.get(f"/v1/runs/{run_id}").json()["lastSeq"] == 1  # nothing half-read was stored


def test_a_slow_body_within_the_deadline_is_served(make_settings: Any) -> None:
    """A body whose pauses stay under the deadline is read whole and answered normally."""
    with threaded_server(make_settings(body_timeout_seconds=2)) as url, httpx.Client(base_url=url) as api:
        run_id = api.post("/v1/runs", json={}).json()["runId"]
        body = b'[{"type":"x-a"},{"type":"x-b"}]'
        sock = _connect(url)
        sock.sendall(_head(f"/v1/runs/{run_id}/events", len(body)))
        for start in range(0, len(body), 8):
            # Pauses of a quarter of the deadline: the total takes longer than the deadline.
            select.select([], [], [], 0.5)
            sock.sendall(body[start : start + 8])
        answer = b""
        while b'"lastSeq":3' not in answer:
            piece = sock.recv(65536)
            assert piece, answer
            answer += piece
        sock.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:80]


def test_a_stalled_ndjson_body_keeps_the_lines_that_came(make_settings: Any) -> None:
    """An NDJSON body that stops mid-line: the complete lines before the pause are stored."""
    with threaded_server(make_settings(body_timeout_seconds=1)) as url, httpx.Client(base_url=url) as api:
        run_id = api.post("/v1/runs", json={}).json()["runId"]
        lines = b'{"type":"x-a"}\n{"type":"x-b"}\n{"type":"x-'
        sock = _connect(url)
        sock.sendall(_head(f"/v1/runs/{run_id}/events", len(lines) + 100, "application/x-ndjson") + lines)
        answer = _answer(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        logged = api.get(f"/v1/runs/{run_id}/events").json()["events"]
        assert [item["event"]["type"] for item in logged] == ["subagent/start", "x-a", "x-b"]
