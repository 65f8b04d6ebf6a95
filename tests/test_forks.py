"""Forks by sequence number (SPEC §12) through a real server, on every backend."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api_helpers import assert_problem, chunk, create, logged, message, shared_api, shared_base_url
from tests.clock import ManualClock
from tests.servers import threaded_server
from tests.test_retention import RETENTION_HOURS, _pass, _retention_settings
from tests.transcript_checks import CHECKS

__all__ = ["shared_api", "shared_base_url"]


def push(api: httpx.Client, run_id: str, *events: dict[str, Any]) -> int:
    response = api.post(f"/v1/runs/{run_id}/events", json=list(events))
    assert response.status_code == 200, response.text
    return int(response.json()["lastSeq"])


def ask(text: str) -> dict[str, Any]:
    return {"type": "user/message", "message": {"content": text}}


def contents(api: httpx.Client, run_id: str, **params: Any) -> list[Any]:
    """The fork's OpenAI transcript as (role, content) pairs, checked against every invariant."""
    response = api.get(f"/v1/runs/{run_id}/messages", params={"format": "openai", **params})
    assert response.status_code == 200, response.text
    messages = response.json()["messages"]
    CHECKS["openai"](messages)
    anthropic = api.get(f"/v1/runs/{run_id}/messages", params={"format": "anthropic", **params})
    CHECKS["anthropic"](anthropic.json()["messages"])
    return [(m["role"], m["content"]) for m in messages]


def fork(api: httpx.Client, parent: str, after_seq: int, **body: Any) -> dict[str, Any]:
    return create(api, forkOf={"runId": parent, "afterSeq": after_seq}, **body)


def test_fork_inherits_history_to_the_boundary_and_numbers_on_from_it(shared_api: httpx.Client) -> None:
    """/messages is the parent's history up to afterSeq, then the fork's own; /events only its own."""
    parent = create(shared_api)["runId"]
    boundary = push(shared_api, parent, ask("first"), message("answer one"))
    push(shared_api, parent, ask("second"), message("answer two"))
    child = fork(shared_api, parent, boundary, agent="forked")
    assert child["forkOf"] == {"runId": parent, "afterSeq": boundary}
    assert child["lastSeq"] == boundary + 1
    push(shared_api, child["runId"], ask("another way"), message("fork answer"))
    own = logged(shared_api, child["runId"])
    assert [item["seq"] for item in own] == [boundary + 1, boundary + 2, boundary + 3]
    assert own[0]["event"]["type"] == "subagent/start"
    assert contents(shared_api, child["runId"]) == [
        ("user", "first"), ("assistant", "answer one"), ("user", "another way"), ("assistant", "fork answer")]
    omitted = shared_api.get(f"/v1/runs/{child['runId']}/messages", params={"format": "openai"}).json()["omitted"]
    assert omitted == []
    # The fork's output is selected from its own turn only.
    ended = shared_api.post(f"/v1/runs/{child['runId']}/end", json={"stopReason": "completed"}).json()
    assert ended["output"] == [{"type": "text", "text": "fork answer"}]


def test_omitted_names_the_run_that_logged_the_event(shared_api: httpx.Client) -> None:
    """An inherited event left out is named by its parent's runId and seq."""
    parent = create(shared_api)["runId"]
    seq = push(shared_api, parent, ask("q"), message("a"), message())
    child = fork(shared_api, parent, seq)["runId"]
    body = shared_api.get(f"/v1/runs/{child}/messages", params={"format": "anthropic"}).json()
    assert body["omitted"] == [{"runId": parent, "seq": seq, "reason": "empty"}]


def test_boundary_at_a_lifecycle_event(shared_api: httpx.Client) -> None:
    """afterSeq may name a lifecycle event (a turn's end): the boundary is the number itself."""
    parent = create(shared_api, mode="continuable")["runId"]
    push(shared_api, parent, ask("one"), chunk("streamed one"))
    ended_at = push(shared_api, parent, {"type": "turn/end", "stopReason": "cancelled"})
    assert logged(shared_api, parent)[-1]["event"]["type"] == "subagent/end"
    shared_api.post(f"/v1/runs/{parent}/turns").raise_for_status()
    push(shared_api, parent, ask("two"), message("two answered"))
    child = fork(shared_api, parent, ended_at)["runId"]
    assert contents(shared_api, child) == [("user", "one"), ("assistant", "streamed one")]
    at_start = fork(shared_api, parent, 1)["runId"]  # subagent/start of turn 1: nothing of note yet
    assert contents(shared_api, at_start) == []
    assert logged(shared_api, at_start)[0]["seq"] == 2


def test_boundary_inside_a_turn_cuts_its_streamed_text(shared_api: httpx.Client) -> None:
    """A boundary in the middle of a chunk-only turn inherits the text streamed before it."""
    parent = create(shared_api)["runId"]
    boundary = push(shared_api, parent, ask("q"), chunk("half "), chunk("of it"))
    push(shared_api, parent, chunk(" and more"))
    child = fork(shared_api, parent, boundary)["runId"]
    assert contents(shared_api, child) == [("user", "q"), ("assistant", "half of it")]


def test_parent_going_on_after_the_fork_changes_nothing(shared_api: httpx.Client) -> None:
    """Events the parent logs after the fork are not in the fork's history."""
    parent = create(shared_api)["runId"]
    boundary = push(shared_api, parent, ask("q"), message("a"))
    child = fork(shared_api, parent, boundary)["runId"]
    before = contents(shared_api, child)
    push(shared_api, parent, ask("later"), message("parent went on"))
    shared_api.post(f"/v1/runs/{parent}/end", json={"stopReason": "completed"}).raise_for_status()
    assert contents(shared_api, child) == before == [("user", "q"), ("assistant", "a")]


def test_fork_of_a_fork_inherits_along_the_chain(shared_api: httpx.Client) -> None:
    """A grandchild inherits its parent's inherited history up to its boundary, then the parent's own."""
    root = create(shared_api)["runId"]
    root_seq = push(shared_api, root, ask("root q"), message("root a"))
    push(shared_api, root, message("root after"))
    middle = fork(shared_api, root, root_seq)["runId"]
    middle_seq = push(shared_api, middle, ask("middle q"), message("middle a"))
    push(shared_api, middle, message("middle after"))
    leaf = fork(shared_api, middle, middle_seq)
    assert leaf["lastSeq"] == middle_seq + 1
    push(shared_api, leaf["runId"], ask("leaf q"))
    assert contents(shared_api, leaf["runId"]) == [
        ("user", "root q"), ("assistant", "root a"), ("user", "middle q"), ("assistant", "middle a"),
        ("user", "leaf q")]
    # A boundary inside the middle run's inheritance takes only that part of it.
    early = fork(shared_api, middle, root_seq - 1)["runId"]
    assert contents(shared_api, early) == [("user", "root q")]


def test_after_seq_zero_inherits_nothing(shared_api: httpx.Client) -> None:
    """afterSeq 0: the fork is numbered from 1 and its history is its own."""
    parent = create(shared_api)["runId"]
    push(shared_api, parent, ask("q"))
    child = fork(shared_api, parent, 0)
    assert child["lastSeq"] == 1
    assert contents(shared_api, child["runId"]) == []


def test_bad_forks_are_refused_and_create_nothing(shared_api: httpx.Client) -> None:
    """Unknown parent 404 fork_parent_not_found; afterSeq past the end 422; nothing is created."""
    answer = shared_api.post("/v1/runs", json={"runId": "f-unknown", "forkOf": {"runId": "nope", "afterSeq": 0}})
    assert_problem(answer, 404, "fork_parent_not_found")
    assert shared_api.get("/v1/runs/f-unknown").status_code == 404
    parent = create(shared_api)
    answer = shared_api.post("/v1/runs", json={"runId": "f-past", "forkOf": {"runId": parent["runId"],
                                                                           "afterSeq": parent["lastSeq"] + 1}})
    assert_problem(answer, 422, "fork_after_seq_out_of_range")
    assert shared_api.get("/v1/runs/f-past").status_code == 404
    answer = shared_api.post("/v1/runs", json={"runId": "f-self", "forkOf": {"runId": "f-self", "afterSeq": 0}})
    assert_problem(answer, 404, "fork_parent_not_found")
    for bad in ({"runId": parent["runId"]}, {"runId": parent["runId"], "afterSeq": -1},
                {"runId": parent["runId"], "afterSeq": "1"}, {"runId": parent["runId"], "afterSeq": 0, "x": 1}):
        assert_problem(shared_api.post("/v1/runs", json={"forkOf": bad}), 422, "validation_error")


def test_repeated_fork_create_is_idempotent(shared_api: httpx.Client) -> None:
    """The same fork body again answers the run (200); another boundary is 409."""
    parent = create(shared_api)["runId"]
    seq = push(shared_api, parent, ask("q"))
    body = {"runId": f"fork-of-{parent}", "forkOf": {"runId": parent, "afterSeq": seq}}
    assert shared_api.post("/v1/runs", json=body).status_code == 201
    push(shared_api, parent, ask("more"))
    again = shared_api.post("/v1/runs", json=body)
    assert again.status_code == 200 and again.json()["lastSeq"] == seq + 1
    other = shared_api.post("/v1/runs", json={**body, "forkOf": {"runId": parent, "afterSeq": seq - 1}})
    assert_problem(other, 409, "run_exists")


def test_fork_keeps_its_history_when_the_parent_is_deleted(make_settings: Any) -> None:
    """Retention deleting the parent leaves the fork's inherited history whole; forking the
    deleted parent is 404."""
    clock = ManualClock()
    settings = _retention_settings(make_settings, lease_seconds=0)
    with threaded_server(settings, clock) as url, httpx.Client(base_url=url) as api:
        parent = create(api)["runId"]
        boundary = push(api, parent, ask("q"), message("a"), message())
        child = fork(api, parent, boundary)["runId"]
        push(api, child, ask("fork q"))
        before = api.get(f"/v1/runs/{child}/messages", params={"format": "anthropic"}).json()
        api.post(f"/v1/runs/{parent}/end", json={"stopReason": "completed"}).raise_for_status()
        _pass(clock, RETENTION_HOURS * 3600 + 10)
        assert api.get(f"/v1/runs/{parent}").status_code == 410
        after = api.get(f"/v1/runs/{child}/messages", params={"format": "anthropic"}).json()
        assert after == before
        assert [m["role"] for m in after["messages"]] == ["user", "assistant", "user"]
        assert after["omitted"] == [{"runId": parent, "seq": boundary, "reason": "empty"}]
        answer = api.post("/v1/runs", json={"forkOf": {"runId": parent, "afterSeq": 1}})
        assert_problem(answer, 404, "fork_parent_not_found")
        # Deleting the fork takes its inherited rows too: nothing of it is left to read.
        api.post(f"/v1/runs/{child}/end", json={"stopReason": "completed"}).raise_for_status()
        _pass(clock, RETENTION_HOURS * 3600 + 10)
        assert api.get(f"/v1/runs/{child}").status_code == 410
        assert api.get(f"/v1/runs/{child}/messages", params={"format": "openai"}).status_code == 410


def test_run_state_numbers_a_fork_from_its_boundary() -> None:
    """The state machine starts a fork's turn 1 at afterSeq + 1, a plain run's at 1."""
    from lastword.rules import runstate
    from lastword.rules.records import RunSpec

    def spec(fork_of: tuple[str, int] | None) -> RunSpec:
        return RunSpec(run_id="r", parent_run_id=None, agent=None, mode="oneshot", metadata={},
                       lease_seconds=None, canonical="{}", fork_of=fork_of)

    forked = runstate.create(spec(("parent", 7)), 100.0, 0)
    assert forked.run.last_seq == 8
    assert forked.started is not None and forked.started.start_seq == 8
    assert [event.seq for event in forked.events] == [8]
    plain = runstate.create(spec(None), 100.0, 0)
    assert plain.run.last_seq == 1 and [event.seq for event in plain.events] == [1]
