"""``lastword run`` sends the CLI's own record at the child's exit (SPEC §19), with the real CLIs.

Claude Code runs headless against the scripted model server, wrapped in ``lastword run``, with no
hook configured: its subagent's reply is split by the output-token ceiling (``subagent_split``)
or cut at it every time (``subagent_cut``), the parent's tool result holds only the tail (or the
CLI's own error), and the subagent's text is never printed on stdout. ``lastword run`` finds the
transcripts from the ``init`` line and the child run ``{runId}.{tool_use_id}`` holds the
subagent's own messages.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import httpx
import pytest

from tests.api_helpers import ingested, result, shared_api, shared_base_url  # noqa: F401
from tests.cli_children.record import BIN, run_cli

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (BIN / "claude").exists(), reason=f"Claude Code not installed ({BIN})")]

PART_ONE = "Report part one: the first half of the findings, cut"
SPLIT_TAIL = " and report part two, which completes the findings."
CUT = "Report cut at the ceiling, every time"


def texts(content: list[dict[str, Any]]) -> str:
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


def wrapped(url: str, run_id: str) -> Any:
    def wrap(argv: list[str]) -> list[str]:
        return [sys.executable, "-m", "lastword.cli", "run", "--url", url, "--run-id", run_id, "--json", "--", *argv]
    return wrap


def run_wrapped(url: str, run_id: str, scenario: str) -> tuple[int, dict[str, Any]]:
    """``lastword run -- claude …`` (no hooks settings): its exit status and the run's details."""
    details: dict[str, Any] = {}
    _, status = run_cli("claude-code", scenario, details=details, wrap=wrapped(url, run_id))
    return status, details


def the_child(api: httpx.Client, run_id: str) -> str:
    """The subagent's child run ``{runId}.{tool_use_id}``."""
    children = api.get(f"/v1/runs/{run_id}/children").json()["children"]
    assert len(children) == 1, children
    return str(children[0]["runId"])


def child_messages(api: httpx.Client, child: str) -> list[dict[str, Any]]:
    return [event for event in ingested(api, child) if event["type"] == "assistant/message" and event["message"]["content"]]


def test_a_split_subagent_reply_is_its_own_in_the_child_run_with_no_hook(shared_api: httpx.Client,  # noqa: F811
                                                                          shared_base_url: str) -> None:  # noqa: F811
    run_id = f"wrapped-split-{uuid.uuid4().hex}"
    status, details = run_wrapped(shared_base_url, run_id, "subagent_split")
    assert status == 0, details["stderr"]
    assert b"not stored" not in details["stderr"], details["stderr"]
    child = the_child(shared_api, run_id)
    # the subagent's own two replies, the first cut by the ceiling: not the parent's tool result
    own = child_messages(shared_api, child)
    assert [texts(event["message"]["content"]) for event in own] == [PART_ONE, SPLIT_TAIL], details["stderr"]
    assert own[0]["message"]["stopReason"] == "max_tokens"
    assert all(event["source"]["format"] == "claude-code-transcript" for event in own)
    answer = result(shared_api, child)
    assert (answer["stopReason"], texts(answer["output"])) == ("completed", SPLIT_TAIL)
    # the tool result the parent was handed stays logged on the parent, and the parent answered
    parent = result(shared_api, run_id)
    assert parent["stopReason"] == "completed"
    assert texts(parent["output"]) == "The subagent's report is in."
    assert any(event["type"] == "tool/result" for event in ingested(shared_api, run_id))


def test_a_subagent_cut_every_time_ends_max_tokens_with_its_own_text(shared_api: httpx.Client,  # noqa: F811
                                                                     shared_base_url: str) -> None:  # noqa: F811
    run_id = f"wrapped-cut-{uuid.uuid4().hex}"
    status, details = run_wrapped(shared_base_url, run_id, "subagent_cut")
    assert status == 0, details["stderr"]
    answer = result(shared_api, the_child(shared_api, run_id))
    assert answer["stopReason"] == "max_tokens"
    assert answer["output"] == [{"type": "text", "text": CUT}]
