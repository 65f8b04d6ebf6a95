"""A subscriber that stops reading is cut off once one send has waited
``sse_send_timeout_seconds`` (it resumes later with Last-Event-ID); the others are not held up."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from lastword.settings import Settings
from tests.api_helpers import chunk, create
from tests.servers import threaded_server


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=0.5,
                        sse_send_timeout_seconds=0.5)
    with threaded_server(settings) as base:
        yield base


def test_a_subscriber_that_stops_reading_is_cut_off(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as api:
        run_id = create(api)["runId"]
        parts = urlsplit(url)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((parts.hostname, parts.port))
        stalled.sendall(f"GET /v1/runs/{run_id}/stream?include=chunks HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        big = "x" * 60_000
        # Far more than the socket buffers hold, while this client reads nothing.
        for _ in range(40):
            assert api.post(f"/v1/runs/{run_id}/events", json=[chunk(big)] * 4).status_code == 200
        # Keep-alives would keep a stream open for ever: only the send timeout ends this one.
        stalled.settimeout(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not stalled.recv(1 << 16):
                break
        else:
            pytest.fail("the stalled stream was never cut off")
        stalled.close()
