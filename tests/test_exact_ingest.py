"""Ingest keeps what it is sent exactly, however it is sent.

- Numbers: any JSON value a block may hold comes back (log, result, ``subagent/end``) equal to
  what was sent, byte for byte once both are parsed; an integer that cannot be kept exactly
  (outside [-2**63, 2**64 - 1]) is refused with 422 naming its index and path, never changed.
- NDJSON: a body's lines are stored whatever the network does with its bytes, in commit groups
  of a bounded size; ``LASTWORD_MAX_BATCH_EVENTS`` limits JSON arrays only.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lastword.ingest.json_input import MAX_EXACT_INT, MIN_EXACT_INT, array_slices, parse_slice

from tests.api_helpers import assert_problem, logged, serving, serving_process
from tests.builders import create_run
from tests.conftest import BACKENDS
from tests.servers import threaded_server

TOO_BIG = 18446744073709551617  # 2**64 + 1

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(MIN_EXACT_INT, MAX_EXACT_INT)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module", params=BACKENDS)
def numbers_api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with serving_process(request.param, tmp_path_factory) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def canonical(text: str | bytes) -> str:
    """JSON text parsed with exact integers, and written back one way."""
    return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))


#: Any JSON value, integers of any size included.
any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(MAX_EXACT_INT - 2, 10**25)
    | st.integers(-(10**25), MIN_EXACT_INT + 2) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def exact(value: Any) -> bool:
    """Whether every integer in ``value`` is one the service can keep exactly."""
    if isinstance(value, bool) or not isinstance(value, int | list | dict):
        return True
    if isinstance(value, int):
        return MIN_EXACT_INT <= value <= MAX_EXACT_INT
    return all(exact(item) for item in (value.values() if isinstance(value, dict) else value))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=any_json, ascii_only=st.booleans())
def test_any_block_value_round_trips_exactly(numbers_api: httpx.Client, value: Any, ascii_only: bool) -> None:
    """A block holding any JSON value comes back from the log, the result and subagent/end
    byte-for-byte equal once parsed, or (an integer beyond 64 bits) is refused: never changed."""
    run_id = create_run(numbers_api)
    block = {"type": "x-num", "v": value}
    sent = json.dumps({"type": "assistant/message", "message": {"content": [{"type": "text", "text": "t"}, block]}},
                      ensure_ascii=ascii_only)
    response = numbers_api.post(f"/v1/runs/{run_id}/events", content=sent.encode(),
                                headers={"content-type": "application/json"})
    if not exact(value):
        problem = assert_problem(response, 422, "number_out_of_range")
        assert problem["index"] == 0 and problem["field"].startswith("message.content[1].v")
        return
    assert response.status_code == 200, response.text
    ended = numbers_api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"})
    expected = canonical(json.dumps(block))
    # Read back with exact integers: the HTTP answers' own text, not a lossy parse of it.
    log = json.loads(numbers_api.get(f"/v1/runs/{run_id}/events").text)["events"]
    stored = next(item["event"] for item in log if item["event"]["type"] == "assistant/message")
    assert canonical(json.dumps(stored["message"]["content"][1])) == expected
    for answer in (ended.text, numbers_api.get(f"/v1/runs/{run_id}/result").text):
        assert canonical(json.dumps(json.loads(answer)["output"][1])) == expected
    end_event = next(item["event"] for item in log if item["event"]["type"] == "subagent/end")
    assert canonical(json.dumps(end_event["lastAssistantMessage"][1])) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    big=st.integers(MAX_EXACT_INT + 1, 10**60) | st.integers(-(10**60), MIN_EXACT_INT - 1),
    position=st.integers(0, 3),
    ndjson=st.booleans(),
)
def test_integers_that_cannot_be_kept_are_refused_naming_index_and_path(
    numbers_api: httpx.Client, big: int, position: int, ndjson: bool
) -> None:
    """An integer outside [-2**63, 2**64-1] in any event of a batch: 422 with its index and path; nothing stored."""
    run_id = create_run(numbers_api)
    events: list[Any] = [{"type": "assistant/chunk", "delta": {"type": "text", "text": f"{i}"}} for i in range(4)]
    events[position] = {"type": "assistant/message",
                        "message": {"content": [{"type": "text", "text": "a"}, {"type": "x-num", "v": [1, {"n": big}]}]}}
    if ndjson:
        body, kind = "\n".join(json.dumps(event) for event in events).encode(), "application/x-ndjson"
    else:
        body, kind = json.dumps(events).encode(), "application/json"
    problem = assert_problem(numbers_api.post(f"/v1/runs/{run_id}/events", content=body,
                                              headers={"content-type": kind}), 422, "number_out_of_range")
    assert (problem["index"], problem["field"]) == (position, "message.content[1].v[1].n")
    stored = [item for item in logged(numbers_api, run_id) if not item["event"]["type"].startswith("subagent/")]
    assert len(stored) == (position if ndjson else 0)  # an NDJSON body keeps the lines before the bad one


def test_out_of_range_integers_elsewhere_are_refused(numbers_api: httpx.Client) -> None:
    """Run metadata and an end's error are kept exactly too, or refused with 422 naming the field."""
    refused = numbers_api.post("/v1/runs", content=b'{"metadata": {"n": 18446744073709551617}}',
                               headers={"content-type": "application/json"})
    assert assert_problem(refused, 422, "number_out_of_range")["field"] == "metadata.n"
    run_id = create_run(numbers_api, metadata={"n": MAX_EXACT_INT})
    assert json.loads(numbers_api.get(f"/v1/runs/{run_id}").text)["metadata"] == {"n": MAX_EXACT_INT}
    refused = numbers_api.post(f"/v1/runs/{run_id}/end", headers={"content-type": "application/json"},
                               content=b'{"stopReason": "error", "error": {"code": -9223372036854775809}}')
    assert assert_problem(refused, 422, "number_out_of_range")["field"] == "error.code"
    assert numbers_api.get(f"/v1/runs/{run_id}/result").json()["status"] == "running"
    single = f'{{"type": "x-num", "v": {TOO_BIG}}}'.encode()
    problem = assert_problem(numbers_api.post(f"/v1/runs/{run_id}/events", content=single,
                                              headers={"content-type": "application/json"}), 422, "number_out_of_range")
    assert (problem["index"], problem["field"]) == (0, "v")


# -- NDJSON whatever the network does ------------------------------------------------------


def _pieces(body: bytes, sizes: list[int]) -> Iterator[bytes]:
    at = 0
    for size in sizes:
        if at >= len(body):
            return
        yield body[at : at + size]
        at += size
    if at < len(body):
        yield body[at:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ndjson_is_not_cut_by_the_batch_limit_however_it_arrives(backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """With the batch limit at 500, 5,000-line and 20,000-line NDJSON bodies are stored whole,
    sent in one write or in pieces of random sizes; a JSON array of 501 is still 413."""
    with serving(backend, tmp_path_factory, max_batch_events=500) as url, httpx.Client(base_url=url, timeout=60) as api:
        rng = random.Random(8)
        splits: list[list[int] | None] = [None, [1] * 300 + [7] * 300, [rng.randint(1, 200_000) for _ in range(50)],
                                          [rng.randint(1, 3_000) for _ in range(400)]]
        for lines in (5_000, 20_000):
            for split in splits:
                run_id = create_run(api)
                body = b"".join(b'{"type":"assistant/chunk","delta":{"type":"text","text":"%d "}}\n' % i
                                for i in range(lines))
                content: bytes | Iterator[bytes] = body if split is None else _pieces(body, split)
                answer = api.post(f"/v1/runs/{run_id}/events", content=content,
                                  headers={"content-type": "application/x-ndjson"})
                assert answer.status_code == 200, (lines, answer.text[:300])
                assert answer.json()["accepted"] == lines
                assert answer.json()["lastSeq"] == lines + 1
        run_id = create_run(api)
        chunk = {"type": "assistant/chunk", "delta": {"type": "text", "text": "x"}}
        problem = assert_problem(api.post(f"/v1/runs/{run_id}/events", json=[chunk] * 501), 413, "batch_too_large")
        assert problem["limit"] == 500
        assert api.post(f"/v1/runs/{run_id}/events", json=[chunk] * 500).status_code == 200


# -- big arrays a slice at a time (the pure part) --------------------------------------------


@settings(max_examples=300, deadline=None)
@given(items=st.lists(json_values, max_size=30), budget=st.integers(1, 400), pad=st.sampled_from(["", " ", "\n\t "]))
def test_array_slices_parse_to_exactly_the_array(items: list[Any], budget: int, pad: str) -> None:
    """Cut into slices of any size, an array parses to the same items as a whole-body parse."""
    raw = (pad + json.dumps(items, separators=(pad + "," + pad, ":" + pad)) + pad).encode()
    slices = array_slices(raw, budget)
    assert slices is not None
    got: list[Any] = []
    for piece in slices:
        got.extend(parse_slice(piece, len(got)))
    assert canonical(json.dumps(got)) == canonical(raw)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(json_values, min_size=1, max_size=8), cut=st.integers(0, 10_000), junk=st.sampled_from(list(',[]{}":x ')),
       budget=st.integers(1, 64))
def test_array_slices_accept_exactly_what_a_whole_parse_accepts(items: list[Any], cut: int, junk: str, budget: int) -> None:
    """A mutated array body is refused by the slices exactly when orjson refuses it whole."""
    raw = json.dumps(items).encode()
    at = cut % (len(raw) + 1)
    mutated = raw[:at] + junk.encode() + raw[at:]
    import orjson

    try:
        whole = orjson.loads(mutated)
        whole_ok = isinstance(whole, list)
    except orjson.JSONDecodeError:
        whole_ok = False
    slices = array_slices(mutated, budget)
    if slices is None:
        assert not whole_ok
        return
    try:
        got: list[Any] = []
        for piece in slices:
            got.extend(parse_slice(piece, len(got)))
        sliced_ok = True
    except Exception as error:  # noqa: BLE001 - any refusal counts
        assert getattr(error, "code", None) in ("malformed_json", "number_out_of_range"), error
        sliced_ok = False
    assert sliced_ok is whole_ok, mutated
    if whole_ok:
        assert got == whole


# -- the same rule through the adapters (SPEC §13, §16) ------------------------------------

BIG_TEXT = "18446744073709551617123"


def _anthropic_tool_stream(tool_input: str) -> list[dict[str, Any]]:
    """A Messages stream whose one tool call's input arrives as two input_json_delta pieces."""
    half = len(tool_input) // 2
    return [
        {"type": "message_start", "message": {"id": "msg_big", "type": "message", "role": "assistant", "content": [],
                                              "model": "m", "usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": tool_input[:half]}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": tool_input[half:]}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]


def _openai_call_stream(arguments: str) -> list[dict[str, Any]]:
    """A Responses stream with one finished function call whose arguments are ``arguments``."""
    item = {"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "f", "arguments": arguments,
            "status": "completed"}
    response = {"id": "resp_big", "status": "completed", "output": [item],
                "usage": {"input_tokens": 1, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 0}}}
    return [
        {"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress", "output": []}},
        {"type": "response.output_item.done", "sequence_number": 1, "output_index": 0, "item": item},
        {"type": "response.completed", "sequence_number": 2, "response": response},
    ]


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


def _with_raw_big(events: list[dict[str, Any]], at: int) -> list[str]:
    """The events as JSON text, event ``at`` holding the big integer in a field of its own."""
    texts = [json.dumps(event) for event in events]
    texts[at] = texts[at][:-1] + f', "extra": {{"n": [0, {BIG_TEXT}]}}}}'
    return texts


#: (format, content type, body, index, field) of each adapter path an integer can come in by.
ADAPTER_PATHS = {
    "anthropic tool input": ("anthropic", "text/event-stream",
                             _sse(_anthropic_tool_stream(f'{{"n": {BIG_TEXT}}}')), 3, "delta.partial_json"),
    "openai function arguments": ("openai-responses", "text/event-stream",
                                  _sse(_openai_call_stream(f'{{"n": [{BIG_TEXT}]}}')), 1, "item.arguments"),
    "anthropic event, SSE": ("anthropic", "text/event-stream",
                             b"".join(b"data: " + t.encode() + b"\n\n"
                                      for t in _with_raw_big(_anthropic_tool_stream("{}"), 4)), 4, "extra.n[1]"),
    "openai event, NDJSON": ("openai-responses", "application/x-ndjson",
                             "\n".join(_with_raw_big(_openai_call_stream("{}"), 2)).encode(), 2, "extra.n[1]"),
    "anthropic events, JSON array": ("anthropic", "application/json",
                                     ("[" + ",".join(_with_raw_big(_anthropic_tool_stream("{}"), 5)) + "]").encode(),
                                     5, "extra.n[1]"),
    "acp event, JSON object": ("acp", "application/json",
                               _with_raw_big([{"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}], 0)[0].encode(),
                               0, "extra.n[1]"),
    "codex line, NDJSON": ("codex", "application/x-ndjson",
                           "\n".join(_with_raw_big([{"type": "thread.started", "thread_id": "th"},
                                                    {"type": "turn.started"}], 1)).encode(), 1, "extra.n[1]"),
    "claude-code lines, JSON array": ("claude-code", "application/json",
                                      ("[" + ",".join(_with_raw_big([{"type": "system", "subtype": "init", "uuid": "u0",
                                                                       "session_id": "s"}], 0)) + "]").encode(),
                                      0, "extra.n[1]"),
}


@pytest.mark.parametrize("path", list(ADAPTER_PATHS))
def test_adapters_refuse_integers_that_cannot_be_kept(numbers_api: httpx.Client, path: str) -> None:
    """An integer beyond 64 bits arriving through any adapter path is refused as /events refuses
    it (422 number_out_of_range naming the event and the field), never stored as a float."""
    format, content_type, body, index, field = ADAPTER_PATHS[path]
    run_id = create_run(numbers_api)
    response = numbers_api.post(f"/v1/runs/{run_id}/ingest/{format}", content=body,
                                headers={"content-type": content_type})
    problem = assert_problem(response, 422, "number_out_of_range")
    assert (problem["index"], problem["field"]) == (index, field), problem
    stored = [item["event"] for item in logged(numbers_api, run_id) if not item["event"]["type"].startswith("subagent/")]
    # A provider body stores nothing; a CLI body keeps the lines before the refused one.
    assert len(stored) == (index if format == "codex" else 0), stored
    assert BIG_TEXT[:15] not in numbers_api.get(f"/v1/runs/{run_id}/events").text.replace(".", "")


@pytest.mark.parametrize("format", ["anthropic", "openai-responses"])
def test_tool_inputs_at_the_edges_of_the_range_are_kept_exactly(numbers_api: httpx.Client, format: str) -> None:
    """The largest and smallest integers kept exactly come back from a tool input exactly."""
    value = f'{{"big": {MAX_EXACT_INT}, "small": {MIN_EXACT_INT}}}'
    events = _anthropic_tool_stream(value) if format == "anthropic" else _openai_call_stream(value)
    run_id = create_run(numbers_api)
    response = numbers_api.post(f"/v1/runs/{run_id}/ingest/{format}", content=_sse(events),
                                headers={"content-type": "text/event-stream"})
    assert response.status_code == 200, response.text
    log = json.loads(numbers_api.get(f"/v1/runs/{run_id}/events").text)["events"]
    message = next(item["event"]["message"] for item in log if item["event"]["type"] == "assistant/message")
    assert message["content"][0]["input"] == {"big": MAX_EXACT_INT, "small": MIN_EXACT_INT}
