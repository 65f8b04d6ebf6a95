"""The lifecycle events (SPEC §8) and the result of a turn (SPEC §9), built from stored state.

These are the shapes every reader sees: the result endpoint, the ``subagent/end`` event in the
log and on both streams, and the tool result all come from here, fed with the output the fold
selected. Nothing here selects output.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lastword.rules.stop_reasons import StopReason, is_error

SUBAGENT_START = "subagent/start"
SUBAGENT_END = "subagent/end"
RUN_CLOSED = "run/closed"
LIFECYCLE_TYPES = frozenset({SUBAGENT_START, SUBAGENT_END, RUN_CLOSED})


def closes_run_stream(event_type: str, mode: str) -> bool:
    """Whether a run's SSE stream ends after this event: ``run/closed``, or the
    ``subagent/end`` of a oneshot run (it has no further turn to wait for).

    The service's stream and the client library's reader both ask this one function.
    """
    return event_type == RUN_CLOSED or (event_type == SUBAGENT_END and mode == "oneshot")


def rfc3339(epoch_seconds: float) -> str:
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _identity(run_id: str, parent_run_id: str | None, agent: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"runId": run_id}
    if parent_run_id is not None:
        body["parentRunId"] = parent_run_id
    if agent is not None:
        body["agent"] = agent
    return body


def start_event(
    run_id: str, parent_run_id: str | None, agent: str | None, turn: int, started_at: float
) -> dict[str, Any]:
    body = {"type": SUBAGENT_START, **_identity(run_id, parent_run_id, agent)}
    body.update(turn=turn, startedAt=rfc3339(started_at))
    return body


def end_event(
    run_id: str,
    parent_run_id: str | None,
    agent: str | None,
    turn: int,
    stop_reason: StopReason,
    output: list[dict[str, Any]],
    usage: dict[str, int],
    error: Any,
    ended_at: float,
) -> dict[str, Any]:
    body = {"type": SUBAGENT_END, **_identity(run_id, parent_run_id, agent)}
    body.update(turn=turn, stopReason=stop_reason, isError=is_error(stop_reason))
    # Absent, not [], when there is no output: consumers test for the key (SPEC §8).
    if output:
        body["lastAssistantMessage"] = output
    body["usage"] = usage
    if error is not None:
        body["error"] = error
    body["endedAt"] = rfc3339(ended_at)
    return body


def closed_event(run_id: str, parent_run_id: str | None, agent: str | None, at: float) -> dict[str, Any]:
    return {"type": RUN_CLOSED, **_identity(run_id, parent_run_id, agent), "closedAt": rfc3339(at)}
