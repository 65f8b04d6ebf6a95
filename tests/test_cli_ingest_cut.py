"""Nothing assembled is lost to a bad or cut line (SPEC §16a), through ``POST …/ingest/{format}``
over HTTP, both backends.

Each body is what the real CLI printed (``tests/cli_children/fixtures``), cut inside a line or
with a line that cannot be read put where a message is still being assembled from the lines
before it: the refusal names that line, and the message assembled so far is stored first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_problem, logged, result, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures"
NDJSON = {"content-type": "application/x-ndjson"}
TOOL = {"type": "tool_call", "name": "Bash", "input": {"command": "echo hi", "description": "Print hi"}}


def lines(format: str, scenario: str) -> list[bytes]:
    return (FIXTURES / format / f"{scenario}.ndjson").read_bytes().splitlines(keepends=True)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def ingest(api: httpx.Client, run_id: str, format: str, data: bytes) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/ingest/{format}", content=data, headers=NDJSON)


def messages(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return [item["event"] for item in logged(api, run_id) if item["event"]["type"] == "assistant/message"]


# Claude Code prints a reply a block a line: its text (line 1), then its tool call (line 2).
CLAUDE = lines("claude-code", "tool_then_empty_end_turn")
# opencode prints a step's parts, then its step_finish: step_start (0), text (1), tool_use (2), …
OPENCODE = lines("opencode", "tool_then_empty_end_turn")


# What line 1 of each said: the text of the reply being built when line 2 is cut.
SAID = {"claude-code": json.loads(CLAUDE[1])["message"]["content"][0]["text"],
        "opencode": json.loads(OPENCODE[1])["part"]["text"]}


@pytest.mark.parametrize(("format", "body"), [("claude-code", CLAUDE), ("opencode", OPENCODE)])
def test_a_body_ending_inside_a_line_stores_the_message_being_built(
        shared_api: httpx.Client, format: str, body: list[bytes]) -> None:  # noqa: F811
    """A child killed while printing line 2: 400 naming line 2, and the reply its earlier lines
    assembled is stored (and selected) first."""
    run_id = create_run(shared_api)
    cut = b"".join(body[:2]) + body[2][: len(body[2]) // 2]
    problem = assert_problem(ingest(shared_api, run_id, format, cut), 400, "malformed_json")
    assert problem["index"] == 2
    stored = messages(shared_api, run_id)
    assert len(stored) == 1 and stored[0]["eventId"].endswith(":cut2")
    got = result(shared_api, run_id)
    assert got["status"] == "running"
    assert got["output"] == [text(SAID[format])]


@pytest.mark.parametrize(("bad", "status", "code"), [
    (b"{not json\n", 400, "malformed_json"),
    (b'{"type": "assistant", "message": {"id": "m", "content": "not blocks"}}\n', 422, "invalid_provider_event"),
])
def test_a_bad_line_inside_a_message_stores_what_was_assembled(shared_api: httpx.Client, bad: bytes,  # noqa: F811
                                                               status: int, code: str) -> None:
    """The reply's text is stored at the bad line; the body sent again, mended, stores the whole
    reply beside it (no clash of ids) and the turn ends with it selected."""
    run_id = create_run(shared_api)
    problem = assert_problem(ingest(shared_api, run_id, "claude-code", b"".join([*CLAUDE[:2], bad, *CLAUDE[2:]])),
                             status, code)
    assert problem["index"] == 2
    assert [message["message"]["content"] for message in messages(shared_api, run_id)] == [
        [text("Let me run a command first.")]]
    again = ingest(shared_api, run_id, "claude-code", b"".join(CLAUDE))
    assert again.status_code == 200, again.text
    assert again.json()["stopReason"] == "completed"
    got = result(shared_api, run_id)
    assert [{k: v for k, v in block.items() if k != "id"} for block in got["output"]] == [
        text("Let me run a command first."), TOOL]


def test_a_body_ending_after_a_whole_line_stores_its_message_as_usual(shared_api: httpx.Client) -> None:  # noqa: F811
    """Not a cut: a body that ends where a line ends makes the message at its end, under its own id."""
    run_id = create_run(shared_api)
    response = ingest(shared_api, run_id, "claude-code", b"".join(CLAUDE[:2]))
    assert response.status_code == 200, response.text
    assert [message["eventId"].endswith(":cut2") for message in messages(shared_api, run_id)] == [False]
