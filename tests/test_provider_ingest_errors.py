"""Bad provider bodies (SPEC §13): 400/422 name the first unreadable event's index and store nothing."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.api_helpers import PROBLEM_JSON, create, logged, shared_api, shared_base_url  # noqa: F401
from tests.provider_streams import a_text, a_tool, acp_message, acp_prompt_response, anthropic_stream, as_dict, ndjson, sse


def post(api: httpx.Client, run_id: str, format: str, body: bytes, content_type: str = "text/event-stream",
         **headers: str) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/ingest/{format}", params={"end": "true"}, content=body,
                    headers={"content-type": content_type, **headers})


def good_then(bad: bytes) -> bytes:
    """Five good Anthropic events, then ``bad`` as the sixth (index 5)."""
    return sse(anthropic_stream("msg_bad", [a_text("a", "b", "c")], pings=False)[:5]) + bad


@pytest.mark.parametrize(("bad", "status", "code"), [
    (b"event: content_block_delta\ndata: {not json\n\n", 400, "malformed_json"),
    (b'data: ["an", "array"]\n\n', 422, "invalid_provider_event"),
    (b'data: {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}}\n\n',
     422, "invalid_provider_event"),
    (b'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}}\n\n',
     422, "invalid_provider_event"),
    (b'data: {"type": "message_start", "message": {"id": "again"}}\n\n', 422, "invalid_provider_event"),
])
def test_an_unreadable_event_is_named_and_nothing_is_stored(shared_api: httpx.Client, bad: bytes, status: int,  # noqa: F811
                                                            code: str) -> None:
    """The problem names event 5; the four text deltas before it are not stored."""
    run = create(shared_api)
    response = post(shared_api, run["runId"], "anthropic", good_then(bad))
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert response.json()["code"] == code and response.json()["index"] == 5
    assert [item["event"]["type"] for item in logged(shared_api, run["runId"])] == ["subagent/start"]


def test_a_bad_value_is_named_by_the_event_it_came_from(shared_api: httpx.Client) -> None:  # noqa: F811
    """A negative token count in message_delta is refused naming that event, storing nothing."""
    stream = [e.to_dict() if hasattr(e, "to_dict") else e for e in anthropic_stream("msg_neg", [a_text("x")], pings=False)]
    stream[4]["usage"]["output_tokens"] = -1
    run = create(shared_api)
    response = post(shared_api, run["runId"], "anthropic", sse(stream))
    assert response.status_code == 422 and response.json()["index"] == 4, response.text
    assert len(logged(shared_api, run["runId"])) == 1


def test_invalid_utf8_and_ndjson_lines(shared_api: httpx.Client) -> None:  # noqa: F811
    """Bytes that are not UTF-8 are a 400; a bad NDJSON line names its event index."""
    run = create(shared_api)
    assert post(shared_api, run["runId"], "anthropic", b"data: {\"type\": \"ping\"}\xff\n\n").json()["code"] == "invalid_utf8"
    body = ndjson([acp_message("ok"), acp_message("fine")]) + b"{broken\n"
    response = post(shared_api, run["runId"], "acp", body, "application/x-ndjson")
    assert response.status_code == 400 and response.json()["index"] == 2
    assert len(logged(shared_api, run["runId"])) == 1


def test_wrong_content_type_empty_body_and_unknown_format(shared_api: httpx.Client) -> None:  # noqa: F811
    """415 for a content type that is no framing, 422 for an empty body or a format that does not exist."""
    run = create(shared_api)
    assert post(shared_api, run["runId"], "anthropic", b"x", "text/plain").status_code == 415
    empty = post(shared_api, run["runId"], "anthropic", b"")
    assert empty.status_code == 422 and empty.json()["code"] == "empty_batch"
    assert post(shared_api, run["runId"], "gemini", b"[]", "application/json").status_code == 422
    assert post(shared_api, "no-such-run", "anthropic", sse(anthropic_stream("m", [a_text("x")]))).status_code == 404


def test_a_retried_body_that_ended_the_turn_answers_duplicates(shared_api: httpx.Client) -> None:  # noqa: F811
    """A retry after the turn ended counts duplicates instead of 409; another step after the end is 409."""
    run = create(shared_api)
    body = sse(anthropic_stream("msg_retry", [a_text("done")]))
    first = post(shared_api, run["runId"], "anthropic", body).json()
    again = post(shared_api, run["runId"], "anthropic", body)
    assert again.status_code == 200 and again.json()["accepted"] == 0
    assert again.json()["duplicates"] == first["accepted"] and again.json()["lastSeq"] == first["lastSeq"]
    other = post(shared_api, run["runId"], "anthropic", sse(anthropic_stream("msg_later", [a_text("x")])))
    assert other.status_code == 409 and other.json()["code"] == "run_ended"


def test_acp_idempotency_key(shared_api: httpx.Client) -> None:  # noqa: F811
    """ACP retries are duplicates under the same Idempotency-Key; a malformed key is a 400."""
    run = create(shared_api)
    body = sse([acp_message("hi"), acp_prompt_response(1, "end_turn")])
    assert post(shared_api, run["runId"], "acp", body, **{"Idempotency-Key": "k1"}).json()["accepted"] == 2
    assert post(shared_api, run["runId"], "acp", body, **{"Idempotency-Key": "k1"}).json()["duplicates"] == 2
    bad = post(shared_api, create(shared_api)["runId"], "acp", body, **{"Idempotency-Key": "x" * 161})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_idempotency_key"


def test_a_tool_call_turn_then_the_next_step(shared_api: httpx.Client) -> None:  # noqa: F811
    """?end=true with tool_use leaves the turn open, so the next step of the same turn is accepted."""
    run = create(shared_api)
    step1 = post(shared_api, run["runId"], "anthropic",
                 sse(anthropic_stream("msg_s1", [a_tool("t1", "f", "{}")], stop_reason="tool_use")))
    assert step1.status_code == 200 and "stopReason" not in step1.json()
    step2 = post(shared_api, run["runId"], "anthropic", sse(anthropic_stream("msg_s2", [a_text("final")])))
    assert step2.json()["stopReason"] == "completed"
    assert shared_api.get(f"/v1/runs/{run['runId']}/result").json()["output"] == [{"type": "text", "text": "final"}]


def test_a_longer_retry_of_a_cut_off_message_conflicts(shared_api: httpx.Client) -> None:  # noqa: F811
    """The whole stream after its cut-off part is 409 and stores nothing, rather than a second message counted twice."""
    run = create(shared_api)
    whole = anthropic_stream("msg_twice", [a_text("Half ", "and the rest")])
    assert post(shared_api, run["runId"], "anthropic", sse(whole[:5])).status_code == 200
    before = logged(shared_api, run["runId"])
    again = post(shared_api, run["runId"], "anthropic", sse(whole))
    assert again.status_code == 409 and again.json()["code"] == "event_id_conflict"
    assert logged(shared_api, run["runId"]) == before


@pytest.mark.parametrize("content_type", ["application/json", "application/x-ndjson"])
def test_the_first_of_two_faults_is_named(shared_api: httpx.Client, content_type: str) -> None:  # noqa: F811
    """A body whose event 1 is refused by the format and whose event 2 is not an object names event 1."""
    events = [{"type": "ping"}, {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}]
    body = (orjson.dumps([*events, 3]) if content_type == "application/json"
            else b"".join(orjson.dumps(event) + b"\n" for event in events) + b"3\n")
    run = create(shared_api)
    response = post(shared_api, run["runId"], "anthropic", body, content_type)
    assert response.status_code == 422, response.text
    assert response.json()["index"] == 1, response.text


@pytest.mark.parametrize("levels", [245, 246])
def test_a_text_delta_nested_too_deeply_among_others_is_named(shared_api: httpx.Client, levels: int) -> None:  # noqa: F811
    """A text delta whose raw event nests deeper than a stored chunk may (its source holds it),
    amid a hundred plain ones staged together: 400 too_deeply_nested naming it, nothing stored.
    At 246 levels orjson still writes the chunk plainly (so only the nesting rule refuses it);
    at 245 the chunk is as deep as may be served, and is stored."""
    events = [as_dict(event) for event in anthropic_stream("msg_deep", [a_text(*"abcdef" * 20)])]
    events[50] = {**events[50], "delta": {**events[50]["delta"], "extra": orjson.loads(b"[" * levels + b"]" * levels)}}
    run = create(shared_api)
    response = post(shared_api, run["runId"], "anthropic", sse(events))
    if levels == 245:
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "too_deeply_nested" and response.json()["index"] == 50
    assert [item["event"]["type"] for item in logged(shared_api, run["runId"])] == ["subagent/start"]
