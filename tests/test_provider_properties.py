"""Properties of the native stream adapters (SPEC §13), for random valid provider streams.

For each format, hypothesis draws a stream description, builds the stream from the provider
SDK's own types, and checks against a real server that

* ingesting the provider stream gives the same result (output, stop reason, usage, status) and
  the same log, ``source`` and ``eventId`` aside, as pushing the §4 events that the description
  translates to by hand (a second, naive reading of §13, written here independently of the
  adapters); and
* the same body sent in random piece sizes stores exactly the same log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lastword.rules.exact_ints import MAX_EXACT_INT, MIN_EXACT_INT

from tests.api_helpers import serving_process
from tests.provider_streams import (
    CONTENT_TYPES,
    OpenAIStream,
    a_text,
    a_thinking,
    a_tool,
    acp_message,
    acp_prompt_response,
    acp_thought,
    acp_tool_call,
    anthropic_stream,
    sse,
)

PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, database=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with serving_process("sqlite", tmp_path_factory) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def new_run(api: httpx.Client) -> str:
    return str(api.post("/v1/runs", json={}).json()["runId"])


def ingest(api: httpx.Client, run_id: str, format: str, body: bytes, end: bool, pieces: list[int] | None = None,
           headers: dict[str, str] | None = None) -> dict[str, Any]:
    content: Any = body
    if pieces is not None:
        def split() -> Iterator[bytes]:
            at = 0
            for size in pieces:
                if at < len(body):
                    yield body[at:at + size]
                    at += size
            if at < len(body):
                yield body[at:]
        content = split()
    response = api.post(f"/v1/runs/{run_id}/ingest/{format}", params={"end": str(end).lower()}, content=content,
                        headers={"content-type": CONTENT_TYPES["sse"], **(headers or {})})
    assert response.status_code == 200, response.text
    return dict(response.json())


def push(api: httpx.Client, run_id: str, events: list[dict[str, Any]]) -> None:
    if events:
        response = api.post(f"/v1/runs/{run_id}/events", json=events)
        assert response.status_code == 200, response.text


def outcome(api: httpx.Client, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = api.get(f"/v1/runs/{run_id}/result").json()
    log = [item["event"] for item in api.get(f"/v1/runs/{run_id}/events", params={"limit": 1000}).json()["events"]]
    kept = {key: result.get(key) for key in ("output", "stopReason", "usage", "status", "isError", "error")}
    return kept, log


def session_events(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ingested events of a log without what only an adapter adds (``source``, ``eventId``)."""
    return [{k: v for k, v in event.items() if k not in ("source", "eventId")}
            for event in log if not event["type"].startswith("subagent/")]


def check(api: httpx.Client, format: str, body: bytes, end: bool, by_hand: list[dict[str, Any]], pieces: list[int],
          headers: dict[str, str] | None = None) -> None:
    adapted, reference, pieced = new_run(api), new_run(api), new_run(api)
    ingest(api, adapted, format, body, end, headers=headers)
    push(api, reference, by_hand)
    ingest(api, pieced, format, body, end, pieces, headers=headers)
    got, got_log = outcome(api, adapted)
    want, want_log = outcome(api, reference)
    assert got == want
    assert session_events(got_log) == session_events(want_log)
    _, pieced_log = outcome(api, pieced)
    drop = ("runId", "startedAt", "endedAt")
    assert [{k: v for k, v in e.items() if k not in drop} for e in pieced_log] == \
        [{k: v for k, v in e.items() if k not in drop} for e in got_log]


texts = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=4)
#: The integers the contract keeps exactly (SPEC §3; larger ones are refused on every ingest
#: path, tests/test_exact_ingest.py::test_adapters_refuse_integers_that_cannot_be_kept).
exact_integers = st.integers(MIN_EXACT_INT, MAX_EXACT_INT)
piece_sizes = st.lists(st.integers(1, 64), min_size=1, max_size=40)


# -- Anthropic ----------------------------------------------------------------------------------

@st.composite
def anthropic_blocks(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    blocks: list[tuple[Any, ...]] = []
    for n in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["text", "thinking", "tool"]))
        if kind == "text":
            blocks.append(a_text(*draw(texts)))
        elif kind == "thinking":
            blocks.append(a_thinking(*draw(texts), signature=draw(st.text("abcXYZ09", min_size=1, max_size=8))))
        else:
            value = draw(st.dictionaries(st.text("abc", min_size=1, max_size=3), exact_integers | st.text(max_size=4), max_size=3))
            text = json.dumps(value)
            if draw(st.booleans()):
                text = text[:-1]  # cut off inside the input: dropped
            cuts = sorted(set(draw(st.lists(st.integers(1, max(len(text) - 1, 1)), max_size=3))))
            pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if text[a:b]]
            blocks.append(a_tool(f"toolu_{n}", "fn", *pieces))
    return blocks


def anthropic_by_hand(blocks: list[tuple[Any, ...]], stop: str | None, end: bool, usage: tuple[int, int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for block in blocks:
        if block[0] == "text":
            events += [{"type": "assistant/chunk", "delta": {"type": "text", "text": t}} for t in block[1]]
            content.append({"type": "text", "text": "".join(block[1])})
        elif block[0] == "thinking":
            events += [{"type": "assistant/chunk", "delta": {"type": "reasoning", "text": t}} for t in block[1]]
            content.append({"type": "reasoning", "text": "".join(block[1]), "signature": block[2]})
        else:
            try:
                content.append({"type": "tool_call", "id": block[1], "name": block[2], "input": json.loads("".join(block[3]))})
            except json.JSONDecodeError:
                pass
    mapped = {"end_turn": "completed", "stop_sequence": "completed", "max_tokens": "max_tokens",
              "model_context_window_exceeded": "max_tokens", "refusal": "refusal"}.get(stop or "")
    message: dict[str, Any] = {"id": "msg_p", "content": content,
                               "usage": {"inputTokens": usage[0], "outputTokens": usage[1] if stop else 1}}
    if stop is not None:
        message["stopReason"] = mapped or stop
    events.append({"type": "assistant/message", "message": message})
    if end and mapped:
        events.append({"type": "turn/end", "stopReason": mapped})
    return events


@PROPERTY_SETTINGS
@given(blocks=anthropic_blocks(),
       stop=st.sampled_from(["end_turn", "stop_sequence", "max_tokens", "model_context_window_exceeded", "refusal",
                             "tool_use", "pause_turn", None]),
       end=st.booleans(), usage=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), pieces=piece_sizes)
def test_anthropic_streams_equal_their_session_events(server: httpx.Client, blocks: list[tuple[Any, ...]], stop: str | None,
                                                     end: bool, usage: tuple[int, int], pieces: list[int]) -> None:
    """Any Anthropic stream (None: cut off before message_delta) ingests as its hand-translated §4 events, in any piece sizes."""
    stream = anthropic_stream("msg_p", blocks, stop_reason=stop or "end_turn", input_tokens=usage[0], output_tokens=usage[1])
    if stop is None:
        stream = stream[:-2]
    check(server, "anthropic", sse(stream), end, anthropic_by_hand(blocks, stop, end, usage), pieces)


# -- OpenAI Responses ---------------------------------------------------------------------------

@st.composite
def openai_items(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    items: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["message", "call", "reasoning"]))
        if kind == "call":
            value = draw(st.dictionaries(st.text("xyz", min_size=1, max_size=3), exact_integers, max_size=2))
            items.append(("call", json.dumps(value), draw(st.booleans())))
        else:
            items.append((kind, draw(texts)))
    return items


def openai_by_hand(items: list[tuple[Any, ...]], terminal: str, end: bool, usage: tuple[int, int, int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for n, item in enumerate(items):
        if item[0] == "message":
            events += [{"type": "assistant/chunk", "delta": {"type": "text", "text": t}} for t in item[1]]
            content.append({"type": "text", "text": "".join(item[1])})
        elif item[0] == "reasoning":
            events += [{"type": "assistant/chunk", "delta": {"type": "reasoning", "text": t}} for t in item[1]]
            content.append({"type": "reasoning", "text": "".join(item[1])})
        elif item[2]:  # a finished function call
            content.append({"type": "tool_call", "id": f"call_{n}", "name": "fn", "input": json.loads(item[1])})
    has_call = any(item[0] == "call" and item[2] for item in items)
    stop, error = {
        "completed": (None if has_call else "completed", None),
        "max_output_tokens": ("max_tokens", None),
        "content_filter": ("refusal", None),
        "failed": ("error", {"code": "server_error", "message": "boom"}),
        "error": ("error", {"code": "server_error", "message": "boom"}),
        "cut": (None, None),
    }[terminal]
    message: dict[str, Any] = {"id": "resp_p", "content": content}
    if terminal not in ("cut", "error", "failed"):
        message["usage"] = {"inputTokens": usage[0] - usage[2], "outputTokens": usage[1], "cacheReadTokens": usage[2],
                            "cacheWriteTokens": 0}
    if stop is not None:
        message["stopReason"] = stop
    if error is not None:
        message["error"] = error
    events.append({"type": "assistant/message", "message": message})
    if end and stop is not None:
        events.append({"type": "turn/end", "stopReason": stop, **({"error": error} if error else {})})
    return events


@PROPERTY_SETTINGS
@given(items=openai_items(),
       terminal=st.sampled_from(["completed", "max_output_tokens", "content_filter", "failed", "error", "cut"]),
       end=st.booleans(), usage=st.integers(0, 10**6).flatmap(
           lambda total: st.tuples(st.just(total), st.integers(0, 10**6), st.integers(0, total))),
       pieces=piece_sizes)
def test_openai_streams_equal_their_session_events(server: httpx.Client, items: list[tuple[Any, ...]], terminal: str,
                                                  end: bool, usage: tuple[int, int, int], pieces: list[int]) -> None:
    """Any Responses stream ingests as its hand-translated §4 events, in any piece sizes."""
    builder = OpenAIStream("resp_p").created()
    for n, item in enumerate(items):
        if item[0] == "message":
            builder.message(*item[1])
        elif item[0] == "reasoning":
            builder.reasoning(*item[1])
        else:
            builder.function_call(f"call_{n}", "fn", item[1], done=item[2])
    use = builder.usage(usage[0], usage[1], cached=usage[2])
    if terminal == "completed":
        stream = builder.completed(use)
    elif terminal in ("max_output_tokens", "content_filter"):
        stream = builder.incomplete(terminal, use)
    elif terminal == "failed":
        stream = builder.failed("server_error", "boom")
    elif terminal == "error":
        stream = builder.error("boom")
    else:
        stream = builder.events
    check(server, "openai-responses", sse(stream), end, openai_by_hand(items, terminal, end, usage), pieces)


# -- ACP ----------------------------------------------------------------------------------------

@st.composite
def acp_updates(draw: st.DrawFn) -> list[tuple[str, str]]:
    return draw(st.lists(st.tuples(st.sampled_from(["message", "thought", "tool"]), st.text(min_size=1, max_size=6)),
                         max_size=6))


@PROPERTY_SETTINGS
@given(updates=acp_updates(),
       stop=st.sampled_from(["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", None]),
       usage=st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), pieces=piece_sizes)
def test_acp_streams_equal_their_session_events(server: httpx.Client, updates: list[tuple[str, str]], stop: str | None,
                                               usage: tuple[int, int] | None, pieces: list[int]) -> None:
    """Any ACP prompt turn ingests as its hand-translated §4 events, in any piece sizes."""
    stream: list[dict[str, Any]] = []
    by_hand: list[dict[str, Any]] = []
    for n, (kind, text) in enumerate(updates):
        if kind == "message":
            stream.append(acp_message(text))
            by_hand.append({"type": "assistant/chunk", "delta": {"type": "text", "text": text}})
        elif kind == "thought":
            stream.append(acp_thought(text))
            by_hand.append({"type": "assistant/chunk", "delta": {"type": "reasoning", "text": text}})
        else:
            stream.append(acp_tool_call(f"t{n}", text))
            by_hand.append({"type": "x-acp-tool-call", "update": stream[-1]["params"]["update"]})
    if stop is not None:
        acp_usage = None if usage is None else {"inputTokens": usage[0], "outputTokens": usage[1], "totalTokens": sum(usage)}
        stream.append(acp_prompt_response(1, stop, acp_usage))
        mapped = {"end_turn": "completed", "max_turn_requests": "max_turns"}.get(stop, stop)
        by_hand.append({"type": "turn/end", "stopReason": mapped,
                        **({"usage": {"inputTokens": usage[0], "outputTokens": usage[1]}} if usage else {})})
    if not stream:
        return  # an empty body is refused (tested elsewhere)
    check(server, "acp", sse(stream), False, by_hand, pieces, headers={"Idempotency-Key": "prop"})
