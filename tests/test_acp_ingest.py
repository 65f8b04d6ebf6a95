"""ACP v1 and v2 bodies through a real server, on both backends (SPEC §13).

The bodies are recorded with the protocol's own SDK (``tests/acp_v2/record.mjs``). What a parent
sees is asserted: the ingest answer, the result (output and stop reason by §5 and §6) and the
stored events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.api_helpers import assert_problem, ingested, result, shared_api, shared_base_url
from tests.provider_streams import BODIES, CONTENT_TYPES

__all__ = ["shared_api", "shared_base_url"]  # fixtures, imported for pytest to find

FIXTURES = Path(__file__).parent / "acp_v2" / "fixtures"


def recorded(name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text())
    return events


def post(api: httpx.Client, run_id: str, events: list[dict[str, Any]], framing: str = "ndjson",
         **params: Any) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/ingest/acp", params=params, content=BODIES[framing](events),
                    headers={"content-type": CONTENT_TYPES[framing]})


def new_run(api: httpx.Client) -> str:
    response = api.post("/v1/runs", json={"agent": "acp"})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["runId"])


def test_v2_turn_ends_at_the_idle_update_with_the_upserted_messages(shared_api: httpx.Client) -> None:
    run_id = new_run(shared_api)
    response = post(shared_api, run_id, recorded("v2-upserts"), framing="json")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["stopReason"] == "completed" and answer["providerStopReason"] == "end_turn"
    seen = result(shared_api, run_id)
    assert seen["stopReason"] == "completed"
    assert seen["output"] == [{"type": "text", "text": "The answer is 42."}]  # msg-2, replaced; msg-3 cleared
    events = ingested(shared_api, run_id)
    assert [event["message"]["content"] for event in events if event["type"] == "assistant/message"] == [
        [{"type": "text", "text": "Let me check."}], [{"type": "text", "text": "The answer is 42."}], []]
    calls = [event["toolCall"] for event in events if event["type"] == "x-acp-tool-call"]
    assert calls[-1]["status"] == "completed" and "title" not in calls[-1] and calls[-1]["rawOutput"] == 42
    assert events[-1]["type"] == "turn/end"


def test_v2_updates_after_the_turn_are_kept_and_a_retry_is_all_duplicates(shared_api: httpx.Client) -> None:
    run_id = new_run(shared_api)
    body = recorded("v2-background")
    first = post(shared_api, run_id, body, framing="sse")
    assert first.status_code == 200, first.text
    assert first.json()["stopReason"] == "completed"
    again = post(shared_api, run_id, body, framing="sse")
    assert again.status_code == 200, again.text
    assert again.json()["accepted"] == 0 and again.json()["duplicates"] == first.json()["accepted"]
    seen = result(shared_api, run_id)
    assert seen["output"] == [{"type": "text", "text": "Started a researcher; the answer is 42."}]
    assert seen["stopReason"] == "completed"
    types = [event["type"] for event in ingested(shared_api, run_id)]
    assert types[-4:] == ["x-acp-agent-message-chunk", "x-acp-tool-call", "x-acp-state-update", "turn/end"]
    assert types.count("turn/end") == 1


def test_v2_stop_reasons_and_a_custom_one(shared_api: httpx.Client) -> None:
    for name, stop_reason, provider in [("v2-max-tokens", "max_tokens", "max_tokens"), ("v2-error", "error", "error"),
                                        ("v2-edge", "error", "_handed_off")]:
        run_id = new_run(shared_api)
        response = post(shared_api, run_id, recorded(name))
        assert response.status_code == 200, response.text
        assert response.json()["stopReason"] == stop_reason and response.json()["providerStopReason"] == provider
        seen = result(shared_api, run_id)
        assert seen["stopReason"] == stop_reason and seen["output"]


def test_the_version_from_the_query_for_a_body_without_initialize(shared_api: httpx.Client) -> None:
    body = recorded("v2-basic")[2:]  # no initialize exchange
    run_id = new_run(shared_api)
    response = post(shared_api, run_id, body, acpVersion=2)
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == "completed"
    assert result(shared_api, run_id)["output"] == [{"type": "text", "text": "The answer is 42."}]
    # Read as v1 (the default), the same body leaves the turn open.
    run_id = new_run(shared_api)
    response = post(shared_api, run_id, body)
    assert response.status_code == 200, response.text
    assert "stopReason" not in response.json()
    assert "turn/end" not in [event["type"] for event in ingested(shared_api, run_id)]
    for bad in ("3", "0", "two"):
        run_id = new_run(shared_api)
        problem = assert_problem(post(shared_api, run_id, body, acpVersion=bad), 422, "validation_error")
        assert "acpVersion" in problem["detail"]
        assert ingested(shared_api, run_id) == []


def test_v1_body_ends_as_before(shared_api: httpx.Client) -> None:
    run_id = new_run(shared_api)
    body = recorded("v1-basic")
    response = post(shared_api, run_id, body, acpVersion=2)  # the body's initialize response says v1
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == "completed"
    seen = result(shared_api, run_id)
    assert seen["output"] == [{"type": "text", "text": "The answer is 42."}]
    assert seen["usage"]["inputTokens"] == 12 and seen["usage"]["outputTokens"] == 5
    refused = post(shared_api, new_run(shared_api), [*body, body[-2]])
    assert_problem(refused, 422, "invalid_provider_event")
