"""``GET /v1/runs/{runId}/result?include=texts`` (SPEC §19): every visible text of the turn, in
order, beside an unchanged ``output`` — for a child whose last message points back."""

from __future__ import annotations

import httpx

from tests.api_helpers import assert_problem, result, shared_api, shared_base_url
from tests.builders import chunk, create_run, message, tool_call, usage

__all__ = ["shared_api", "shared_base_url"]

POINTER = "The findings are in my prior message."


def test_texts_hold_each_text_of_the_turn_and_the_output_is_unchanged(shared_api: httpx.Client) -> None:
    run_id = create_run(shared_api)
    events = [chunk("Found "), chunk("two bugs."), message("Found two bugs.", tool_call()),
              {"type": "tool/result", "toolCallId": "call_1", "content": "ok"},
              message(POINTER), chunk("cut off mid-"), chunk("step")]
    assert shared_api.post(f"/v1/runs/{run_id}/events", json=events).status_code == 200
    plain = result(shared_api, run_id)
    assert "texts" not in plain
    with_texts = result(shared_api, run_id, include="texts")
    assert with_texts["texts"] == ["Found two bugs.", POINTER, "cut off mid-step"]
    assert with_texts["output"] == plain["output"] == [{"type": "text", "text": POINTER}]


def test_texts_are_the_asked_turns_only(shared_api: httpx.Client) -> None:
    """A continuable run's turn 1, read while turn 2 runs: turn 2's text is not in it."""
    run_id = create_run(shared_api, mode="continuable")
    shared_api.post(f"/v1/runs/{run_id}/events", json=[
        chunk("first turn"), message(usage=usage(1, 2), stopReason="max_tokens"),
        {"type": "turn/end", "stopReason": "max_tokens"}])
    assert shared_api.post(f"/v1/runs/{run_id}/turns").status_code == 201
    shared_api.post(f"/v1/runs/{run_id}/events", json=[message("second turn")])
    assert result(shared_api, run_id, turn=1, include="texts")["texts"] == ["first turn"]
    assert result(shared_api, run_id, include="texts")["texts"] == ["second turn"]


def test_an_unknown_include_is_refused(shared_api: httpx.Client) -> None:
    run_id = create_run(shared_api)
    assert_problem(shared_api.get(f"/v1/runs/{run_id}/result", params={"include": "everything"}), 422,
                   "validation_error")
