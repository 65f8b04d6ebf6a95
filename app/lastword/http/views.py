"""Records as the API shows them (camelCase, RFC 3339 times)."""

from __future__ import annotations

from typing import Any


from lastword.rules.fold import empty_usage
from lastword.rules.lifecycle import rfc3339
from lastword.rules.records import Delivery, RunRecord, StoredEvent, TurnRecord
from lastword.rules.stop_reasons import is_error


def run_view(run: RunRecord) -> dict[str, Any]:
    body: dict[str, Any] = {"runId": run.run_id}
    if run.parent_run_id is not None:
        body["parentRunId"] = run.parent_run_id
    if run.agent is not None:
        body["agent"] = run.agent
    body.update(
        mode=run.mode,
        metadata=run.metadata,
        leaseSeconds=run.lease_seconds,
        status=run.status,
        turn=run.turn,
        lastSeq=run.last_seq,
    )
    if run.fork_of is not None:
        body["forkOf"] = {"runId": run.fork_of[0], "afterSeq": run.fork_of[1]}
    if run.join_continuations is not None:
        body["selection"] = {"joinContinuations": run.join_continuations}
    if run.lease_expires_at is not None:
        body["leaseExpiresAt"] = rfc3339(run.lease_expires_at)
    body.update(createdAt=rfc3339(run.created_at), updatedAt=rfc3339(run.updated_at))
    return body


def result_view(turn: TurnRecord) -> dict[str, Any]:
    """The ``SubagentResult`` of one turn (running turns report the output selected so far)."""
    body: dict[str, Any] = {
        "runId": turn.run_id,
        "turn": turn.turn,
        "status": "ended" if turn.ended else "running",
    }
    if turn.stop_reason is not None:
        body["stopReason"] = turn.stop_reason
    body["isError"] = turn.stop_reason is not None and is_error(turn.stop_reason)
    body["output"] = turn.output
    body["usage"] = turn.usage or empty_usage()
    if turn.error is not None:
        body["error"] = turn.error
    body["startedAt"] = rfc3339(turn.started_at)
    if turn.ended_at is not None:
        body["endedAt"] = rfc3339(turn.ended_at)
    return body


def logged_event_view(event: StoredEvent) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "turn": event.turn,
        "receivedAt": rfc3339(event.received_at),
        "event": event.body,
    }


def turn_summary_view(turn: TurnRecord) -> dict[str, Any]:
    """A turn as a run list shows it: the result without its output (outputs can be large).

    ``usage`` is given for an ended turn only: an open turn's usage so far lives in its fold,
    which a list does not catch up (``GET …/result`` does).
    """
    body = result_view(turn)
    del body["output"]
    if not turn.ended:
        del body["usage"]
    return body


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery as ``GET …/deliveries`` shows it: never its URL's secret or the run's secret."""
    body: dict[str, Any] = {
        "webhookId": delivery.webhook_id,
        "turn": delivery.turn,
        "state": delivery.state,
        "attempts": delivery.attempts,
    }
    if delivery.last_status is not None:
        body["lastStatus"] = delivery.last_status
    if delivery.state == "pending" and delivery.next_attempt_at is not None:
        body["nextAttemptAt"] = rfc3339(delivery.next_attempt_at)
    return body
