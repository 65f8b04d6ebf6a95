"""A run written as a Durable Stream (SPEC §17): ``/ds/runs/{runId}`` through a real server, on
each backend.

A JSON stream created there is a run; each JSON message appended to it is a §4 event, folded and
selected like any run's. An idempotent producer's epoch fences a restarted child's zombie writer:
the old epoch is refused 403 once the new one has written, a repeat is 204 and stored once, a
gap is 409. Bad input is a problem document with a ``code``, and a refused append stores nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.builders import message, turn_end
from tests.servers import threaded_server

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def api(make_settings: Any) -> Iterator[httpx.Client]:
    with threaded_server(make_settings()) as base, httpx.Client(base_url=base, timeout=30) as client:
        yield client


def producer(epoch: int, seq: int, pid: str = "child") -> dict[str, str]:
    return {**JSON, "Producer-Id": pid, "Producer-Epoch": str(epoch), "Producer-Seq": str(seq)}


def logged(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = api.get(f"/v1/runs/{run_id}/events", params={"after": 0, "limit": 1000})
    assert answer.status_code == 200, answer.text
    return [logged["event"] for logged in answer.json()["events"]]


def texts(api: httpx.Client, run_id: str) -> list[str]:
    """The text of every assistant message in the run's log, in order."""
    return [block["text"] for event in logged(api, run_id) if event["type"] == "assistant/message"
            for block in event["message"]["content"]]


def test_a_json_stream_created_at_a_run_path_is_a_run_whose_messages_are_events(api: httpx.Client) -> None:
    created = api.put("/ds/runs/kid-1", headers=JSON)
    assert created.status_code == 201, created.text
    assert created.headers["Location"].endswith("/ds/runs/kid-1")
    assert api.get("/v1/runs/kid-1").json()["status"] == "running"
    assert api.put("/ds/runs/kid-1", headers=JSON).status_code == 200  # the same stream again

    appended = api.post("/ds/runs/kid-1", json=[message("draft")], headers=JSON)
    assert appended.status_code == 204, appended.text
    one = api.post("/ds/runs/kid-1", json=message("the answer"), headers=JSON)
    assert one.status_code == 204, one.text
    ended = api.post("/ds/runs/kid-1", json=[turn_end("completed")], headers=JSON)
    assert ended.status_code == 204, ended.text
    assert ended.headers["Stream-Closed"] == "true"

    result = api.get("/v1/runs/kid-1/result").json()
    assert result["stopReason"] == "completed"
    assert result["output"] == [{"type": "text", "text": "the answer"}]
    read = api.get("/ds/runs/kid-1", params={"offset": "-1"})
    assert [event["type"] for event in read.json()] == [
        "subagent/start", "assistant/message", "assistant/message", "turn/end", "subagent/end"]
    assert read.headers["Stream-Closed"] == "true"
    assert read.headers["Stream-Next-Offset"] == ended.headers["Stream-Next-Offset"]


def test_a_put_with_initial_messages_creates_the_run_with_them(api: httpx.Client) -> None:
    created = api.put("/ds/runs/kid-2", json=[message("hello")], headers=JSON)
    assert created.status_code == 201, created.text
    assert texts(api, "kid-2") == ["hello"]


def test_a_restarted_childs_zombie_writer_is_fenced_by_its_epoch(api: httpx.Client) -> None:
    assert api.put("/ds/runs/kid-3", headers=JSON).status_code == 201
    # The first child process writes with epoch 0.
    for seq, words in enumerate(["one", "two"]):
        answer = api.post("/ds/runs/kid-3", json=message(words), headers=producer(0, seq))
        assert answer.status_code == 200, answer.text
        assert (answer.headers["Producer-Epoch"], answer.headers["Producer-Seq"]) == ("0", str(seq))
    # It is restarted: the new process claims epoch 1 from seq 0.
    restarted = api.post("/ds/runs/kid-3", json=message("three"), headers=producer(1, 0))
    assert restarted.status_code == 200, restarted.text
    # The old process, still alive, writes on: refused, told the current epoch, nothing stored.
    zombie = api.post("/ds/runs/kid-3", json=message("zombie"), headers=producer(0, 2))
    assert zombie.status_code == 403, zombie.text
    assert zombie.headers["Producer-Epoch"] == "1"
    assert zombie.headers["Content-Type"] == "application/problem+json" and zombie.json()["code"]
    # The new process retries its last write (lost answer): 204, stored once.
    repeated = api.post("/ds/runs/kid-3", json=message("three"), headers=producer(1, 0))
    assert repeated.status_code == 204, repeated.text
    # A write that skips a seq is a gap: 409, with the seq expected.
    gap = api.post("/ds/runs/kid-3", json=message("five"), headers=producer(1, 2))
    assert gap.status_code == 409, gap.text
    assert gap.headers["Producer-Expected-Seq"] == "1" and gap.json()["code"]
    assert texts(api, "kid-3") == ["one", "two", "three"]
    assert api.get("/v1/runs/kid-3/result").json()["output"] == [{"type": "text", "text": "three"}]


def test_a_message_that_is_not_an_event_refuses_the_whole_append(api: httpx.Client) -> None:
    assert api.put("/ds/runs/kid-4", json=[message("kept")], headers=JSON).status_code == 201
    before = logged(api, "kid-4")
    bad = api.post("/ds/runs/kid-4", json=[message("not kept"), {"type": "no/such-type"}], headers=producer(0, 0))
    assert bad.status_code == 422, bad.text
    assert bad.headers["Content-Type"] == "application/problem+json"
    assert bad.json()["code"] == "invalid_event" and bad.json()["index"] == 1
    malformed = api.post("/ds/runs/kid-4", content=b'[{"type": "assistant/message",', headers=JSON)
    assert malformed.status_code == 400 and malformed.json()["code"]
    assert logged(api, "kid-4") == before
    # The refused append did not take the producer's seq 0: it is still the one to send.
    assert api.post("/ds/runs/kid-4", json=message("later"), headers=producer(0, 0)).status_code == 200
    assert texts(api, "kid-4") == ["kept", "later"]


@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("PUT", "/ds/runs/kid-5", {"Content-Type": "text/plain"}, 409),
    ("PUT", "/ds/runs/kid-5", {**JSON, "Stream-TTL": "60"}, 400),
    ("POST", "/ds/runs/no-such-run", JSON, 404),
])
def test_what_a_run_cannot_be_is_refused_with_a_problem(api: httpx.Client, method: str, path: str,
                                                        headers: dict[str, str], status: int) -> None:
    answer = api.request(method, path, headers=headers, json=[message("x")] if method == "POST" else None)
    assert answer.status_code == status, answer.text
    assert answer.headers["Content-Type"] == "application/problem+json" and answer.json()["code"]
    assert api.get("/v1/runs/kid-5").status_code == 404


def test_an_append_to_an_ended_run_is_refused_as_closed(api: httpx.Client) -> None:
    assert api.put("/ds/runs/kid-6", json=[turn_end("completed")], headers=JSON).status_code == 201
    late = api.post("/ds/runs/kid-6", json=message("late"), headers=JSON)
    assert late.status_code == 409, late.text
    assert late.headers["Stream-Closed"] == "true" and late.json()["code"] == "run_ended"
    assert texts(api, "kid-6") == []


def test_a_put_whose_initial_messages_the_store_refuses_creates_no_run(api: httpx.Client) -> None:
    """Nothing half-appended (SPEC §17): the run and its initial messages are one transaction,
    so a message the database cannot hold (a NUL in an eventId) leaves no empty run behind."""
    refused = api.put("/ds/runs/kid-7", json=[message("kept?"), message("bad", event_id="bad\x00id")],
                      headers=JSON)
    assert refused.status_code == 422, refused.text
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "unstorable_value"
    assert api.get("/v1/runs/kid-7").status_code == 404
    assert api.get("/ds/runs/kid-7", params={"offset": "-1"}).status_code == 404
    # The id is still free: the same PUT without the NUL creates the run, with its messages.
    created = api.put("/ds/runs/kid-7", json=[message("kept"), message("good", event_id="good")], headers=JSON)
    assert created.status_code == 201, created.text
    assert texts(api, "kid-7") == ["kept", "good"]
    read = api.get("/ds/runs/kid-7", params={"offset": "-1"})
    assert read.headers["Stream-Next-Offset"] == created.headers["Stream-Next-Offset"]
