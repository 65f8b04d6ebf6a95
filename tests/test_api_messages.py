"""``GET /v1/runs/{runId}/messages`` (SPEC §12) through a real server, on every backend."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from lastword.cli.demo import SCENARIOS, run_scenario

from tests.api_helpers import assert_problem, chunk, create, message, shared_api, shared_base_url, text
from tests.transcript_checks import CHECKS

__all__ = ["shared_api", "shared_base_url"]

PARTIAL = "Found three call sites of parse_config; two pass a path, one passes a dict."


def messages(api: httpx.Client, run_id: str, fmt: str, **params: Any) -> dict[str, Any]:
    response = api.get(f"/v1/runs/{run_id}/messages", params={"format": fmt, **params})
    assert response.status_code == 200, response.text
    body = dict(response.json())
    CHECKS[fmt](body["messages"])
    return body


def test_max_tokens_partial_demo_replays_its_partial_answer(shared_api: httpx.Client, shared_base_url: str) -> None:
    """The demo of SPEC §1: the usage-only message is omitted as empty, the partial answer kept."""
    run_id = run_scenario("max-tokens-partial", shared_base_url)
    anthropic = messages(shared_api, run_id, "anthropic")
    assert anthropic["format"] == "anthropic"
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]
    assert anthropic["messages"][1]["content"][0] == text(PARTIAL)
    empty_seq = next(
        item["seq"] for item in shared_api.get(f"/v1/runs/{run_id}/events").json()["events"]
        if item["event"].get("message", {}).get("id") == "msg_2"
    )
    assert anthropic["omitted"] == [{"runId": run_id, "seq": empty_seq, "reason": "empty"}]
    assert anthropic["inserted"] == [{"index": 0, "reason": "leading_assistant"}]
    openai = messages(shared_api, run_id, "openai")
    assert openai["messages"][0]["content"] == PARTIAL
    assert openai["messages"][1] == {"role": "tool", "tool_call_id": "call_1",
                                     "content": "def parse_config(source): ..."}
    assert "inserted" not in openai


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_demo_scenario_gives_a_valid_transcript(
    shared_api: httpx.Client, shared_base_url: str, scenario: str
) -> None:
    """Each scripted child's history is valid for both providers and replays its output."""
    run_id = run_scenario(scenario, shared_base_url)
    output = shared_api.get(f"/v1/runs/{run_id}/result").json()["output"]
    anthropic = messages(shared_api, run_id, "anthropic")
    messages(shared_api, run_id, "openai")
    replayed = [b for m in anthropic["messages"] if m["role"] == "assistant" for b in m["content"]]
    for block in output:
        if block["type"] == "text":
            assert text(block["text"]) in replayed


def test_turn_limits_the_history(shared_api: httpx.Client) -> None:
    """``?turn=N`` is the history up to the end of turn N; later turns are not in it."""
    run_id = create(shared_api, mode="continuable")["runId"]
    events = [{"type": "user/message", "message": {"content": "first question"}},
              message("first answer"), {"type": "turn/end", "stopReason": "end_turn"}]
    assert shared_api.post(f"/v1/runs/{run_id}/events", json=events).status_code == 200
    assert shared_api.post(f"/v1/runs/{run_id}/turns").status_code == 201
    events = [{"type": "user/message", "message": {"content": "second question"}}, chunk("second, streamed")]
    assert shared_api.post(f"/v1/runs/{run_id}/events", json=events).status_code == 200
    first = messages(shared_api, run_id, "openai", turn=1)["messages"]
    assert [m["content"] for m in first] == ["first question", "first answer"]
    whole = messages(shared_api, run_id, "openai")["messages"]
    assert [m["content"] for m in whole] == ["first question", "first answer", "second question", "second, streamed"]
    assert messages(shared_api, run_id, "openai", turn=2)["messages"] == whole


def test_bad_requests_are_problems(shared_api: httpx.Client) -> None:
    """Unknown run 404, unknown turn 404, a missing or unknown format 422."""
    assert_problem(shared_api.get("/v1/runs/nope/messages", params={"format": "openai"}), 404, "run_not_found")
    run_id = create(shared_api)["runId"]
    assert_problem(shared_api.get(f"/v1/runs/{run_id}/messages", params={"format": "openai", "turn": 2}),
                   404, "turn_not_found")
    assert_problem(shared_api.get(f"/v1/runs/{run_id}/messages"), 422, "validation_error")
    assert_problem(shared_api.get(f"/v1/runs/{run_id}/messages", params={"format": "gemini"}), 422, "validation_error")
    assert_problem(shared_api.get(f"/v1/runs/{run_id}/messages", params={"format": "openai", "turn": 0}),
                   422, "validation_error")


def test_a_long_history_is_read_whole(shared_api: httpx.Client) -> None:
    """Histories longer than one page of the log are read to the end."""
    run_id = create(shared_api)["runId"]
    events: list[dict[str, Any]] = []
    for index in range(3000):
        events.append({"type": "user/message", "message": {"content": f"q{index}"}})
        events.append(message(f"a{index}"))
    for start in range(0, len(events), 1000):
        assert shared_api.post(f"/v1/runs/{run_id}/events", json=events[start:start + 1000]).status_code == 200
    body = messages(shared_api, run_id, "openai")
    assert len(body["messages"]) == 6000
    assert body["messages"][-1] == {"role": "assistant", "content": "a2999"}


def test_tool_call_ids_a_provider_refuses_are_replaced_and_nameless_calls_left_out(shared_api: httpx.Client) -> None:
    """Ids logged as a CLI wrote them (``toolu.01``, 70 characters) are replaced by safe ones,
    the same in the call and its result and on every request, listed in ``inserted`` with the
    original; a call with an empty name and its result are listed as ``unnamed_tool_call``."""
    run_id = create(shared_api)["runId"]
    long_id = "call-" + "x" * 65
    events = [
        {"type": "user/message", "message": {"content": "look around"}},
        {"type": "assistant/message", "message": {"content": [
            {"type": "tool_call", "id": "toolu.01", "name": "ls", "input": {}},
            {"type": "tool_call", "id": long_id, "name": "cat", "input": {"path": "a"}},
            {"type": "tool_call", "id": "nameless", "name": "", "input": {}},
        ]}},
        {"type": "tool/result", "toolCallId": "toolu.01", "content": "a b"},
        {"type": "tool/result", "toolCallId": long_id, "content": "text of a"},
        {"type": "tool/result", "toolCallId": "nameless", "content": "?"},
        message("done"),
    ]
    assert shared_api.post(f"/v1/runs/{run_id}/events", json=events).status_code == 200
    seqs = [item["seq"] for item in shared_api.get(f"/v1/runs/{run_id}/events").json()["events"]
            if item["event"]["type"] in ("assistant/message", "tool/result")]
    for fmt in ("anthropic", "openai"):
        body = messages(shared_api, run_id, fmt)  # the SDK types and the id rule checked there
        assert body == messages(shared_api, run_id, fmt)
        replaced = {entry["original"]: entry["toolCallId"] for entry in body["inserted"]}
        assert set(replaced) == {"toolu.01", long_id}
        assert [entry["reason"] for entry in body["inserted"]] == ["unsafe_tool_call_id"] * 2
        assert [entry["index"] for entry in body["inserted"]] == [1, 1]
        assert body["omitted"] == [{"runId": run_id, "seq": seqs[0], "block": 2, "reason": "unnamed_tool_call"},
                                   {"runId": run_id, "seq": seqs[3], "reason": "unnamed_tool_call"}]
        if fmt == "openai":
            assert [call["id"] for call in body["messages"][1]["tool_calls"]] == list(replaced.values())
            assert [m["tool_call_id"] for m in body["messages"][2:4]] == list(replaced.values())
        else:
            assert [b["id"] for b in body["messages"][1]["content"]] == list(replaced.values())
            assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == list(replaced.values())
