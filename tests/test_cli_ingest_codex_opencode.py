"""Codex's and opencode's own output through ``POST …/ingest/{codex|opencode}`` (SPEC §16), over HTTP.

The adapters' every rule is pinned module-side (tests/test_cli_adapters_codex_opencode.py); here
the cases where the CLI's own answer loses the child's last word, end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import logged, of_type, result, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures"


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


CASES = [
    # Codex exits 1 with turn.failed; the partial text is the child's word, max_tokens its stop.
    ("codex", "max_tokens_partial", "max_tokens", "turn.failed", [text("This answer is cut off at the token ceil")]),
    ("codex", "codex_shell_then_final", "completed", "turn.completed", [text("The command printed hi.")]),
    ("codex", "codex_retry_repeat", "completed", "turn.completed", [text("This message is sent twice.")]),
    # opencode exits 0 with no error after a `length` stop: lastword says max_tokens.
    ("opencode", "max_tokens_partial", "max_tokens", "length", [text("This answer is cut off at the token ceil")]),
    ("opencode", "http_500_mid_run", "error", "error", [text("Running a command before the outage.")]),
    # Codex's text and the command it ran are one response: Codex's own last message, kept.
    ("codex", "tool_then_empty_end_turn", "completed", "turn.completed", [text("Let me run a command first.")]),
    ("codex", "text_then_command", "completed", "turn.completed", [text("The file says hi.")]),
    # opencode's cut call (`invalid`) ends its step `length`; it goes on with another step.
    ("opencode", "tool_cut_then_step", "completed", "stop", [text("The check could not run; the answer is 42.")]),
    ("opencode-anthropic", "tool_cut_then_step", "completed", "stop",
     [text("The check could not run; the answer is 42.")]),
]


@pytest.mark.parametrize(("format", "scenario", "stop", "provider", "output"), CASES)
def test_the_child_keeps_its_last_word(shared_api: httpx.Client, format: str, scenario: str, stop: str,  # noqa: F811
                                       provider: str, output: list[dict[str, Any]]) -> None:
    run_id = create_run(shared_api)
    data = (FIXTURES / format / f"{scenario}.ndjson").read_bytes()
    format = format.split("-")[0]  # opencode-anthropic: opencode through its Anthropic provider
    response = shared_api.post(f"/v1/runs/{run_id}/ingest/{format}", content=data,
                               headers={"content-type": "application/x-ndjson"})
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == stop and response.json()["providerStopReason"] == provider
    got = result(shared_api, run_id)
    assert got["stopReason"] == stop and [b for b in got["output"] if b["type"] == "text"] == output
    before = logged(shared_api, run_id)
    again = shared_api.post(f"/v1/runs/{run_id}/ingest/{format}", content=data,
                            headers={"content-type": "application/x-ndjson"})
    assert again.status_code == 200 and again.json()["accepted"] == 0
    assert logged(shared_api, run_id) == before


@pytest.mark.parametrize("cli", ["opencode", "opencode-anthropic"])
def test_opencode_a_cut_call_then_another_step(shared_api: httpx.Client, cli: str) -> None:  # noqa: F811
    """Every step is stored (no run_ended at the first `length`): the cut step's message is
    max_tokens without the call, and the turn ends once, with the last step's reason and usage."""
    run_id = create_run(shared_api)
    data = (FIXTURES / cli / "tool_cut_then_step.ndjson").read_bytes()
    response = shared_api.post(f"/v1/runs/{run_id}/ingest/opencode", content=data,
                               headers={"content-type": "application/x-ndjson"})
    assert response.status_code == 200, response.text
    messages = of_type(shared_api, run_id, "assistant/message")
    assert [event["message"]["stopReason"] for event in messages] == ["max_tokens", "completed"]
    assert messages[0]["message"]["content"] == [text("I will check with a command.")]
    finishes = [json.loads(line)["part"]["tokens"] for line in data.splitlines() if b'"step_finish"' in line]
    got = result(shared_api, run_id)
    assert got["stopReason"] == "completed"
    assert got["usage"]["inputTokens"] == sum(tokens["input"] for tokens in finishes)
    assert got["usage"]["outputTokens"] == sum(tokens["output"] + tokens["reasoning"] for tokens in finishes)


def test_codex_exec_resume_stores_its_second_turn(shared_api: httpx.Client) -> None:  # noqa: F811
    """`codex exec resume` in the run's next turn restarts its items at item_0: its lines are
    stored, not taken for the first turn's (no conflict, no duplicates claimed)."""
    run_id = create_run(shared_api, mode="continuable")
    first = (FIXTURES / "codex" / "resume.ndjson").read_bytes()
    second = (FIXTURES / "codex" / "resume.turn2.ndjson").read_bytes()
    headers = {"content-type": "application/x-ndjson"}
    assert shared_api.post(f"/v1/runs/{run_id}/ingest/codex", content=first, headers=headers).status_code == 200
    assert shared_api.post(f"/v1/runs/{run_id}/turns").status_code == 201
    response = shared_api.post(f"/v1/runs/{run_id}/ingest/codex", content=second, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["duplicates"] == 0 and response.json()["accepted"] > 0
    got = result(shared_api, run_id)
    assert got["turn"] == 2 and got["stopReason"] == "completed"
    assert got["output"] == [text("Second turn: still 42.")]
    usage = next(json.loads(line)["usage"] for line in second.splitlines() if b"turn.completed" in line)
    assert got["usage"]["outputTokens"] == usage["output_tokens"]
