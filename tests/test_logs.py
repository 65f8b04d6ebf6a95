"""Structured logs from a real `lastword serve`: JSON lines, each request with its id."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.servers import ServerProcess


@pytest.mark.slow
def test_requests_are_logged_as_json_with_their_request_id(tmp_path: Path) -> None:
    """Every log line is JSON; a request's line carries the X-Request-ID it was sent (or was given)."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
                            "LASTWORD_LOG_LEVEL": "info"}, tmp_path).start()
    try:
        sent = httpx.post(server.url + "/v1/runs", json={"agent": "logged"}, headers={"X-Request-ID": "req-42"})
        assert sent.headers["x-request-id"] == "req-42"
        given = httpx.get(server.url + "/v1/runs/nope")
        generated = given.headers["x-request-id"]
        assert generated and generated != "req-42"
    finally:
        server.stop()
    entries = [json.loads(line) for line in server.log_path.read_text().splitlines() if line.strip()]
    requests = {entry.get("requestId"): entry for entry in entries if entry.get("logger") == "lastword.access"}
    assert requests["req-42"]["path"] == "/v1/runs" and requests["req-42"]["status"] == 201
    assert requests[generated]["status"] == 404
    assert all({"ts", "level", "logger", "message"} <= entry.keys() for entry in entries)


def test_importing_the_package_leaves_other_loggers_alone() -> None:
    """A parent importing lastword's modules keeps its own httpx logging; the service's
    logging setup is what quiets httpx (a webhook URL may hold a receiver's token)."""
    import subprocess
    import sys

    code = ("import logging, lastword.main, lastword.webhooks.sender\n"
            "before = logging.getLogger('httpx').level\n"
            "from lastword.http.logs import configure_logging\n"
            "configure_logging('info')\n"
            "print(before, logging.getLogger('httpx').level)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["0", "30"]
