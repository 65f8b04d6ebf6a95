"""``lastword demo SCENARIO --url URL``: each scripted child, run through the real command, ends
with the result SPEC §5 selects for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword.cli.demo import run_scenario
from lastword.client.core import LastwordAPIError

from tests.servers import free_port

REPO = Path(__file__).resolve().parents[1]

PARTIAL = "Found three call sites of parse_config; two pass a path, one passes a dict."

#: What each scenario's turn must end as: stop reason, output, usage (input, output tokens).
EXPECTED: dict[str, tuple[str, list[dict[str, Any]], tuple[int, int]]] = {
    "max-tokens-partial": (
        "max_tokens",
        [
            {"type": "text", "text": PARTIAL},
            {"type": "tool_call", "id": "call_1", "name": "read_file", "input": {"path": "app/config.py"}},
        ],
        (1200 + 1400, 85 + 4096),
    ),
    "cancelled-streaming": (
        "cancelled",
        [{"type": "text",
          "text": "Draft summary: the migration touches 4 tables and needs a backfill for users.email"}],
        (0, 0),
    ),
    "reasoning-only": (
        "completed",
        [{"type": "reasoning", "text": "The user wants the shortest path.", "signature": "sig-1"}],
        (300, 40),
    ),
    "completed": (
        "completed",
        [{"type": "text", "text": "The build fails because the lockfile pins an old resolver."}],
        (900, 25),
    ),
    # The same failure, told in the providers' own streams (SPEC §13).
    "anthropic-max-tokens": (
        "max_tokens",
        [
            {"type": "text", "text": PARTIAL},
            {"type": "tool_call", "id": "toolu_1", "name": "read_file", "input": {"path": "app/config.py"}},
        ],
        (1200 + 1400, 85 + 4096),
    ),
    "openai-incomplete": (
        "max_tokens",
        [
            {"type": "text", "text": PARTIAL},
            {"type": "tool_call", "id": "call_1", "name": "read_file", "input": {"path": "app/config.py"}},
        ],
        (1000 + 1200, 85 + 4096),  # uncached input: 200 of each were cached
    ),
    "acp-cancelled": (
        "cancelled",
        [{"type": "text",
          "text": "Draft summary: the migration touches 4 tables and needs a backfill for users.email"}],
        (0, 0),
    ),
}


def lastword(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``lastword`` command as a user would, in its own process."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LASTWORD_")}
    return subprocess.run(
        [sys.executable, "-m", "lastword.cli", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )


def demo(scenario: str, url: str, *extra: str) -> str:
    """Play ``scenario`` with the real command; the run id it prints."""
    done = lastword("demo", scenario, "--url", url, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_scenario_ends_with_the_result_the_rule_selects(
    api: httpx.Client, base_url: str, scenario: str
) -> None:
    """Every scenario's result has the stop reason, output and usage SPEC §5 gives its events."""
    run_id = demo(scenario, base_url)
    stop_reason, output, (input_tokens, output_tokens) = EXPECTED[scenario]
    result = api.get(f"/v1/runs/{run_id}/result").json()
    assert result["status"] == "ended"
    assert result["stopReason"] == stop_reason
    assert result["isError"] is (stop_reason != "completed")
    assert result["output"] == output
    assert (result["usage"]["inputTokens"], result["usage"]["outputTokens"]) == (input_tokens, output_tokens)
    run = api.get(f"/v1/runs/{run_id}").json()
    assert (run["agent"], run["status"]) == (f"demo:{scenario}", "ended")


def test_max_tokens_partial_logs_the_empty_message_and_reports_the_partial_answer(
    api: httpx.Client, base_url: str
) -> None:
    """The max-tokens scenario logs a usage-only empty message, yet the parent sees the partial text."""
    run_id = demo("max-tokens-partial", base_url)
    logged = [entry["event"] for entry in api.get(f"/v1/runs/{run_id}/events", params={"limit": 1000}).json()["events"]]
    messages = [event["message"] for event in logged if event["type"] == "assistant/message"]
    assert messages[-1]["content"] == []
    assert messages[-1]["usage"] == {"inputTokens": 1400, "outputTokens": 4096}
    tool = api.get(f"/v1/runs/{run_id}/tool-result").json()
    assert tool["isError"] is True
    headline, partial = tool["content"][0]["text"].split("\n\n")
    assert "max_tokens" in headline
    assert partial == PARTIAL


def test_cancelled_streaming_keeps_the_streamed_text_for_the_parent(api: httpx.Client, base_url: str) -> None:
    """A child cancelled with only chunk text reports that text, not an empty result."""
    run_id = demo("cancelled-streaming", base_url)
    tool = api.get(f"/v1/runs/{run_id}/tool-result").json()
    assert tool["isError"] is True
    assert tool["content"][0]["text"].endswith("\n\n" + EXPECTED["cancelled-streaming"][1][0]["text"])


def test_demo_plays_into_a_run_that_already_exists(api: httpx.Client, base_url: str) -> None:
    """With --run-id of an existing run, the demo plays into that run (so it can be watched first)."""
    created = api.post("/v1/runs", json={"runId": "watched-1", "agent": "watcher-made"})
    assert created.status_code == 201
    assert demo("completed", base_url, "--run-id", "watched-1") == "watched-1"
    result = api.get("/v1/runs/watched-1/result").json()
    assert result["output"] == EXPECTED["completed"][1]
    assert api.get("/v1/runs/watched-1").json()["agent"] == "watcher-made"


def test_demo_creates_a_run_id_it_is_given(api: httpx.Client, base_url: str) -> None:
    """With --run-id of a run that does not exist, the demo creates it under that id."""
    assert demo("reasoning-only", base_url, "--run-id", "chosen-1") == "chosen-1"
    assert api.get("/v1/runs/chosen-1/result").json()["output"] == EXPECTED["reasoning-only"][1]


def test_demo_failures_are_reported_without_a_traceback(api: httpx.Client, base_url: str) -> None:
    """An unreachable service (exit 8) or a refused request (exit 7) ends the command with a
    one-line message."""
    unreachable = lastword("demo", "completed", "--url", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 8
    assert "cannot reach" in unreachable.stderr and "Traceback" not in unreachable.stderr

    demo("completed", base_url, "--run-id", "over-1")
    refused = lastword("demo", "completed", "--url", base_url, "--run-id", "over-1")
    assert refused.returncode == 7
    assert "409" in refused.stderr and "run_ended" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_unknown_scenario_is_refused_with_the_list_of_scenarios() -> None:
    """An unknown scenario name exits with a usage error that lists the scenarios."""
    done = lastword("demo", "no-such-scenario", "--url", "http://127.0.0.1:1")
    assert done.returncode == 2
    assert all(name in done.stderr for name in EXPECTED)


def test_a_refused_scenario_raises_the_clients_error(base_url: str) -> None:
    """run_scenario talks through the client: playing into an ended run is a LastwordAPIError."""
    run_id = run_scenario("completed", base_url)
    with pytest.raises(LastwordAPIError) as refused:
        run_scenario("cancelled-streaming", base_url, run_id=run_id)
    assert (refused.value.status, refused.value.code) == (409, "run_ended")
