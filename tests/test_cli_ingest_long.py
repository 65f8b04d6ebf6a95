"""Long agent-CLI sessions through ``POST …/ingest/{format}`` (SPEC §16a), over HTTP, both backends.

A CLI body is bounded per line (``LASTWORD_MAX_LINE_BYTES``) and per event, never in total. The
servers here have tiny limits (an 8 KiB body limit; 600-byte lines) so that recorded sessions of
a few kilobytes are "long": each is what the real CLI printed (``tests/cli_children/fixtures``).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.api_helpers import assert_problem, logged, result, serving
from tests.builders import create_run
from tests.conftest import BACKENDS

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures"
MAX_BODY = 8192
MAX_LINE = 600
NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture(scope="module", params=BACKENDS)
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server whose body limit is smaller than a recorded session (an event may be as large)."""
    with serving(request.param, tmp_path_factory, max_body_bytes=MAX_BODY) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module", params=BACKENDS)
def short_lines(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server whose line limit is shorter than a recorded line."""
    with serving(request.param, tmp_path_factory, max_line_bytes=MAX_LINE) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        yield client


def fixture(format: str, scenario: str) -> bytes:
    return (FIXTURES / format / f"{scenario}.ndjson").read_bytes()


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    """The body cut into pieces of ``size`` bytes (each sent as it is made: a chunked body)."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# A session longer than the body limit (Claude Code, partial messages: a line a delta).
LONG = fixture("claude-code-partial", "max_tokens_partial")
# A session whose third line (index 2, a tool call) is longer than the line limit.
LONG_LINE = fixture("opencode", "subagent")


def test_the_fixtures_are_long_for_these_limits() -> None:
    assert len(LONG) > 3 * MAX_BODY
    lengths = [len(line) for line in LONG_LINE.splitlines()]
    assert lengths[2] > MAX_LINE and max(lengths[:2]) <= MAX_LINE


@pytest.mark.parametrize("how", ["whole", "gzip", "in 7-byte pieces"])
def test_a_session_over_the_body_limit_is_taken_whole(api: httpx.Client, how: str) -> None:
    """No total limit on a CLI's NDJSON output: every line is stored and the turn ends as printed."""
    run_id = create_run(api)
    headers = dict(NDJSON)
    content: bytes | Iterator[bytes] = LONG
    if how == "gzip":
        content, headers["content-encoding"] = gzip.compress(LONG), "gzip"
    elif how != "whole":
        content = pieces(LONG, 7)
    response = api.post(f"/v1/runs/{run_id}/ingest/claude-code", content=content, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == "max_tokens" and response.json()["providerStopReason"] == "success"
    got = result(api, run_id)
    assert got["status"] == "ended" and got["stopReason"] == "max_tokens"
    assert got["output"] == [text("This answer is cut off at the token ceil")]


def test_other_bodies_keep_the_body_limit(api: httpx.Client) -> None:
    """The line limit is the CLI's NDJSON alone: /events NDJSON and a CLI's JSON array keep the total."""
    run_id = create_run(api)
    events = b"".join(b'{"type": "assistant/chunk", "delta": {"type": "text", "text": "%d"}}\n' % n for n in range(200))
    assert len(events) > MAX_BODY
    assert_problem(api.post(f"/v1/runs/{run_id}/events", content=events, headers=NDJSON), 413, "payload_too_large")
    array = b"[" + b",".join(LONG.splitlines()) + b"]"
    assert_problem(api.post(f"/v1/runs/{run_id}/ingest/claude-code", content=array,
                            headers={"content-type": "application/json"}), 413, "payload_too_large")


@pytest.mark.parametrize("size", [len(LONG_LINE), 5])
def test_a_line_over_the_line_limit_is_refused_naming_it(short_lines: httpx.Client, size: int) -> None:
    """413 line_too_large naming the line's index, whether it came whole or a few bytes at a
    time (then it is refused before its end arrives)."""
    api = short_lines
    run_id = create_run(api)
    response = api.post(f"/v1/runs/{run_id}/ingest/opencode", content=pieces(LONG_LINE, size), headers=NDJSON)
    problem = assert_problem(response, 413, "line_too_large")
    assert problem["index"] == 2 and problem["limit"] == MAX_LINE
    assert "line 2" in problem["detail"]
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "running"
    assert all(item["event"]["type"] != "turn/end" for item in logged(api, run_id))


def test_what_the_lines_before_a_too_long_line_assembled_is_stored(short_lines: httpx.Client) -> None:
    """The step being built when its tool call's line is refused keeps its text (SPEC §16a)."""
    api = short_lines
    run_id = create_run(api)
    response = api.post(f"/v1/runs/{run_id}/ingest/opencode", content=LONG_LINE, headers=NDJSON)
    assert_problem(response, 413, "line_too_large")
    said = orjson.loads(LONG_LINE.splitlines()[1])["part"]["text"]
    assert result(api, run_id)["output"] == [text(said)]
