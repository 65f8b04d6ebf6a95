"""Runs over HTTP: creation, listing, the turn lifecycle, stop reasons, cascades and leases."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_problem, logged, of_type, result, shared_api, shared_base_url
from tests.builders import chunk, create_run, message, new_run, text
from tests.clock import ManualClock
from tests.servers import threaded_server

__all__ = ["shared_api", "shared_base_url"]  # fixtures, imported for pytest to find

ALIASES = {
    "completed": "completed", "max_tokens": "max_tokens", "max_turns": "max_turns",
    "refusal": "refusal", "cancelled": "cancelled", "error": "error", "timeout": "timeout",
    "end_turn": "completed", "stop": "completed", "stop_sequence": "completed",
    "complete": "completed", "success": "completed",
    "max_output_tokens": "max_tokens", "length": "max_tokens",
    "max_turn_requests": "max_turns", "content_filter": "refusal",
    "aborted": "cancelled", "abort": "cancelled", "canceled": "cancelled", "failed": "error",
    # Case is ignored and '-' is the same as '_'.
    "END-TURN": "completed", "Max-Output-Tokens": "max_tokens", "CANCELED": "cancelled",
    "Stop-Sequence": "completed", "Content-Filter": "refusal",
}


def uid(name: str) -> str:
    """A run id no other test on a shared server uses."""
    return f"{name}-{uuid.uuid4().hex[:10]}"


def post_events(api: httpx.Client, run_id: str, *events: dict[str, Any]) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/events", json=list(events))


def end(api: httpx.Client, run_id: str, stop_reason: str, **extra: Any) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/end", json={"stopReason": stop_reason, **extra})


# -- creating and reading runs ------------------------------------------------------------


def test_create_without_run_id_makes_one(shared_api: httpx.Client) -> None:
    """A run created with an empty body gets a service-made id and starts turn 1, running."""
    response = shared_api.post("/v1/runs")
    assert response.status_code == 201
    run = response.json()
    assert run["runId"]
    assert run["status"] == "running"
    assert run["turn"] == 1
    assert run["lastSeq"] == 1
    assert run["mode"] == "oneshot"
    assert run["metadata"] == {}
    assert shared_api.get(f"/v1/runs/{run['runId']}").json() == run


def test_service_made_ids_sort_in_creation_order(shared_api: httpx.Client) -> None:
    """Ids the service makes for runs created one after another sort in that order."""
    ids = [create_run(shared_api) for _ in range(40)]
    assert len(set(ids)) == len(ids)
    assert sorted(ids) == ids


def test_create_round_trips_every_field(shared_api: httpx.Client) -> None:
    """runId, parentRunId, agent, mode, metadata and leaseSeconds come back as sent."""
    body = {
        "runId": uid("child"), "parentRunId": uid("parent"), "agent": "researcher", "mode": "continuable",
        "metadata": {"task": "find", "depth": 2, "tags": ["a", "b"], "nested": {"x": None}},
        "leaseSeconds": 12.5,
    }
    run = new_run(shared_api, **body)
    fetched = shared_api.get(f"/v1/runs/{body['runId']}").json()
    for found in (run, fetched):
        assert {key: found[key] for key in body} == body
        assert found["status"] == "running"
        assert found["leaseExpiresAt"]


def test_create_is_idempotent_for_the_same_body(shared_api: httpx.Client) -> None:
    """Creating an existing runId with the same body answers 200 with the same run, once."""
    body = {"runId": uid("same"), "agent": "a", "metadata": {"k": 1}, "leaseSeconds": 30}
    first = new_run(shared_api, **body)
    again = shared_api.post("/v1/runs", json=body)
    assert again.status_code == 200
    assert again.json()["runId"] == body["runId"]
    assert again.json()["createdAt"] == first["createdAt"]
    assert len(of_type(shared_api, str(body["runId"]), "subagent/start")) == 1


def test_create_with_a_different_body_conflicts(shared_api: httpx.Client) -> None:
    """Creating an existing runId with another body is 409 run_exists, and the run is unchanged."""
    run_id = uid("taken")
    new_run(shared_api, runId=run_id, agent="a", metadata={"k": 1})
    for other in ({"agent": "b"}, {"agent": "a", "metadata": {"k": 2}}, {"agent": "a", "metadata": {"k": 1},
                                                                          "mode": "continuable"}):
        response = shared_api.post("/v1/runs", json={"runId": run_id, **other})
        assert assert_problem(response, 409, "run_exists")["runId"] == run_id
    run = shared_api.get(f"/v1/runs/{run_id}").json()
    assert (run["agent"], run["metadata"], run["mode"]) == ("a", {"k": 1}, "oneshot")


@pytest.mark.parametrize(
    "body",
    [{"mode": "forever"}, {"leaseSeconds": -1}, {"leaseSeconds": "10"}, {"metadata": [1]}, {"unknown": 1},
     {"agent": 5}, {"parentRunId": "has space"}],
)
def test_create_refuses_a_bad_body(shared_api: httpx.Client, body: dict[str, Any]) -> None:
    """A creation body that breaks the schema is 422 and creates nothing."""
    run_id = uid("bad")
    assert_problem(shared_api.post("/v1/runs", json={"runId": run_id, **body}), 422, "validation_error")
    assert_problem(shared_api.get(f"/v1/runs/{run_id}"), 404, "run_not_found")


@pytest.mark.parametrize("run_id", ["", "has space", "-dash-first", "x" * 201, 7])
def test_create_refuses_a_bad_run_id(shared_api: httpx.Client, run_id: Any) -> None:
    """A runId that is empty, too long, not a string or holds other characters is 422."""
    response = shared_api.post("/v1/runs", json={"runId": run_id})
    assert assert_problem(response, 422, "validation_error")["field"] == "runId"


def test_create_refuses_malformed_json(shared_api: httpx.Client) -> None:
    """A creation body that is not JSON is 400 malformed_json."""
    response = shared_api.post("/v1/runs", content=b"{runId: x}", headers={"content-type": "application/json"})
    assert_problem(response, 400, "malformed_json")


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", ""), ("GET", "/result"), ("GET", "/tool-result"), ("GET", "/events"),
     ("POST", "/events"), ("POST", "/chunks"), ("POST", "/end"), ("POST", "/turns"), ("POST", "/close")],
)
def test_unknown_run_is_404(shared_api: httpx.Client, method: str, path: str) -> None:
    """Every endpoint of a run answers an unknown runId with a 404 problem document."""
    bodies: dict[str, Any] = {
        "/events": {"json": chunk("x")},
        "/chunks": {"content": b"x", "headers": {"content-type": "text/plain"}},
        "/end": {"json": {"stopReason": "completed"}},
    }
    kwargs = bodies.get(path, {}) if method == "POST" else {}
    run_id = uid("nope")
    problem = assert_problem(shared_api.request(method, f"/v1/runs/{run_id}{path}", **kwargs), 404, "run_not_found")
    assert problem["runId"] == run_id


# -- listing ------------------------------------------------------------------------------


def test_list_is_newest_first(api: httpx.Client) -> None:
    """GET /v1/runs lists runs newest first, service-made and chosen ids alike."""
    made = [create_run(api, runId=f"r{i}") for i in range(3)] + [create_run(api)]
    assert [run["runId"] for run in api.get("/v1/runs").json()["runs"]] == made[::-1]


def test_list_filters_by_parent_status_and_agent(api: httpx.Client) -> None:
    """parentRunId, status and agent each narrow the list, and they combine."""
    new_run(api, runId="p", agent="boss")
    new_run(api, runId="c1", parentRunId="p", agent="x")
    new_run(api, runId="c2", parentRunId="p", agent="y")
    new_run(api, runId="c3", parentRunId="other", agent="x")
    new_run(api, runId="c4", parentRunId="p", agent="x", mode="continuable")
    assert end(api, "c2", "completed").status_code == 200
    assert end(api, "c4", "completed").status_code == 200

    def ids(**params: str) -> list[str]:
        response = api.get("/v1/runs", params=params)
        assert response.status_code == 200, response.text
        return [run["runId"] for run in response.json()["runs"]]

    assert ids(parentRunId="p") == ["c4", "c2", "c1"]
    assert ids(status="ended") == ["c2"]
    assert ids(status="idle") == ["c4"]
    assert ids(status="running") == ["c3", "c1", "p"]
    assert ids(agent="x") == ["c4", "c3", "c1"]
    assert ids(agent="x", parentRunId="p") == ["c4", "c1"]
    assert ids(parentRunId="p", status="running") == ["c1"]
    assert ids(agent="nobody") == []


@pytest.mark.parametrize("count", [8, 9])
def test_list_pages_without_overlap_or_gap(api: httpx.Client, count: int) -> None:
    """limit and nextCursor walk the whole list once, in order; only the last page has no nextCursor."""
    made = [create_run(api, runId=f"r{i:02}") for i in range(count)]
    pages: list[list[str]] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = api.get("/v1/runs", params=params).json()
        pages.append([run["runId"] for run in page["runs"]])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert [len(page) for page in pages] == [3, 3, count - 6]
    assert [run_id for page in pages for run_id in page] == made[::-1]


def test_list_pages_with_a_filter(api: httpx.Client) -> None:
    """Paging keeps the filter: every page holds only matching runs, none twice."""
    for i in range(7):
        new_run(api, runId=f"r{i}", agent="even" if i % 2 == 0 else "odd")
    first = api.get("/v1/runs", params={"agent": "even", "limit": 2}).json()
    second = api.get("/v1/runs", params={"agent": "even", "limit": 2, "cursor": first["nextCursor"]}).json()
    assert [run["runId"] for run in first["runs"] + second["runs"]] == ["r6", "r4", "r2", "r0"]


@pytest.mark.parametrize(
    "cursor",
    ["!!!", "abc", "not a cursor", base64.urlsafe_b64encode(b"99999999999999999999999999").decode(),
     base64.urlsafe_b64encode(b"-3").decode()],
)
def test_list_refuses_a_bad_cursor(shared_api: httpx.Client, cursor: str) -> None:
    """A cursor the service never gave out is 400 invalid_cursor."""
    assert_problem(shared_api.get("/v1/runs", params={"cursor": cursor}), 400, "invalid_cursor")


def test_list_filters_by_the_latest_turns_stop_reason(api: httpx.Client) -> None:
    """stopReason keeps runs whose latest turn ended with it (aliases were normalised at the end);
    a run whose latest turn is open, or ended otherwise, is left out, and paging keeps the filter."""
    new_run(api, runId="t1")
    new_run(api, runId="t2")
    new_run(api, runId="c1")
    new_run(api, runId="open")
    new_run(api, runId="again", mode="continuable")
    assert end(api, "t1", "max_output_tokens").status_code == 200
    assert end(api, "t2", "length").status_code == 200
    assert end(api, "c1", "canceled").status_code == 200
    assert end(api, "again", "max_tokens").status_code == 200
    assert api.post("/v1/runs/again/turns").status_code == 201  # its latest turn is open now

    def ids(**params: Any) -> list[str]:
        response = api.get("/v1/runs", params=params)
        assert response.status_code == 200, response.text
        return [run["runId"] for run in response.json()["runs"]]

    assert ids(stopReason="max_tokens") == ["t2", "t1"]
    assert ids(stopReason="cancelled") == ["c1"]
    assert ids(stopReason="completed") == []
    assert ids(stopReason="max_tokens", status="running") == []
    first = api.get("/v1/runs", params={"stopReason": "max_tokens", "limit": 1}).json()
    assert [run["runId"] for run in first["runs"]] == ["t2"]
    assert ids(stopReason="max_tokens", limit=1, cursor=first["nextCursor"]) == ["t1"]


def test_list_includes_each_runs_latest_turn_on_request(api: httpx.Client) -> None:
    """include=result adds the latest turn without its output: stop reason, isError, usage and
    error of an ended turn; an open turn says running and gives no usage; without it, no result."""
    new_run(api, runId="done")
    usage = {"inputTokens": 7, "outputTokens": 3}
    assert api.post("/v1/runs/done/events", json=[message("partial", usage=usage)]).status_code == 200
    assert api.post("/v1/runs/done/end", json={"stopReason": "error", "error": {"message": "boom"}}).status_code == 200
    new_run(api, runId="busy")
    assert api.post("/v1/runs/busy/events", json=[chunk("streaming")]).status_code == 200

    runs = {run["runId"]: run for run in api.get("/v1/runs", params={"include": "result"}).json()["runs"]}
    done = runs["done"]["result"]
    assert done["turn"] == 1 and done["status"] == "ended" and done["stopReason"] == "error"
    assert done["isError"] is True and done["error"] == {"message": "boom"}
    assert done["usage"] == {**usage, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    assert done["endedAt"] and done["startedAt"] and "output" not in done
    busy = runs["busy"]["result"]
    assert busy == {"runId": "busy", "turn": 1, "status": "running", "isError": False,
                    "startedAt": busy["startedAt"]}
    assert all("result" not in run for run in api.get("/v1/runs").json()["runs"])


@pytest.mark.parametrize("params", [{"stopReason": "length"}, {"stopReason": "nope"}, {"include": "output"}])
def test_list_refuses_a_stop_reason_or_include_it_does_not_know(shared_api: httpx.Client, params: dict[str, Any]) -> None:
    """stopReason takes the wire values only (the list shows normalised reasons); include only 'result'."""
    assert_problem(shared_api.get("/v1/runs", params=params), 422, "validation_error")


@pytest.mark.parametrize("params", [{"status": "sleeping"}, {"limit": 0}, {"limit": -1}, {"limit": "many"}])
def test_list_refuses_bad_parameters(shared_api: httpx.Client, params: dict[str, Any]) -> None:
    """An unknown status or a limit out of range is a 422 problem."""
    assert_problem(shared_api.get("/v1/runs", params=params), 422, "validation_error")


# -- the lifecycle ------------------------------------------------------------------------


def test_creation_logs_subagent_start(shared_api: httpx.Client) -> None:
    """The log of a new run opens with subagent/start for turn 1, naming the run, parent and agent."""
    run_id, parent = uid("kid"), uid("mum")
    new_run(shared_api, runId=run_id, parentRunId=parent, agent="helper")
    [first] = logged(shared_api, run_id)
    assert (first["seq"], first["turn"]) == (1, 1)
    start = first["event"]
    assert start["type"] == "subagent/start"
    assert {key: start[key] for key in ("runId", "parentRunId", "agent", "turn")} == {
        "runId": run_id, "parentRunId": parent, "agent": "helper", "turn": 1}
    assert start["startedAt"]


def test_end_by_post(shared_api: httpx.Client) -> None:
    """POST /end ends the turn: the result, the run's status and the logged subagent/end agree."""
    api = shared_api
    parent = uid("parent")
    run_id = create_run(api, agent="a", parentRunId=parent)
    post_events(api, run_id, message("answer", usage={"inputTokens": 3, "outputTokens": 4})).raise_for_status()
    response = end(api, run_id, "max_tokens", error={"message": "ran out"})
    assert response.status_code == 200
    ended = response.json()
    assert ended["status"] == "ended"
    assert ended["stopReason"] == "max_tokens"
    assert ended["isError"] is True
    assert ended["output"] == [text("answer")]
    assert ended["error"] == {"message": "ran out"}
    assert result(api, run_id) == ended
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "ended"
    [event] = of_type(api, run_id, "subagent/end")
    assert event["runId"] == run_id
    assert event["turn"] == 1
    assert event["stopReason"] == "max_tokens"
    assert event["isError"] is True
    assert event["lastAssistantMessage"] == ended["output"]
    assert event["usage"]["inputTokens"] == 3
    assert event["error"] == {"message": "ran out"}
    assert event["agent"] == "a"
    assert event["parentRunId"] == parent
    assert event["endedAt"]


def test_end_by_turn_end_event(shared_api: httpx.Client) -> None:
    """A turn/end event ends the turn like POST /end, logged before subagent/end."""
    api = shared_api
    run_id = create_run(api)
    turn_end = {"type": "turn/end", "stopReason": "end_turn", "error": {"message": "none really"}}
    response = post_events(api, run_id, message("done"), turn_end)
    assert response.status_code == 200
    assert response.json()["accepted"] == 2
    assert response.json()["lastSeq"] == 4
    types = [item["event"]["type"] for item in logged(api, run_id)]
    assert types == ["subagent/start", "assistant/message", "turn/end", "subagent/end"]
    ended = result(api, run_id)
    assert ended["status"] == "ended"
    assert ended["stopReason"] == "completed"
    assert ended["isError"] is False
    assert ended["output"] == [text("done")]
    assert ended["error"] == {"message": "none really"}
    assert of_type(api, run_id, "subagent/end")[0]["error"] == {"message": "none really"}
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "ended"


@pytest.mark.parametrize(("alias", "wire"), list(ALIASES.items()))
def test_stop_reason_aliases_are_normalised(shared_api: httpx.Client, alias: str, wire: str) -> None:
    """Every accepted stop reason alias ends a turn with its wire value, by POST /end and by turn/end."""
    by_post = create_run(shared_api)
    response = end(shared_api, by_post, alias)
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == wire
    assert response.json()["isError"] is (wire != "completed")
    assert of_type(shared_api, by_post, "subagent/end")[0]["stopReason"] == wire

    by_event = create_run(shared_api)
    post_events(shared_api, by_event, {"type": "turn/end", "stopReason": alias}).raise_for_status()
    assert result(shared_api, by_event)["stopReason"] == wire
    assert of_type(shared_api, by_event, "subagent/end")[0]["stopReason"] == wire


@pytest.mark.parametrize("stop_reason", ["finished", "", "max tokens", "completed!", "cancel", "end__turn"])
def test_unknown_stop_reason_is_refused(shared_api: httpx.Client, stop_reason: str) -> None:
    """A stop reason that is neither a wire value nor an alias is 422, by POST /end and by turn/end."""
    api = shared_api
    run_id = create_run(api)
    assert assert_problem(end(api, run_id, stop_reason), 422, "validation_error")["field"] == "stopReason"
    problem = assert_problem(
        post_events(api, run_id, chunk("a"), {"type": "turn/end", "stopReason": stop_reason}), 422, "invalid_event"
    )
    assert problem["index"] == 1
    assert problem["field"] == "stopReason"
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "running"
    assert len(logged(api, run_id)) == 1


def test_end_again_the_same_way_is_idempotent(shared_api: httpx.Client) -> None:
    """Ending an ended turn with the same stop reason answers the same result and logs nothing."""
    api = shared_api
    run_id = create_run(api)
    post_events(api, run_id, message("partial")).raise_for_status()
    first = end(api, run_id, "cancelled")
    again = end(api, run_id, "canceled")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(of_type(api, run_id, "subagent/end")) == 1


def test_end_again_another_way_conflicts(shared_api: httpx.Client) -> None:
    """Ending an ended turn with another stop reason is 409 carrying the real one, and changes nothing."""
    api = shared_api
    run_id = create_run(api)
    ended = end(api, run_id, "cancelled").json()
    log = logged(api, run_id)
    problem = assert_problem(end(api, run_id, "completed"), 409, "turn_already_ended")
    assert problem["stopReason"] == "cancelled"
    assert result(api, run_id) == ended
    assert logged(api, run_id) == log


def test_events_after_the_end_are_refused(shared_api: httpx.Client) -> None:
    """Events for an ended turn are 409 run_ended carrying the stop reason, and nothing is stored."""
    api = shared_api
    run_id = create_run(api)
    post_events(api, run_id, message("kept")).raise_for_status()
    end(api, run_id, "cancelled").raise_for_status()
    log = logged(api, run_id)
    problem = assert_problem(post_events(api, run_id, message("late")), 409, "run_ended")
    assert problem["stopReason"] == "cancelled"
    assert problem["runId"] == run_id
    problem = assert_problem(
        api.post(f"/v1/runs/{run_id}/chunks", content=b"late", headers={"content-type": "text/plain"}),
        409, "run_ended",
    )
    assert problem["stopReason"] == "cancelled"
    assert_problem(api.post(f"/v1/runs/{run_id}/chunks", json={"text": "late"}), 409, "run_ended")
    assert_problem(post_events(api, run_id, {"type": "turn/end", "stopReason": "cancelled"}), 409, "run_ended")
    assert logged(api, run_id) == log
    assert result(api, run_id)["output"] == [text("kept")]


@pytest.mark.parametrize("mode", ["oneshot", "continuable"])
def test_subagent_end_has_no_last_message_key_when_output_is_empty(shared_api: httpx.Client, mode: str) -> None:
    """subagent/end leaves lastAssistantMessage out (not []) when the output is empty, in either mode."""
    api = shared_api
    run_id = create_run(api, mode=mode)
    usage_only = message(usage={"inputTokens": 5, "outputTokens": 7})
    response = post_events(api, run_id, chunk("   "), usage_only, {"type": "turn/end", "stopReason": "max_tokens"})
    assert response.status_code == 200
    [event] = of_type(api, run_id, "subagent/end")
    assert "lastAssistantMessage" not in event
    assert event["usage"]["outputTokens"] == 7
    assert result(api, run_id)["output"] == []


def test_subagent_end_has_no_last_message_key_in_a_later_turn(shared_api: httpx.Client) -> None:
    """A continuable run's second turn with no output also leaves lastAssistantMessage out."""
    api = shared_api
    run_id = create_run(api, mode="continuable")
    post_events(api, run_id, message("first"), {"type": "turn/end", "stopReason": "completed"}).raise_for_status()
    api.post(f"/v1/runs/{run_id}/turns").raise_for_status()
    end(api, run_id, "cancelled").raise_for_status()
    first, second = of_type(api, run_id, "subagent/end")
    assert first["lastAssistantMessage"] == [text("first")]
    assert second["turn"] == 2
    assert "lastAssistantMessage" not in second


@pytest.mark.parametrize("mode", ["oneshot", "continuable"])
def test_subagent_end_carries_the_selected_output(shared_api: httpx.Client, mode: str) -> None:
    """subagent/end's lastAssistantMessage is the result's output, not a later usage-only message."""
    api = shared_api
    run_id = create_run(api, mode=mode)
    post_events(api, run_id, message("the answer"), message(usage={"inputTokens": 1, "outputTokens": 1}))
    end(api, run_id, "max_tokens").raise_for_status()
    [event] = of_type(api, run_id, "subagent/end")
    assert event["lastAssistantMessage"] == [text("the answer")]
    assert result(api, run_id)["output"] == event["lastAssistantMessage"]


# -- continuable runs ---------------------------------------------------------------------


def test_continuable_run_takes_further_turns(shared_api: httpx.Client) -> None:
    """A continuable run is idle after a turn; POST /turns starts turn 2 and turn 1's result stays served."""
    api = shared_api
    run_id = create_run(api, mode="continuable")
    post_events(api, run_id, message("first"), {"type": "turn/end", "stopReason": "completed"}).raise_for_status()
    idle = api.get(f"/v1/runs/{run_id}").json()
    assert idle["status"] == "idle"
    assert "leaseExpiresAt" not in idle

    response = api.post(f"/v1/runs/{run_id}/turns")
    assert response.status_code == 201
    assert response.json()["turn"] == 2
    assert response.json()["status"] == "running"
    assert [start["turn"] for start in of_type(api, run_id, "subagent/start")] == [1, 2]

    running = result(api, run_id)
    assert (running["turn"], running["status"], running["output"]) == (2, "running", [])

    post_events(api, run_id, message("second")).raise_for_status()
    end(api, run_id, "completed").raise_for_status()
    assert result(api, run_id)["output"] == [text("second")]
    first = result(api, run_id, turn=1)
    assert (first["turn"], first["stopReason"], first["output"]) == (1, "completed", [text("first")])
    assert [event["turn"] for event in of_type(api, run_id, "subagent/end")] == [1, 2]
    turns = [item["turn"] for item in logged(api, run_id) if item["event"]["type"] == "assistant/message"]
    assert turns == [1, 2]
    assert_problem(api.get(f"/v1/runs/{run_id}/result", params={"turn": 3}), 404, "turn_not_found")


def test_next_turn_is_refused_while_running_and_for_oneshot(shared_api: httpx.Client) -> None:
    """POST /turns is 409 while a turn is running, and for a oneshot run before or after its end."""
    api = shared_api
    continuable = create_run(api, mode="continuable")
    assert_problem(api.post(f"/v1/runs/{continuable}/turns"), 409, "run_running")
    oneshot = create_run(api)
    assert_problem(api.post(f"/v1/runs/{oneshot}/turns"), 409, "not_continuable")
    end(api, oneshot, "completed").raise_for_status()
    assert_problem(api.post(f"/v1/runs/{oneshot}/turns"), 409, "not_continuable")
    assert api.get(f"/v1/runs/{continuable}").json()["turn"] == 1
    assert len(of_type(api, continuable, "subagent/start")) == 1


def test_close_ends_an_idle_run_for_good(shared_api: httpx.Client) -> None:
    """Closing an idle continuable run ends it: no further turns, no events; closing again is harmless."""
    api = shared_api
    run_id = create_run(api, mode="continuable")
    end(api, run_id, "completed").raise_for_status()
    response = api.post(f"/v1/runs/{run_id}/close")
    assert response.status_code == 200
    assert response.json()["status"] == "ended"
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "ended"
    assert_problem(api.post(f"/v1/runs/{run_id}/turns"), 409, "run_ended")
    assert_problem(post_events(api, run_id, chunk("x")), 409, "run_ended")
    assert result(api, run_id)["stopReason"] == "completed"
    again = api.post(f"/v1/runs/{run_id}/close")
    assert again.status_code == 200
    assert again.json()["status"] == "ended"
    assert len(of_type(api, run_id, "subagent/end")) == 1


def test_close_cancels_a_running_turn(shared_api: httpx.Client) -> None:
    """Closing a continuable run mid-turn ends that turn as cancelled, keeping its output so far."""
    api = shared_api
    run_id = create_run(api, mode="continuable")
    post_events(api, run_id, chunk("half "), chunk("done")).raise_for_status()
    assert api.post(f"/v1/runs/{run_id}/close").json()["status"] == "ended"
    ended = result(api, run_id)
    assert (ended["status"], ended["stopReason"]) == ("ended", "cancelled")
    assert ended["output"] == [text("half done")]
    [event] = of_type(api, run_id, "subagent/end")
    assert event["stopReason"] == "cancelled"
    assert event["lastAssistantMessage"] == [text("half done")]
    assert_problem(api.post(f"/v1/runs/{run_id}/turns"), 409, "run_ended")


def test_close_is_refused_for_oneshot(shared_api: httpx.Client) -> None:
    """POST /close on a oneshot run is 409 and leaves the turn running."""
    run_id = create_run(shared_api)
    assert_problem(shared_api.post(f"/v1/runs/{run_id}/close"), 409, "not_continuable")
    assert shared_api.get(f"/v1/runs/{run_id}").json()["status"] == "running"


# -- parents and children -----------------------------------------------------------------


def test_ending_a_parent_leaves_children_alone(shared_api: httpx.Client) -> None:
    """A parent's end (or close) never ends its children's open turns."""
    api = shared_api
    parent = create_run(api, mode="continuable")
    child = create_run(api, parentRunId=parent)
    grandchild = create_run(api, parentRunId=child)
    end(api, parent, "cancelled").raise_for_status()
    api.post(f"/v1/runs/{parent}/close").raise_for_status()
    for run_id in (child, grandchild):
        assert api.get(f"/v1/runs/{run_id}").json()["status"] == "running"
        assert post_events(api, run_id, chunk("still here")).status_code == 200


def test_cascade_cancels_every_descendant(shared_api: httpx.Client) -> None:
    """End with cascade: true cancels the open turns of children and grandchildren, whatever sits between."""
    api = shared_api
    ids = {name: uid(name) for name in ("root", "child", "grandchild", "idle", "under-idle", "ended",
                                        "under-ended", "stranger")}
    new_run(api, runId=ids["root"])
    new_run(api, runId=ids["child"], parentRunId=ids["root"])
    new_run(api, runId=ids["grandchild"], parentRunId=ids["child"])
    new_run(api, runId=ids["idle"], parentRunId=ids["root"], mode="continuable")
    new_run(api, runId=ids["under-idle"], parentRunId=ids["idle"])
    new_run(api, runId=ids["ended"], parentRunId=ids["root"])
    new_run(api, runId=ids["under-ended"], parentRunId=ids["ended"])
    new_run(api, runId=ids["stranger"])
    post_events(api, ids["grandchild"], chunk("partial")).raise_for_status()
    end(api, ids["idle"], "completed").raise_for_status()
    end(api, ids["ended"], "completed").raise_for_status()

    response = end(api, ids["root"], "cancelled", cascade=True)
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == "cancelled"
    for name in ("child", "grandchild", "under-idle", "under-ended"):
        ended = result(api, ids[name])
        assert (ended["status"], ended["stopReason"]) == ("ended", "cancelled"), name
        assert len(of_type(api, ids[name], "subagent/end")) == 1
    assert result(api, ids["grandchild"])["output"] == [text("partial")]
    assert result(api, ids["idle"])["stopReason"] == "completed"
    assert api.get(f"/v1/runs/{ids['idle']}").json()["status"] == "idle"
    assert result(api, ids["ended"])["stopReason"] == "completed"
    assert api.get(f"/v1/runs/{ids['stranger']}").json()["status"] == "running"


def test_cascade_survives_a_parent_cycle(shared_api: httpx.Client) -> None:
    """Runs naming each other as parents do not make a cascading end loop forever."""
    a, b = uid("a"), uid("b")
    new_run(shared_api, runId=a, parentRunId=b)
    new_run(shared_api, runId=b, parentRunId=a)
    response = end(shared_api, a, "cancelled", cascade=True)
    assert response.status_code == 200
    assert result(shared_api, b)["stopReason"] == "cancelled"


# -- leases -------------------------------------------------------------------------------


@dataclass
class Leases:
    """A server whose time stands still until the test moves it: leases expire on ``advance``."""

    api: httpx.Client
    clock: ManualClock

    def advance(self, seconds: float) -> None:
        """Move the service's clock on, and return once a whole lease sweep has run at the new time."""
        self.clock.advance(seconds)
        # The sweep reads the clock once as it starts, and sweeps run one after the other: the
        # second read after the move starts a sweep that began after one at the new time ended.
        # Only the sweep's own reads count (the webhook sender reads the clock too).
        self.clock.wait_for_reads(2, by="lease sweep")


@pytest.fixture
def leases(make_settings: Any) -> Iterator[Leases]:
    """A server on a fresh database and a manual clock, sweeping for expired leases every 10 ms
    of real time (default lease 60 s of the clock's time)."""
    clock = ManualClock()
    settings = make_settings(sweep_interval_seconds=0.01, lease_seconds=60)
    with threaded_server(settings, clock) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield Leases(client, clock)


def status(api: httpx.Client, run_id: str) -> str:
    return str(api.get(f"/v1/runs/{run_id}").json()["status"])


def test_lease_expiry_ends_the_turn_as_timeout(leases: Leases) -> None:
    """A turn whose lease runs out ends as timeout with the output its fold selects, not before."""
    api = leases.api
    run_id = create_run(api, leaseSeconds=30)
    usage_only = message(usage={"inputTokens": 1, "outputTokens": 2})
    post_events(api, run_id, message("so far"), usage_only, chunk("after")).raise_for_status()
    leases.advance(29.9)
    assert status(api, run_id) == "running"
    leases.advance(0.2)
    ended = result(api, run_id)
    assert ended["status"] == "ended"
    assert ended["stopReason"] == "timeout"
    assert ended["isError"] is True
    assert ended["output"] == [text("so far")]
    assert ended["usage"]["outputTokens"] == 2
    [event] = of_type(api, run_id, "subagent/end")
    assert event["stopReason"] == "timeout"
    assert event["lastAssistantMessage"] == [text("so far")]
    assert status(api, run_id) == "ended"
    assert_problem(post_events(api, run_id, chunk("late")), 409, "run_ended")


def test_events_renew_the_lease(leases: Leases) -> None:
    """Each accepted event renews the lease: a producer that keeps reporting outlives it."""
    api = leases.api
    run_id = create_run(api, leaseSeconds=10)
    # Reporting every 6 s for 30 s: without renewal the turn would have timed out at 10 s,
    # and the next event would have been refused with 409.
    for sent in range(5):
        response = post_events(api, run_id, chunk(f"{sent} "))
        assert response.status_code == 200, response.text
        leases.advance(6)
        assert status(api, run_id) == "running"
    leases.advance(4.1)
    ended = result(api, run_id)
    assert ended["stopReason"] == "timeout"
    assert ended["output"][0]["text"].split() == [str(i) for i in range(5)]


def test_lease_zero_means_none(leases: Leases) -> None:
    """leaseSeconds 0 never times out, while a run on the default lease does."""
    api = leases.api
    forever = new_run(api, leaseSeconds=0)
    assert forever["leaseSeconds"] == 0
    assert "leaseExpiresAt" not in forever
    defaulted = new_run(api)
    assert defaulted["leaseSeconds"] == 60
    leases.advance(10**6)
    assert result(api, defaulted["runId"])["stopReason"] == "timeout"
    assert result(api, forever["runId"])["status"] == "running"
    assert status(api, forever["runId"]) == "running"


def test_idle_continuable_run_has_no_lease(leases: Leases) -> None:
    """A continuable run waiting between turns does not time out; its next turn gets a fresh lease."""
    api = leases.api
    run_id = create_run(api, mode="continuable", leaseSeconds=30)
    end(api, run_id, "completed").raise_for_status()
    leases.advance(10**6)
    assert status(api, run_id) == "idle"
    assert result(api, run_id, turn=1)["stopReason"] == "completed"
    api.post(f"/v1/runs/{run_id}/turns").raise_for_status()
    leases.advance(29.9)
    assert status(api, run_id) == "running"
    leases.advance(0.2)
    second = result(api, run_id)
    assert (second["turn"], second["stopReason"]) == (2, "timeout")
    assert status(api, run_id) == "idle"


def test_lease_expiry_leaves_children_alone(leases: Leases) -> None:
    """A parent whose lease runs out ends alone: its children keep running."""
    api = leases.api
    parent = create_run(api, leaseSeconds=20)
    child = create_run(api, parentRunId=parent, leaseSeconds=0)
    leases.advance(21)
    assert result(api, parent)["stopReason"] == "timeout"
    assert status(api, child) == "running"


def test_startup_sweep_ends_turns_that_expired_while_down(make_settings: Any) -> None:
    """Turns whose lease ran out while the service was down end as timeout, with their output, at start."""
    clock = ManualClock()
    settings = make_settings(sweep_interval_seconds=3600)
    with threaded_server(settings, clock) as url, httpx.Client(base_url=url, timeout=30) as api:
        with_message = new_run(api, leaseSeconds=30)
        usage_only = message(usage={"inputTokens": 2, "outputTokens": 3})
        post_events(api, with_message["runId"], message("kept"), usage_only, chunk("after")).raise_for_status()
        chunks_only = new_run(api, leaseSeconds=30)
        api.post(f"/v1/runs/{chunks_only['runId']}/chunks", content="streamed ✓".encode(),
                 headers={"content-type": "text/plain"}).raise_for_status()
        untouched = new_run(api, leaseSeconds=0)
        not_yet = new_run(api, leaseSeconds=120)
        assert result(api, with_message["runId"])["status"] == "running"
    # The leases run out while no server runs (the periodic sweep is an hour away: only the
    # start-up sweep can end them).
    clock.advance(60)
    with threaded_server(settings, clock) as url, httpx.Client(base_url=url, timeout=30) as api:
        first = result(api, with_message["runId"])
        assert first["stopReason"] == "timeout"
        assert first["output"] == [text("kept")]
        assert first["usage"]["outputTokens"] == 3
        second = result(api, chunks_only["runId"])
        assert second["stopReason"] == "timeout"
        assert second["output"] == [text("streamed ✓")]
        [event] = of_type(api, chunks_only["runId"], "subagent/end")
        assert event["lastAssistantMessage"] == second["output"]
        assert result(api, untouched["runId"])["status"] == "running"
        assert result(api, not_yet["runId"])["status"] == "running"
