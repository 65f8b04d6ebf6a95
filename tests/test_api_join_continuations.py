"""Joined continuations (SPEC §14) through a real server, on every backend."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api_helpers import create, of_type, result, shared_api, shared_base_url
from tests.servers import threaded_server
from tests.test_fold_join import TOOL_RESULT, segment, text

__all__ = ["shared_api", "shared_base_url"]


# -- through the service -------------------------------------------------------------------------

SEGMENTS = [segment(text("Part one. ")), segment(text("Part two. ")),
            segment(text("Part three."), stop="end_turn"), {"type": "turn/end", "stopReason": "end_turn"}]


def test_a_joining_run_answers_the_whole_reply(shared_api: httpx.Client) -> None:
    """result, subagent/end and the run view agree on the joined output; other runs are unchanged."""
    joining = create(shared_api, selection={"joinContinuations": True})
    assert joining["selection"] == {"joinContinuations": True}
    plain = create(shared_api)["runId"]
    for run_id in (joining["runId"], plain):
        shared_api.post(f"/v1/runs/{run_id}/events", json=SEGMENTS).raise_for_status()
    whole = [text("Part one. "), text("Part two. "), text("Part three.")]
    assert result(shared_api, joining["runId"])["output"] == whole
    assert of_type(shared_api, joining["runId"], "subagent/end")[0]["lastAssistantMessage"] == whole
    assert result(shared_api, plain)["output"] == [text("Part three.")]
    explicit_off = create(shared_api, selection={"joinContinuations": False})["runId"]
    shared_api.post(f"/v1/runs/{explicit_off}/events", json=SEGMENTS).raise_for_status()
    assert result(shared_api, explicit_off)["output"] == [text("Part three.")]


def test_selection_is_validated(shared_api: httpx.Client) -> None:
    """An unknown selection option or a non-boolean is refused with 422."""
    bad: Any
    for bad in ({"joinContinuations": "yes"}, {"other": True}, []):
        answer = shared_api.post("/v1/runs", json={"selection": bad})
        assert answer.status_code == 422, answer.text


def test_a_joining_fold_rebuilt_after_a_restart_still_sees_what_stops_a_join(make_settings: Any) -> None:
    """The fold rebuilt from the log after a restart reads tool results too, so it stops the join."""
    settings_ = make_settings(lease_seconds=0)
    with threaded_server(settings_) as url, httpx.Client(base_url=url) as api:
        run_id = create(api, selection={"joinContinuations": True})["runId"]
        api.post(f"/v1/runs/{run_id}/events", json=[
            segment(text("before the tool")), TOOL_RESULT, segment(text("after, cut ")),
        ]).raise_for_status()
    with threaded_server(settings_) as url, httpx.Client(base_url=url) as api:
        api.post(f"/v1/runs/{run_id}/events", json=[segment(text("and done"), stop=None)]).raise_for_status()
        assert result(api, run_id)["output"] == [text("after, cut "), text("and done")]
