"""One bad value, one answer, whichever backend stores it (issue 23, seam 5).

PostgreSQL cannot hold a NUL character in a text column; SQLite could. A value one backend
cannot store is refused by both, with the same problem (422 ``unstorable_value``), and nothing
of the request is stored: a client must not learn which database is behind the service from
its answers.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.api_helpers import assert_problem, logged, shared_api, shared_base_url
from tests.builders import chunk, create_run

__all__ = ["shared_api", "shared_base_url"]  # fixtures, imported for pytest to find


@pytest.fixture
def api(shared_api: httpx.Client) -> httpx.Client:
    return shared_api


def test_a_run_whose_agent_holds_a_nul_is_refused_and_not_created(api: httpx.Client) -> None:
    run_id = f"nul-{uuid.uuid4().hex}"
    response = api.post("/v1/runs", json={"runId": run_id, "agent": "a\x00b"})
    assert_problem(response, 422, "unstorable_value")
    assert_problem(api.get(f"/v1/runs/{run_id}"), 404, "run_not_found")
    # The id is free: the same run without the NUL is created.
    assert api.post("/v1/runs", json={"runId": run_id}).status_code == 201


@pytest.mark.parametrize("count", [1, 40], ids=["one-event", "a-batch"])
def test_events_whose_event_id_holds_a_nul_are_refused_and_not_stored(api: httpx.Client, count: int) -> None:
    """A batch (PostgreSQL copies 16 and more rows in one stream) is refused whole."""
    run_id = create_run(api)
    before = logged(api, run_id)
    events = [chunk(f"c{n}", event_id=f"e{n}") for n in range(count - 1)] + [chunk("x", event_id="bad\x00id")]
    assert_problem(api.post(f"/v1/runs/{run_id}/events", json=events), 422, "unstorable_value")
    assert logged(api, run_id) == before
    assert api.post(f"/v1/runs/{run_id}/events", json=chunk("y", event_id="good")).status_code == 200
