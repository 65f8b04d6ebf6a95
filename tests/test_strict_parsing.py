"""Ids, cursors and query integers are read strictly: only the spelling the service gave out.

Python's ``int()`` (and pydantic's lax integers) read ``3_0`` as 30, and ``+3``, `` 3`` or
``3.0`` as 3; a resume point or a page cursor spelled any such way was never sent, and must
not silently resume or page from somewhere else.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.api_helpers import assert_problem, shared_api, shared_base_url  # noqa: F401
from tests.builders import chunk, create_run, new_run

# Each would be read as an id the run below really has (30 or 3) by a lax parser.
LAX_SPELLINGS = ["3_0", "+30", "30.0", "0x1e", "3\u0660"]


def _run_with_forty_events(api: httpx.Client) -> str:
    run_id = create_run(api)
    assert api.post(f"/v1/runs/{run_id}/events", json=[chunk(str(i)) for i in range(40)]).status_code == 200
    return str(run_id)


@pytest.mark.parametrize("spelling", ["3_0", "+30", "030_0", "30.0"])
@pytest.mark.parametrize("stream", ["run", "firehose"])
def test_last_event_id_other_than_plain_digits_is_refused(shared_api: httpx.Client, spelling: str, stream: str) -> None:
    """``Last-Event-ID: 3_0`` is 400 invalid_last_event_id, not a resume from 30."""
    run_id = _run_with_forty_events(shared_api)
    path = f"/v1/runs/{run_id}/stream" if stream == "run" else "/v1/stream"
    with shared_api.stream("GET", path, headers={"Last-Event-ID": spelling}) as response:
        assert response.status_code == 400, (spelling, response.status_code)
        response.read()
        assert_problem(response, 400, "invalid_last_event_id")


@pytest.mark.parametrize("spelling", LAX_SPELLINGS)
@pytest.mark.parametrize("path", ["/v1/runs/{run}/events", "/v1/runs/{run}/stream", "/v1/stream"])
def test_after_other_than_plain_digits_is_refused(shared_api: httpx.Client, spelling: str, path: str) -> None:
    """``?after=3_0`` is a 422 problem on the log and both streams, not ``after=30``."""
    run_id = _run_with_forty_events(shared_api)
    with shared_api.stream("GET", path.format(run=run_id), params={"after": spelling}) as response:
        assert response.status_code == 422, (spelling, response.status_code)  # not a stream that stays open
        response.read()
        assert_problem(response, 422, "validation_error")


@pytest.mark.parametrize("name", ["turn", "limit"])
def test_other_query_integers_are_plain_digits_too(shared_api: httpx.Client, name: str) -> None:
    """``?turn=0_1`` and ``?limit=1_0`` are 422, like any other malformed query integer."""
    run_id = _run_with_forty_events(shared_api)
    path = f"/v1/runs/{run_id}/result" if name == "turn" else f"/v1/runs/{run_id}/events"
    assert_problem(shared_api.get(path, params={name: "0_1"}), 422, "validation_error")
    assert shared_api.get(path, params={name: "1"}).status_code == 200


def _encoded(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_cursor_is_only_the_spelling_given_out(shared_api: httpx.Client) -> None:
    """A cursor that decodes to the same key but was spelled otherwise is 400 invalid_cursor."""
    for _ in range(3):
        new_run(shared_api)
    given = shared_api.get("/v1/runs", params={"limit": 1}).json()["nextCursor"]
    pk = base64.urlsafe_b64decode(given + "=" * (-len(given) % 4)).decode()
    assert shared_api.get("/v1/runs", params={"limit": 1, "cursor": given}).status_code == 200
    respelled = [
        _encoded(f"{pk[0]}_{pk[1:]}") if len(pk) > 1 else _encoded(f"0_{pk}"),
        _encoded(f"+{pk}"), _encoded(f" {pk}"), _encoded(f"0{pk}"), _encoded(f"{pk}\n"),
        base64.urlsafe_b64encode(pk.encode()).decode(),  # with padding, as given out it has none
    ]
    for cursor in respelled:
        if cursor == given:
            continue
        assert_problem(shared_api.get("/v1/runs", params={"limit": 1, "cursor": cursor}), 400, "invalid_cursor")
