"""A first end-to-end check that a real server answers the whole loop."""

import httpx


def test_create_append_end_result(api: httpx.Client) -> None:
    """A run created, fed one message and ended reports that message as its output."""
    run = api.post("/v1/runs", json={"agent": "a"}).json()
    message = {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "hi"}]}}
    assert api.post(f"/v1/runs/{run['runId']}/events", json=[message]).json()["accepted"] == 1
    api.post(f"/v1/runs/{run['runId']}/end", json={"stopReason": "end_turn"}).raise_for_status()
    result = api.get(f"/v1/runs/{run['runId']}/result").json()
    assert result["output"] == [{"type": "text", "text": "hi"}]
    assert result["stopReason"] == "completed"
