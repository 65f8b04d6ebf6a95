"""The real agent CLIs, run now against the scripted model, through lastword (SPEC §16).

The fixtures of tests/cli_children were recorded from the pinned CLIs; these runs catch an
upgrade that changes what a CLI prints. They need the CLIs installed
(`cd tests/cli_children && npm install`, which `.ci/run` does); without them they skip and say so,
and `.ci/run` (LASTWORD_REQUIRE_CLIS=1) makes that a failure.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from tests.api_helpers import result, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run
from tests.cli_children.record import BIN, run_cli

MISSING = [name for name in ("claude", "codex", "opencode") if not (BIN / name).exists()]
if MISSING and os.environ.get("LASTWORD_REQUIRE_CLIS") == "1":
    raise RuntimeError(f"LASTWORD_REQUIRE_CLIS=1 but {', '.join(MISSING)} not installed under {BIN}")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(MISSING), reason=f"agent CLIs not installed ({BIN}): npm install there")]

PARTIAL = {"type": "text", "text": "This answer is cut off at the token ceil"}
CHECK = {"type": "text", "text": "I will check with a command."}
ANSWER = {"type": "text", "text": "The check could not run; the answer is 42."}

CASES: list[tuple[str, str, str, str, dict[str, Any]]] = [
    # (CLI as recorded, scenario, ingest format, stop reason, the output's first block)
    ("claude-code", "max_tokens_partial", "claude-code", "max_tokens", PARTIAL),
    ("claude-code-partial", "tool_then_empty_end_turn", "claude-code", "completed",
     {"type": "text", "text": "Let me run a command first."}),
    ("codex", "max_tokens_partial", "codex", "max_tokens", PARTIAL),
    ("opencode", "max_tokens_partial", "opencode", "max_tokens", PARTIAL),
    # SPEC §16a: a call cut by the ceiling is not output; opencode goes on after `length`;
    # Codex's text and its command are one message.
    ("claude-code", "tool_cut_at_ceiling", "claude-code", "completed", CHECK),
    ("claude-code-partial", "tool_cut_max_turns", "claude-code", "max_turns", CHECK),
    ("codex", "tool_then_empty_end_turn", "codex", "completed", {"type": "text", "text": "Let me run a command first."}),
    ("opencode", "tool_cut_then_step", "opencode", "completed", ANSWER),
    ("opencode-anthropic", "tool_cut_then_step", "opencode", "completed", ANSWER),
]


@pytest.mark.parametrize(("cli", "scenario", "format", "stop", "first"), CASES)
def test_a_live_cli_keeps_its_last_word(shared_api: httpx.Client, cli: str, scenario: str, format: str,  # noqa: F811
                                        stop: str, first: dict[str, Any]) -> None:
    stdout, _ = run_cli(cli, scenario)
    run_id = create_run(shared_api)
    response = shared_api.post(f"/v1/runs/{run_id}/ingest/{format}", content=stdout,
                               headers={"content-type": "application/x-ndjson"}, timeout=60)
    assert response.status_code == 200, response.text
    got = result(shared_api, run_id)
    assert got["stopReason"] == stop, got
    assert got["output"][0] == first, got["output"]
