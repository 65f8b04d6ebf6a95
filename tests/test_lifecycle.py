"""The lifecycle events (lastword.rules.lifecycle): their exact shapes, and which ends a run stream."""

from __future__ import annotations

import pytest

from lastword.rules.lifecycle import closed_event, closes_run_stream, end_event, rfc3339, start_event

AT = 1764806400.25  # 2025-12-04T00:00:00.250Z


def test_times_are_rfc3339_in_utc_to_the_millisecond() -> None:
    assert rfc3339(AT) == "2025-12-04T00:00:00.250Z"
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_the_start_names_the_run_its_parent_and_agent_only_when_known() -> None:
    assert start_event("c", "p", "coder", 2, AT) == {
        "type": "subagent/start", "runId": "c", "parentRunId": "p", "agent": "coder", "turn": 2,
        "startedAt": "2025-12-04T00:00:00.250Z"}
    assert start_event("c", None, None, 1, AT) == {
        "type": "subagent/start", "runId": "c", "turn": 1, "startedAt": "2025-12-04T00:00:00.250Z"}


def test_the_end_carries_output_usage_and_error_as_given() -> None:
    output = [{"type": "text", "text": "partial"}]
    error = {"type": "timeout", "message": "lease expired"}
    assert end_event("c", "p", None, 1, "completed", output, {"inputTokens": 3, "outputTokens": 4}, None, AT) == {
        "type": "subagent/end", "runId": "c", "parentRunId": "p", "turn": 1, "stopReason": "completed",
        "isError": False, "lastAssistantMessage": output, "usage": {"inputTokens": 3, "outputTokens": 4},
        "endedAt": "2025-12-04T00:00:00.250Z"}
    # No output: the key is absent (consumers test for it, SPEC §8); an error is carried as given.
    assert end_event("c", None, "coder", 3, "timeout", [], {}, error, AT) == {
        "type": "subagent/end", "runId": "c", "agent": "coder", "turn": 3, "stopReason": "timeout",
        "isError": True, "usage": {}, "error": error, "endedAt": "2025-12-04T00:00:00.250Z"}


def test_the_close_names_the_run_and_when() -> None:
    assert closed_event("c", "p", "coder", AT) == {
        "type": "run/closed", "runId": "c", "parentRunId": "p", "agent": "coder", "closedAt": "2025-12-04T00:00:00.250Z"}


@pytest.mark.parametrize(("event_type", "mode", "closes"), [
    ("run/closed", "oneshot", True), ("run/closed", "continuable", True),
    ("subagent/end", "oneshot", True), ("subagent/end", "continuable", False),
    ("subagent/start", "oneshot", False), ("assistant/message", "oneshot", False),
])
def test_a_run_stream_ends_at_the_close_or_a_oneshot_runs_end(event_type: str, mode: str, closes: bool) -> None:
    assert closes_run_stream(event_type, mode) is closes
