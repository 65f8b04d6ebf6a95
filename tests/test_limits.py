"""Limits that protect the service from clients that misbehave."""

from __future__ import annotations

import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

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
                answer = sock.recv(4096)
                assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
        finally:
            sock.close()
