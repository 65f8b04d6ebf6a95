"""Claude Code's own transcripts through ``POST …/ingest/claude-code-transcript`` (SPEC §19), over HTTP.

The bodies are what the real CLI wrote against a scripted model
(``tests/cli_children/record_transcripts.py``): its stdout, the session's transcript and the
subagent's. The subagent's reply is split by the output-token ceiling (``subagent_split``) or cut
at it every time (``subagent_cut``); the parent's tool result holds only the tail, and the
subagent's own text is never printed on stdout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_problem, ingested, logged, result, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run

pytestmark = pytest.mark.server

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures" / "claude-code-transcript"
SPLIT_WHOLE = "Report part one: the first half of the findings, cut and report part two, which completes the findings."
SPLIT_TAIL = " and report part two, which completes the findings."
CUT = "Report cut at the ceiling, every time"


def fixture(scenario: str, name: str) -> bytes:
    if name == "subagent":
        (path,) = (FIXTURES / scenario / "subagents").glob("agent-*.jsonl")
        return path.read_bytes()
    return (FIXTURES / scenario / name).read_bytes()


def meta(scenario: str) -> dict[str, Any]:
    (path,) = (FIXTURES / scenario / "subagents").glob("agent-*.meta.json")
    return dict(json.loads(path.read_text()))


def post(api: httpx.Client, run_id: str, data: bytes, format: str = "claude-code-transcript",
         **params: Any) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/ingest/{format}", content=data, params=params,
                    headers={"content-type": "application/x-ndjson"})


def stored(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return dict(response.json())


def texts(output: list[dict[str, Any]]) -> str:
    return "".join(block["text"] for block in output if block["type"] == "text")


def child_of(scenario: str, run_id: str) -> str:
    return f"{run_id}.{meta(scenario)['toolUseId']}"


@pytest.mark.parametrize("join", [True, False])
def test_split_subagent_reply_from_its_own_transcript(shared_api: httpx.Client, join: bool) -> None:
    """The stdout's tool result holds only the tail; the subagent's transcript holds both parts:
    answered whole with joinContinuations on the parent, as §5 answers it (the last part) without."""
    run_id = create_run(shared_api, selection={"joinContinuations": join})
    child = child_of("subagent_split", run_id)
    stored(post(shared_api, run_id, fixture("subagent_split", "subagent"), toolUseId=meta("subagent_split")["toolUseId"]))
    answer = result(shared_api, child)
    assert answer["stopReason"] == "completed"
    run = shared_api.get(f"/v1/runs/{child}").json()
    assert (run["parentRunId"], run["agent"]) == (run_id, "general-purpose")  # named by its replies
    assert texts(answer["output"]) == (SPLIT_WHOLE if join else SPLIT_TAIL)
    stored(post(shared_api, run_id, fixture("subagent_split", "stdout.ndjson"), format="claude-code"))
    assert result(shared_api, child)["output"] == answer["output"]  # the stdout's tail changes nothing
    # ...and the tool result the parent saw is the tail alone, logged on the run
    tool_results = [event for event in ingested(shared_api, run_id) if event["type"] == "tool/result"]
    assert texts(tool_results[0]["content"]).endswith(SPLIT_TAIL + "\n") or SPLIT_TAIL in texts(tool_results[0]["content"])
    assert SPLIT_WHOLE not in json.dumps(tool_results)
    assert result(shared_api, run_id)["output"] == [{"type": "text", "text": "The subagent's report is in."}]


def test_subagent_cut_every_time(shared_api: httpx.Client) -> None:
    """Cut at the ceiling four times, then the CLI's own error: max_tokens, the text it wrote."""
    run_id = create_run(shared_api)
    child = child_of("subagent_cut", run_id)
    stored(post(shared_api, run_id, fixture("subagent_cut", "subagent"), toolUseId=meta("subagent_cut")["toolUseId"]))
    answer = result(shared_api, child)
    assert answer["stopReason"] == "max_tokens"
    assert answer["output"] == [{"type": "text", "text": CUT}]
    assert "output token" in answer["error"]["message"]


def test_session_then_subagent_in_one_body_needs_no_tool_use_id(shared_api: httpx.Client) -> None:
    """The session's tool result names the agentId, so its transcript links the subagent's lines."""
    run_id = create_run(shared_api, selection={"joinContinuations": True})
    body = fixture("subagent_split", "session.jsonl") + fixture("subagent_split", "subagent")
    stored(post(shared_api, run_id, body))
    assert texts(result(shared_api, child_of("subagent_split", run_id))["output"]) == SPLIT_WHOLE
    run = shared_api.get(f"/v1/runs/{child_of('subagent_split', run_id)}").json()
    assert run["parentRunId"] == run_id and run["agent"] == "general-purpose"


def test_unlinked_subagent_is_refused_naming_its_line(shared_api: httpx.Client) -> None:
    run_id = create_run(shared_api)
    problem = assert_problem(post(shared_api, run_id, fixture("subagent_split", "subagent")), 422, "invalid_provider_event")
    assert "agentId" in json.dumps(problem)
    assert [item for item in logged(shared_api, run_id) if item["event"]["type"] != "subagent/start"] == []


@pytest.mark.parametrize("order", ["transcripts twice", "transcripts first", "stdout first"])
def test_nothing_is_stored_twice(shared_api: httpx.Client, order: str) -> None:
    """A transcript sent twice, or the same session's stdout before or after it, stores nothing
    twice. After the stdout ended the turns (the child's at its tool result, the run's at its
    result), a transcript that brings lines they do not hold is refused 409 ``run_ended`` and
    stores nothing: the subagent's transcript must come before its tool result (the hook's
    ``SubagentStop`` does)."""
    run_id = create_run(shared_api)
    child = child_of("subagent_split", run_id)
    tool_use_id = meta("subagent_split")["toolUseId"]
    sends: list[tuple[str, bytes, dict[str, Any], int]] = [
        ("claude-code-transcript", fixture("subagent_split", "subagent"), {"toolUseId": tool_use_id}, 200),
        ("claude-code-transcript", fixture("subagent_split", "session.jsonl"), {}, 200)]
    stdout: tuple[str, bytes, dict[str, Any], int] = ("claude-code", fixture("subagent_split", "stdout.ndjson"), {}, 200)
    refused = [(format, data, params, 409) for format, data, params, _ in sends]
    plan = {"transcripts twice": [*sends, *sends], "transcripts first": [*sends, stdout, *sends, stdout],
            "stdout first": [stdout, *refused, stdout]}[order]
    for format, data, params, status in plan:
        response = post(shared_api, run_id, data, format=format, **params)
        assert response.status_code == status, (format, response.text)
    for target in (run_id, child):
        ids = [event.get("eventId") for event in ingested(shared_api, target) if event.get("eventId")]
        assert len(ids) == len(set(ids)), target
    parent_messages = [event["message"]["id"] for event in ingested(shared_api, run_id)
                       if event["type"] == "assistant/message" and "id" in event["message"]]
    assert len(parent_messages) == 2  # the delegating reply and the final one, once each
    assert texts(result(shared_api, child)["output"]) == SPLIT_TAIL  # the run has no joinContinuations
    child_messages = [event for event in ingested(shared_api, child) if event["type"] == "assistant/message"]
    assert len(child_messages) == (1 if order == "stdout first" else 2)  # the tool result's, or its own two
    late = [event for event in ingested(shared_api, run_id) if event["type"] == "x-claude-code-late-subagent"]
    # the stdout's tool-result output for a child its transcript ended is kept on the run
    assert [event["event"]["type"] for event in late] == ([] if order != "transcripts first"
                                                          else ["assistant/message", "turn/end"])


def test_the_runs_usage_is_the_clis_total_when_the_transcripts_came_first(shared_api: httpx.Client) -> None:
    """The stdout's replies carry their usage as they began, the transcript's their final usage;
    whichever is stored, the run's usage is the CLI's total, as with the stdout alone (the
    remainder the stdout's result adds was counted again when the transcript's replies were the
    ones kept: seen after a ``lastword run`` whose stdout was sent again after a crash)."""
    alone = create_run(shared_api)
    stored(post(shared_api, alone, fixture("subagent_split", "stdout.ndjson"), format="claude-code"))
    run_id = create_run(shared_api)
    stored(post(shared_api, run_id, fixture("subagent_split", "subagent"), toolUseId=meta("subagent_split")["toolUseId"]))
    stored(post(shared_api, run_id, fixture("subagent_split", "session.jsonl")))
    stored(post(shared_api, run_id, fixture("subagent_split", "stdout.ndjson"), format="claude-code"))
    assert result(shared_api, run_id)["usage"] == result(shared_api, alone)["usage"]
