"""End to end, the failure lastword exists to prevent (SPEC §1): a child whose last step ends at
max-tokens with an empty, usage-only assistant message, watched live over SSE.

The ``max-tokens-partial`` scenario is played by the real ``lastword demo`` command into a run
that a real SSE client (httpx-sse) has subscribed to; then every reader must agree on the
child's partial answer: the result, the parent's tool result and the ``subagent/end`` event.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.sse import open_stream, payload

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]
PARTIAL = "Found three call sites of parse_config; two pass a path, one passes a dict."


def play(scenario: str, url: str, run_id: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LASTWORD_")}
    return subprocess.run(
        [sys.executable, "-m", "lastword.cli", "demo", scenario, "--url", url, "--run-id", run_id],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )


async def test_max_tokens_partial_end_to_end(client: httpx.AsyncClient, base_url: str) -> None:
    """The empty max-tokens message is logged, yet result, tool result and SSE end all keep the partial answer."""
    run_id = (await client.post("/v1/runs", json={"agent": "demo:max-tokens-partial"})).json()["runId"]
    async with open_stream(client, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
        snapshot = await stream.next()
        assert snapshot.event == "run/snapshot"
        played, streamed = await asyncio.gather(
            asyncio.to_thread(play, "max-tokens-partial", base_url, run_id),
            stream.until_closed(),
        )
    assert played.returncode == 0, played.stderr
    assert played.stdout.strip() == run_id

    # The durable log keeps the usage-only empty message ("model-visible ⟺ logged").
    page = (await client.get(f"/v1/runs/{run_id}/events", params={"limit": 1000})).json()
    messages = [entry["event"]["message"] for entry in page["events"] if entry["event"]["type"] == "assistant/message"]
    assert len(messages) == 2
    empty = messages[-1]
    assert empty["content"] == []
    assert empty["usage"] == {"inputTokens": 1400, "outputTokens": 4096}

    # The result is the earlier partial message's output, with the stop reason it ended with.
    result = (await client.get(f"/v1/runs/{run_id}/result")).json()
    assert result["output"] == messages[0]["content"]
    assert result["output"][0] == {"type": "text", "text": PARTIAL}
    assert result["stopReason"] == "max_tokens"
    assert result["isError"] is True
    # Its usage counts the empty message too: recording usage is why that message exists.
    assert result["usage"]["inputTokens"] == 1200 + empty["usage"]["inputTokens"]
    assert result["usage"]["outputTokens"] == 85 + empty["usage"]["outputTokens"]

    # The parent's tool result: an error, with a headline naming the stop reason, then the partial text.
    tool: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}/tool-result")).json()
    assert tool["isError"] is True
    (content,) = tool["content"]
    headline, rest = content["text"].split("\n\n", 1)
    assert "max_tokens" in headline and "\n" not in headline
    assert rest == PARTIAL

    # What the live subscriber saw: the streamed deltas, then subagent/end with the same output.
    assert [event.event for event in streamed][-1] == "subagent/end"
    deltas = [payload(event)["delta"] for event in streamed if event.event == "assistant/chunk"]
    assert "".join(delta["text"] for delta in deltas if delta["type"] == "text") == PARTIAL
    end = payload(streamed[-1])
    assert end["lastAssistantMessage"] == result["output"]
    assert (end["stopReason"], end["isError"], end["usage"]) == ("max_tokens", True, result["usage"])
