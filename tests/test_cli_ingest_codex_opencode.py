"""Codex's and opencode's own output through ``POST …/ingest/{codex|opencode}`` (SPEC §16), over HTTP.

The adapters' every rule is pinned module-side (tests/test_cli_adapters_codex_opencode.py); here
the cases where the CLI's own answer loses the child's last word, end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import logged, result, shared_api, shared_base_url  # noqa: F401
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
]


@pytest.mark.parametrize(("format", "scenario", "stop", "provider", "output"), CASES)
def test_the_child_keeps_its_last_word(shared_api: httpx.Client, format: str, scenario: str, stop: str,  # noqa: F811
                                       provider: str, output: list[dict[str, Any]]) -> None:
    run_id = create_run(shared_api)
    data = (FIXTURES / format / f"{scenario}.ndjson").read_bytes()
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
