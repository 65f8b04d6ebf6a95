"""Ingest over HTTP: JSON batches, NDJSON and chunk text as they stream, limits, dedupe and seq."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.api_helpers import assert_problem, ingested, logged, serving, shared_api, shared_base_url
from tests.builders import chunk, create_run, message
from tests.conftest import BACKENDS
from tests.polling import wait_until

__all__ = ["shared_api", "shared_base_url"]  # fixtures, imported for pytest to find


@pytest.fixture
def base_url(shared_base_url: str) -> str:
    """Every test here only touches runs it creates: one server per backend serves them all."""
    return shared_base_url


@pytest.fixture
def api(shared_api: httpx.Client) -> httpx.Client:
    return shared_api

NDJSON = {"content-type": "application/x-ndjson"}
TEXT = {"content-type": "text/plain; charset=utf-8"}


def ndjson(*events: Any) -> bytes:
    return b"".join(orjson.dumps(event) + b"\n" for event in events)


# -- JSON ---------------------------------------------------------------------------------


def test_a_single_event_object(api: httpx.Client) -> None:
    """A JSON object body is one event, stored exactly as sent, every field kept."""
    run_id = create_run(api)
    event = {"type": "assistant/message", "eventId": "m1", "ts": "2024-05-01T10:00:00Z",
             "message": {"id": "msg_1", "content": [{"type": "text", "text": "hi", "cite": [1]}],
                         "extra": {"kept": True}}}
    response = api.post(f"/v1/runs/{run_id}/events", json=event)
    assert response.status_code == 200
    assert response.json() == {"accepted": 1, "duplicates": 0, "lastSeq": 2}
    assert ingested(api, run_id) == [event]


def test_timestamps_are_stored_as_sent(api: httpx.Client) -> None:
    """Events whose ts the fast check takes (lower-case, a space, a long fraction, an offset) or
    leaves to the models (29 February) keep their ts exactly as written, over JSON and NDJSON."""
    run_id = create_run(api)
    stamps = ["2024-05-01T10:00:00Z", "2024-05-01t10:00:00.123456789012z", "2024-05-01 10:00:60-05:30",
              "2024-02-29T00:00:00.1+00:00"]
    batch = [{**chunk(ts), "ts": ts} for ts in stamps] + [{**message(ts), "ts": ts} for ts in stamps]
    assert api.post(f"/v1/runs/{run_id}/events", json=batch).status_code == 200
    response = api.post(f"/v1/runs/{run_id}/events", content=ndjson(*batch), headers=NDJSON)
    assert response.status_code == 200, response.text
    assert ingested(api, run_id) == batch + batch


def test_an_array_of_events(api: httpx.Client) -> None:
    """A JSON array body stores every event in order and answers the last seq."""
    run_id = create_run(api)
    batch = [
        {"type": "step/start", "anything": 1},
        chunk("a"),
        {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": "thinking"}},
        {"type": "assistant/chunk", "delta": {"type": "tool_call", "id": "t", "partial": "{"}},
        {"type": "assistant/message", "message": {"content": [
            {"type": "tool_call", "id": "t1", "name": "search", "input": {"q": "x"}},
            {"type": "image", "url": "http://x"}]}},
        {"type": "tool/result", "toolCallId": "t1", "content": "found", "isError": False},
        {"type": "tool/result", "toolCallId": "t2", "content": [{"type": "text", "text": "r"}]},
        {"type": "user/message", "message": {"content": "go on"}},
        {"type": "x-custom", "whatever": {"nested": [1, 2]}},
        {"type": "step/finish"},
    ]
    response = api.post(f"/v1/runs/{run_id}/events", json=batch)
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": len(batch), "duplicates": 0, "lastSeq": 1 + len(batch)}
    assert ingested(api, run_id) == batch


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"type": "assistant/thought", "text": "x"}, "type"),
        ({"delta": {"type": "text", "text": "x"}}, "type"),
        ({"type": 5}, "type"),
        ({"type": "assistant/chunk"}, "delta"),
        ({"type": "assistant/chunk", "delta": {"type": "text", "text": 5}}, "delta.text"),
        ({"type": "assistant/chunk", "delta": {"type": "text"}}, "delta.text"),
        ({"type": "assistant/message", "message": {}}, "message.content"),
        ({"type": "assistant/message", "message": {"content": "text"}}, "message.content"),
        ({"type": "assistant/message", "message": {"content": [{"text": "no type"}]}}, "message.content[0]"),
        ({"type": "assistant/message", "message": {"content": [{"type": "text", "text": "a"}, {"type": "text"}]}},
         "message.content[1].text"),
        ({"type": "assistant/message", "message": {"content": [], "usage": {"inputTokens": -1, "outputTokens": 0}}},
         "message.usage.inputTokens"),
        ({"type": "assistant/message", "message": {"content": [], "usage": {"inputTokens": "1", "outputTokens": 0}}},
         "message.usage.inputTokens"),
        ({"type": "tool/result", "content": "x"}, "toolCallId"),
        ({"type": "user/message", "message": {}}, "message.content"),
        ({"type": "turn/end"}, "stopReason"),
        ({"type": "turn/end", "stopReason": "whatever"}, "stopReason"),
        ({"type": "step/start", "eventId": "x" * 201}, "eventId"),
        ({"type": "step/start", "ts": "yesterday"}, "ts"),
        ("not an object", "type"),
    ],
)
def test_one_bad_event_refuses_the_batch(api: httpx.Client, bad: Any, field: str) -> None:
    """A batch with one bad event is 422 invalid_event naming its index and field, and stores nothing."""
    run_id = create_run(api)
    response = api.post(f"/v1/runs/{run_id}/events", json=[chunk("a"), message("b"), bad, chunk("c")])
    problem = assert_problem(response, 422, "invalid_event")
    assert problem["index"] == 2
    assert problem["field"] == field
    assert ingested(api, run_id) == []
    assert api.get(f"/v1/runs/{run_id}").json()["lastSeq"] == 1


def test_an_empty_batch_is_refused(api: httpx.Client) -> None:
    """An empty JSON array is 422: there is nothing to accept."""
    run_id = create_run(api)
    assert_problem(api.post(f"/v1/runs/{run_id}/events", json=[]), 422, "empty_batch")


@pytest.mark.parametrize("body", [b"{", b"[{\"type\": \"step/start\"},", b"", b"nope", b"\xff\xfe"])
def test_malformed_json_is_400(api: httpx.Client, body: bytes) -> None:
    """A body that is not JSON is 400 malformed_json and stores nothing."""
    run_id = create_run(api)
    response = api.post(f"/v1/runs/{run_id}/events", content=body, headers={"content-type": "application/json"})
    assert_problem(response, 400, "malformed_json")
    assert ingested(api, run_id) == []


@pytest.mark.parametrize(
    ("path", "content_type"),
    [("/events", "text/plain"), ("/events", "application/xml"), ("/events", "multipart/form-data"),
     ("/chunks", "application/x-ndjson"), ("/chunks", "application/octet-stream"), ("/end", "text/plain")],
)
def test_wrong_content_type_is_415(api: httpx.Client, path: str, content_type: str) -> None:
    """A body of a media type the endpoint does not take is 415 and stores nothing."""
    run_id = create_run(api)
    body = orjson.dumps({"type": "step/start", "stopReason": "completed"})
    response = api.post(f"/v1/runs/{run_id}{path}", content=body, headers={"content-type": content_type})
    assert_problem(response, 415, "unsupported_media_type")
    assert ingested(api, run_id) == []
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "running"


def test_create_with_wrong_content_type_is_415(api: httpx.Client) -> None:
    """POST /v1/runs with a non-JSON body is 415 and creates nothing."""
    run_id = f"form-{uuid.uuid4().hex}"
    response = api.post("/v1/runs", content=orjson.dumps({"runId": run_id}), headers={"content-type": "text/plain"})
    assert_problem(response, 415, "unsupported_media_type")
    assert_problem(api.get(f"/v1/runs/{run_id}"), 404, "run_not_found")


# -- body limits --------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def small_base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose body limit is 1000 bytes."""
    with serving(request.param, tmp_path_factory, max_body_bytes=1000) as url:
        yield url


@pytest.fixture
def small_api(small_base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=small_base_url, timeout=30) as client:
        yield client


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(
    ("path", "content_type", "body"),
    [
        ("/events", "application/json", orjson.dumps([chunk("x" * 100) for _ in range(20)])),
        ("/events", "application/x-ndjson", ndjson(*[chunk("x" * 100) for _ in range(20)])),
        ("/chunks", "text/plain", b"y" * 3000),
        ("/chunks", "application/json", orjson.dumps({"text": "z" * 3000})),
        ("/end", "application/json", orjson.dumps({"stopReason": "completed", "error": "e" * 3000})),
    ],
    ids=["json", "ndjson", "text", "chunk-json", "end"],
)
def test_body_over_the_limit_is_413(
    small_api: httpx.Client, path: str, content_type: str, body: bytes, chunked: bool
) -> None:
    """A body over the configured limit is 413, whether declared by Content-Length or streamed."""
    run_id = create_run(small_api)

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), 100):
            yield body[start:start + 100]

    content: Any = pieces() if chunked else body
    response = small_api.post(f"/v1/runs/{run_id}{path}", content=content, headers={"content-type": content_type})
    problem = assert_problem(response, 413, "payload_too_large")
    assert problem["limit"] == 1000
    run = small_api.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "running"
    if not chunked:
        assert run["lastSeq"] == 1
    # The limit is on the body: a body within it still goes in.
    assert small_api.post(f"/v1/runs/{run_id}/events", json=chunk("fits")).status_code == 200


def test_json_over_the_limit_stores_nothing_even_streamed(small_api: httpx.Client) -> None:
    """A streamed JSON body cut off by the limit stores nothing (all or nothing)."""
    run_id = create_run(small_api)
    body = orjson.dumps([chunk("x" * 100) for _ in range(20)])
    response = small_api.post(f"/v1/runs/{run_id}/events", content=iter([body[:600], body[600:]]),
                              headers={"content-type": "application/json"})
    assert_problem(response, 413, "payload_too_large")
    assert ingested(small_api, run_id) == []


def test_ndjson_over_the_limit_keeps_what_came_before(small_api: httpx.Client, small_base_url: str) -> None:
    """A streamed NDJSON body that passes the limit keeps the lines before it and says how many."""
    run_id = create_run(small_api)
    lines = [ndjson(chunk(f"{i}" * 100)) for i in range(20)]

    def body() -> Iterator[bytes]:
        sent = 0
        with httpx.Client(base_url=small_base_url, timeout=30) as reader:
            for count, line in enumerate(lines, 1):
                yield line
                sent += len(line)
                if sent > 1000:
                    return
                # One line per piece: the next goes only once this one is stored.
                wait_until(lambda: len(ingested(reader, run_id)) >= count, f"line {count} is stored")

    problem = assert_problem(small_api.post(f"/v1/runs/{run_id}/events", content=body(), headers=NDJSON),
                             413, "payload_too_large")
    kept = ingested(small_api, run_id)
    assert len(kept) == 1000 // len(lines[0])
    assert kept == [chunk(f"{i}" * 100) for i in range(len(kept))]
    assert problem["accepted"] == len(kept)
    assert problem["lastSeq"] == 1 + len(kept)


# -- NDJSON -------------------------------------------------------------------------------


def test_ndjson_is_applied_while_the_body_streams(api: httpx.Client, base_url: str) -> None:
    """NDJSON lines are stored as they arrive: another client reads them before the body ends."""
    run_id = create_run(api)
    seen_first = threading.Event()
    outcome: dict[str, Any] = {}

    def body() -> Iterator[bytes]:
        yield ndjson(chunk("one "))
        yield ndjson(message("two"))[:10]  # half a line waits for the rest
        seen_first.wait(20)
        yield ndjson(message("two"))[10:]
        yield ndjson({"type": "turn/end", "stopReason": "stop"})

    def producer() -> None:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            outcome["response"] = client.post(f"/v1/runs/{run_id}/events", content=body(), headers=NDJSON)

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        wait_until(lambda: len(ingested(api, run_id)) == 1, "the first line is in the log")
        assert ingested(api, run_id) == [chunk("one ")]
        running = api.get(f"/v1/runs/{run_id}/result").json()
        assert running["status"] == "running"
        assert running["output"] == [{"type": "text", "text": "one "}]
    finally:
        seen_first.set()
        thread.join(30)
    response = outcome["response"]
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": 3, "duplicates": 0, "lastSeq": 5}
    assert ingested(api, run_id) == [chunk("one "), message("two"), {"type": "turn/end", "stopReason": "stop"}]
    assert api.get(f"/v1/runs/{run_id}/result").json()["stopReason"] == "completed"


def test_ndjson_accepts_blank_lines_crlf_and_a_last_line_without_newline(api: httpx.Client) -> None:
    """Blank lines are skipped, CRLF line ends work, and a final line needs no newline."""
    run_id = create_run(api)
    body = b"\n" + orjson.dumps(chunk("a")) + b"\r\n\r\n" + orjson.dumps(chunk("b"))
    response = api.post(f"/v1/runs/{run_id}/events", content=body, headers=NDJSON)
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 2
    assert ingested(api, run_id) == [chunk("a"), chunk("b")]


@pytest.mark.parametrize("streamed", [False, True], ids=["one-piece", "line-by-line"])
def test_ndjson_bad_line_keeps_the_lines_before_it(api: httpx.Client, streamed: bool) -> None:
    """A bad NDJSON line stores the lines before it (not after) and the problem says what was kept."""
    run_id = create_run(api)
    lines = [ndjson(chunk("a")), b"\n", ndjson(chunk("b")), ndjson({"type": "assistant/chunk"}), ndjson(chunk("c"))]
    content: Any = iter(lines) if streamed else b"".join(lines)
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", content=content, headers=NDJSON),
                             422, "invalid_event")
    assert problem["index"] == 2
    assert problem["line"] == 4
    assert problem["field"] == "delta"
    assert problem["accepted"] == 2
    assert problem["lastSeq"] == 3
    assert ingested(api, run_id) == [chunk("a"), chunk("b")]


def test_ndjson_piece_answers_its_first_bad_line_alone(api: httpx.Client) -> None:
    """The lines of one piece are checked together, yet the answer is the first bad line's, as if
    they came one by one: its index, line and errors only (not a later line's, not the malformed
    one after it), with the lines before it stored."""
    run_id = create_run(api)
    body = (ndjson(chunk("a"), {"type": "assistant/chunk"}, {"type": "assistant/message"}, chunk("b"))
            + b'{"type": \n' + ndjson(chunk("c")))
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", content=body, headers=NDJSON),
                             422, "invalid_event")
    assert (problem["index"], problem["line"], problem["field"]) == (1, 2, "delta")
    assert {error["index"] for error in problem["errors"]} == {1}
    assert problem["accepted"] == 1
    assert ingested(api, run_id) == [chunk("a")]


def test_ndjson_malformed_line_is_400_naming_it(api: httpx.Client) -> None:
    """An NDJSON line that is not JSON is 400 naming the line, after storing the lines before it."""
    run_id = create_run(api)
    body = ndjson(chunk("a")) + b'{"type": "assistant/chunk", \n' + ndjson(chunk("c"))
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", content=body, headers=NDJSON),
                             400, "malformed_json")
    assert problem["index"] == 1
    assert problem["line"] == 2
    assert problem["accepted"] == 1
    assert problem["lastSeq"] == 2
    assert ingested(api, run_id) == [chunk("a")]


def test_ndjson_event_id_conflict_keeps_the_lines_before_it(api: httpx.Client) -> None:
    """A line reusing an eventId for other content is 409 naming it; the lines before it stay stored."""
    run_id = create_run(api)
    api.post(f"/v1/runs/{run_id}/events", json=chunk("first", "e1")).raise_for_status()
    body = ndjson(chunk("a"), chunk("b"), chunk("other", "e1"), chunk("c"))
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", content=body, headers=NDJSON),
                             409, "event_id_conflict")
    assert problem["index"] == 2
    assert problem["line"] == 3
    assert problem["accepted"] == 2
    assert ingested(api, run_id) == [chunk("first", "e1"), chunk("a"), chunk("b")]


def test_ndjson_lines_after_a_turn_end_are_refused(api: httpx.Client) -> None:
    """NDJSON lines after a turn/end are 409 run_ended; the turn/end and the lines before it are stored."""
    run_id = create_run(api)
    body = ndjson(message("done"), {"type": "turn/end", "stopReason": "completed"}, chunk("late"))
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", content=body, headers=NDJSON), 409, "run_ended")
    assert problem["index"] == 2
    assert problem["line"] == 3
    assert problem["stopReason"] == "completed"
    assert problem["accepted"] == 2
    assert ingested(api, run_id) == [message("done"), {"type": "turn/end", "stopReason": "completed"}]
    assert api.get(f"/v1/runs/{run_id}/result").json()["output"] == [{"type": "text", "text": "done"}]


def test_json_batch_with_events_after_its_turn_end_stores_nothing(api: httpx.Client) -> None:
    """A JSON batch holding events after its own turn/end is refused whole (409 run_ended)."""
    run_id = create_run(api)
    batch = [message("done"), {"type": "turn/end", "stopReason": "completed"}, chunk("late")]
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", json=batch), 409, "run_ended")
    assert problem["index"] == 2
    assert ingested(api, run_id) == []
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "running"


def test_ndjson_without_any_event_is_refused(api: httpx.Client) -> None:
    """An NDJSON body of blank lines holds no event: 422."""
    run_id = create_run(api)
    assert_problem(api.post(f"/v1/runs/{run_id}/events", content=b"\n\n", headers=NDJSON), 422, "empty_batch")


# -- chunk text ---------------------------------------------------------------------------


def test_text_chunks_split_inside_characters_are_stored_exactly(api: httpx.Client, base_url: str) -> None:
    """Multi-byte characters split across body pieces are reassembled: the stored text is exact."""
    run_id = create_run(api)
    text = "a€b😀c"
    raw = text.encode()
    # Every piece ends inside a character: a decoder that is not incremental fails on each.
    pieces = [raw[:2], raw[2:6], raw[6:]]
    expected = ["a", "€b", "😀c"]
    assert [piece.decode("utf-8", "ignore") for piece in pieces] != expected

    def body() -> Iterator[bytes]:
        with httpx.Client(base_url=base_url, timeout=30) as reader:
            for count, piece in enumerate(pieces, 1):
                yield piece
                # The next piece goes only once this one is stored, so the server sees them apart.
                wait_until(lambda: len(ingested(reader, run_id)) >= count, f"piece {count} is stored")

    response = api.post(f"/v1/runs/{run_id}/chunks", content=body(), headers=TEXT)
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": 3, "duplicates": 0, "lastSeq": 4}
    assert [event["delta"]["text"] for event in ingested(api, run_id)] == expected
    assert api.get(f"/v1/runs/{run_id}/result").json()["output"] == [{"type": "text", "text": text}]


def test_text_body_in_one_piece(api: httpx.Client) -> None:
    """A whole text/plain body is stored as text, white space and newlines kept."""
    run_id = create_run(api)
    text = "  line one\n\tline two €\n"
    response = api.post(f"/v1/runs/{run_id}/chunks", content=text.encode(), headers={"content-type": "text/plain"})
    assert response.status_code == 200
    assert response.json()["accepted"] == 1
    assert "".join(event["delta"]["text"] for event in ingested(api, run_id)) == text
    assert api.get(f"/v1/runs/{run_id}/result").json()["output"] == [{"type": "text", "text": text}]


@pytest.mark.parametrize("body", [b"ok\xff", b"\xc3\x28", b"trailing \xe2\x82"], ids=["bad-byte", "bad-pair", "cut"])
def test_invalid_utf8_is_400(api: httpx.Client, body: bytes) -> None:
    """A text/plain body that is not UTF-8 is 400 invalid_utf8."""
    run_id = create_run(api)
    problem = assert_problem(api.post(f"/v1/runs/{run_id}/chunks", content=body, headers=TEXT), 400, "invalid_utf8")
    stored = ingested(api, run_id)
    assert problem["accepted"] == len(stored)
    assert "\ufffd" not in "".join(event["delta"]["text"] for event in stored)
    assert body.decode("utf-8", "ignore").startswith("".join(event["delta"]["text"] for event in stored))


def test_empty_text_body_stores_nothing(api: httpx.Client) -> None:
    """An empty text/plain body accepts nothing and answers the run's current lastSeq."""
    run_id = create_run(api)
    api.post(f"/v1/runs/{run_id}/events", json=chunk("x")).raise_for_status()
    response = api.post(f"/v1/runs/{run_id}/chunks", content=b"", headers=TEXT)
    assert response.status_code == 200
    assert response.json() == {"accepted": 0, "duplicates": 0, "lastSeq": 2}
    assert_problem(api.post("/v1/runs/nope/chunks", content=b"", headers=TEXT), 404, "run_not_found")


def test_json_text_form(api: httpx.Client) -> None:
    """/chunks takes JSON {text, eventId?}: one text delta, deduplicated by eventId."""
    run_id = create_run(api)
    response = api.post(f"/v1/runs/{run_id}/chunks", json={"text": "hello ", "eventId": "c1"})
    assert response.json() == {"accepted": 1, "duplicates": 0, "lastSeq": 2}
    again = api.post(f"/v1/runs/{run_id}/chunks", json={"text": "hello ", "eventId": "c1"})
    assert again.json() == {"accepted": 0, "duplicates": 1, "lastSeq": 2}
    api.post(f"/v1/runs/{run_id}/chunks", json={"text": "world"}).raise_for_status()
    assert ingested(api, run_id) == [chunk("hello ", "c1"), chunk("world")]
    assert api.get(f"/v1/runs/{run_id}/result").json()["output"] == [{"type": "text", "text": "hello world"}]
    assert_problem(api.post(f"/v1/runs/{run_id}/chunks", json={"text": 5}), 422, "validation_error")
    assert_problem(api.post(f"/v1/runs/{run_id}/chunks", json={"words": "x"}), 422, "validation_error")


# -- eventId dedupe -----------------------------------------------------------------------


def test_repeated_event_id_with_same_content_is_a_duplicate(api: httpx.Client) -> None:
    """An event sent again with its eventId is counted in duplicates and stored once."""
    run_id = create_run(api)
    batch = [chunk("a", "e1"), message("b", event_id="e2")]
    assert api.post(f"/v1/runs/{run_id}/events", json=batch).json() == {"accepted": 2, "duplicates": 0, "lastSeq": 3}
    again = api.post(f"/v1/runs/{run_id}/events", json=[*batch, chunk("c", "e3")])
    assert again.status_code == 200
    assert again.json() == {"accepted": 1, "duplicates": 2, "lastSeq": 4}
    assert ingested(api, run_id) == [*batch, chunk("c", "e3")]


def test_repeated_event_id_with_other_content_conflicts(api: httpx.Client) -> None:
    """An eventId reused for other content is 409 event_id_conflict, and nothing of the batch is stored."""
    run_id = create_run(api)
    api.post(f"/v1/runs/{run_id}/events", json=chunk("a", "e1")).raise_for_status()
    problem = assert_problem(
        api.post(f"/v1/runs/{run_id}/events", json=[chunk("new", "e2"), chunk("changed", "e1")]),
        409, "event_id_conflict",
    )
    assert problem["index"] == 1
    assert problem["eventId"] == "e1"
    assert ingested(api, run_id) == [chunk("a", "e1")]


def test_duplicates_inside_one_batch(api: httpx.Client) -> None:
    """The same event twice in one batch is stored once; the same id with other content is 409."""
    run_id = create_run(api)
    response = api.post(f"/v1/runs/{run_id}/events", json=[chunk("a", "e1"), chunk("a", "e1"), chunk("b")])
    assert response.json() == {"accepted": 2, "duplicates": 1, "lastSeq": 3}
    problem = assert_problem(
        api.post(f"/v1/runs/{run_id}/events", json=[chunk("x", "e9"), chunk("y", "e9")]), 409, "event_id_conflict"
    )
    assert problem["index"] == 1
    assert ingested(api, run_id) == [chunk("a", "e1"), chunk("b")]


def test_retried_batch_after_the_end_answers_duplicates(api: httpx.Client) -> None:
    """A batch retried after its turn/end ended the turn still answers 200, all duplicates."""
    run_id = create_run(api)
    batch = [message("done", event_id="m1"), {"type": "turn/end", "stopReason": "completed", "eventId": "end"}]
    first = api.post(f"/v1/runs/{run_id}/events", json=batch)
    assert first.json() == {"accepted": 2, "duplicates": 0, "lastSeq": 4}
    log = logged(api, run_id)
    again = api.post(f"/v1/runs/{run_id}/events", json=batch)
    assert again.status_code == 200
    assert again.json() == {"accepted": 0, "duplicates": 2, "lastSeq": 4}
    ndjson_again = api.post(f"/v1/runs/{run_id}/events", content=ndjson(*batch), headers=NDJSON)
    assert ndjson_again.json() == {"accepted": 0, "duplicates": 2, "lastSeq": 4}
    assert logged(api, run_id) == log
    assert_problem(api.post(f"/v1/runs/{run_id}/events", json=[*batch, chunk("new")]), 409, "run_ended")


def test_event_ids_are_scoped_to_their_run(api: httpx.Client) -> None:
    """The same eventId in two runs is two events."""
    first, second = create_run(api), create_run(api)
    for run_id in (first, second):
        response = api.post(f"/v1/runs/{run_id}/events", json=chunk("a", "shared"))
        assert response.json()["accepted"] == 1


# -- seq ----------------------------------------------------------------------------------


def test_seq_is_gap_free_and_pages(api: httpx.Client) -> None:
    """seq counts 1, 2, 3… across batches, refusals and duplicates; ?after and ?limit page it exactly."""
    run_id = create_run(api)
    answers = [
        api.post(f"/v1/runs/{run_id}/events", json=[chunk("a", "1"), chunk("b")]),
        api.post(f"/v1/runs/{run_id}/events", json=[chunk("c"), {"type": "bogus"}]),  # refused
        api.post(f"/v1/runs/{run_id}/events", json=[chunk("a", "1"), chunk("d")]),  # one duplicate
        api.post(f"/v1/runs/{run_id}/chunks", content="ef".encode(), headers=TEXT),
        api.post(f"/v1/runs/{run_id}/events", content=ndjson(chunk("g"), chunk("h")), headers=NDJSON),
        api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"}),
    ]
    assert [answer.status_code for answer in answers] == [200, 422, 200, 200, 200, 200]
    assert [answer.json()["lastSeq"] for answer in answers[:1] + answers[2:5]] == [3, 4, 5, 7]
    everything = logged(api, run_id)
    assert [item["seq"] for item in everything] == list(range(1, 9))
    assert everything[-1]["event"]["type"] == "subagent/end"
    assert api.get(f"/v1/runs/{run_id}").json()["lastSeq"] == 8

    paged: list[dict[str, Any]] = []
    after = 0
    while True:
        page = api.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 3}).json()
        if not page["events"]:
            assert page["nextAfter"] == after
            break
        assert len(page["events"]) <= 3
        paged.extend(page["events"])
        after = page["nextAfter"]
    assert paged == everything
    tail = api.get(f"/v1/runs/{run_id}/events", params={"after": 6}).json()
    assert [item["seq"] for item in tail["events"]] == [7, 8]
    assert tail["nextAfter"] == 8


@pytest.mark.parametrize("params", [{"after": -1}, {"limit": 0}, {"limit": -5}, {"after": 2**70}])
def test_events_paging_refuses_bad_parameters(api: httpx.Client, params: dict[str, Any]) -> None:
    """A negative or oversized after, or a limit out of range, is 422."""
    run_id = create_run(api)
    assert_problem(api.get(f"/v1/runs/{run_id}/events", params=params), 422, "validation_error")


def test_concurrent_producers_get_distinct_gap_free_seqs(api: httpx.Client, base_url: str) -> None:
    """Batches sent at once by several producers interleave whole, with seqs 1..N and none lost."""
    run_id = create_run(api)
    start = threading.Barrier(4)
    answers: list[httpx.Response] = []

    def producer(name: str) -> None:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            start.wait(10)
            for i in range(5):
                batch = [chunk(f"{name}{i}a"), chunk(f"{name}{i}b")]
                answers.append(client.post(f"/v1/runs/{run_id}/events", json=batch))

    threads = [threading.Thread(target=producer, args=(name,)) for name in "wxyz"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(answer.json()["lastSeq"] for answer in answers) == list(range(3, 42, 2))
    everything = logged(api, run_id)
    assert [item["seq"] for item in everything] == list(range(1, 42))
    texts = [item["event"]["delta"]["text"] for item in everything[1:]]
    for a, b in zip(texts[::2], texts[1::2], strict=True):
        assert a.endswith("a") and b == a[:-1] + "b"
