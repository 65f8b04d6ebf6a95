"""Structured logs from a real `lastword serve`: JSON lines, each request with its id."""

from __future__ import annotations

import json
import time
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


def test_a_line_holds_its_own_second_and_its_context_in_the_order_given() -> None:
    """Lines a second apart carry their own seconds (the formatter keeps the last one it wrote);
    the extra context follows the standard fields in the order it was given, private names left out."""
    import logging

    from lastword.http.logs import JsonFormatter

    formatter = JsonFormatter()
    formatter.converter = time.gmtime

    def line(created: float, extra: dict[str, object]) -> str:
        record = logging.LogRecord("lastword.access", logging.INFO, __file__, 1, "%s done", ("it",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        record.__dict__.update(extra)
        return formatter.format(record)

    assert line(1000.5, {"path": "/a", "_hidden": 1, "status": 204}) == (
        '{"ts":"1970-01-01T00:16:40.500Z","level":"info","logger":"lastword.access","message":"it done",'
        '"path":"/a","status":204}')
    assert line(1001.25, {"status": 200, "path": "/b"}) == (
        '{"ts":"1970-01-01T00:16:41.250Z","level":"info","logger":"lastword.access","message":"it done",'
        '"status":200,"path":"/b"}')
    assert line(1000.75, {}).startswith('{"ts":"1970-01-01T00:16:40.750Z"')
