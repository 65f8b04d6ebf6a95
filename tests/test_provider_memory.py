"""What a provider body costs the server's memory (issue 22, item 6), measured in a real ``lastword serve``.

The figure is the rise of the server process's peak resident memory (``VmHWM``, reset just before
the body is sent) over its resident memory then, as a ratio to the body's size, in one run: no
timing is asserted. The worst body for it is the longest list of the smallest events, a 16 MB
(the default body limit) stream of one-character deltas: about 145,000 events. Staged as dicts,
such a body raised the peak by twenty times its size.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.servers import ServerProcess

pytestmark = pytest.mark.slow

#: The goal of issue 22: a body raises the peak by at most four times its size.
MOST = 4.0
BODY_BYTES = 16 * 1024 * 1024 - 4096


def memory(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of a process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) * 1024
    return found


def reset_peak(pid: int) -> None:
    """Make ``VmHWM`` start again from the current resident memory (Linux ``clear_refs`` 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


def anthropic_events(message_id: str, block: dict[str, Any], delta: dict[str, Any], count: int) -> list[dict[str, Any]]:
    return [
        {"type": "message_start", "message": {"id": message_id, "type": "message", "role": "assistant",
                                              "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *[{"type": "content_block_delta", "index": 0, "delta": delta}] * count,
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]


Body = tuple[bytes, str, str]  # the body, its media type, its format


def text_deltas_sse(message_id: str, size: int) -> Body:
    """An SSE body of one-character text deltas, as long as the body limit allows."""
    one = len(sse([{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}}]))
    events = anthropic_events(message_id, {"type": "text", "text": ""}, {"type": "text_delta", "text": "a"},
                              size // one - 10)
    return sse(events), "text/event-stream", "anthropic"


def input_deltas_json(message_id: str, size: int) -> Body:
    """A JSON array whose one tool call's input comes a character at a time (every delta goes
    into the message's ``source``, none makes a chunk)."""
    delta = {"type": "input_json_delta", "partial_json": " "}
    one = len(orjson.dumps({"type": "content_block_delta", "index": 0, "delta": delta})) + 1
    events = anthropic_events(message_id, {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}},
                              delta, size // one - 10)
    events[2]["delta"] = {"type": "input_json_delta", "partial_json": '{"q": 1'}
    events[-4]["delta"] = {"type": "input_json_delta", "partial_json": "}"}
    return orjson.dumps(events), "application/json", "anthropic"


def argument_deltas_sse(response_id: str, size: int) -> Body:
    """An OpenAI Responses SSE body whose one function call's arguments come a character at a
    time (every delta goes into the message's ``source``)."""
    delta = {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": " "}
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "look", "arguments": ""}
    done = {**call, "arguments": '{"q": 1}', "status": "completed"}
    count = size // len(sse([delta])) - 10
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": response_id, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": call},
        *[delta] * count,
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": {"id": response_id, "status": "completed", "output": [done],
                                                    "usage": {"input_tokens": 3, "output_tokens": 9}}},
    ]
    return sse(events), "text/event-stream", "openai-responses"


@pytest.mark.parametrize("make_body", [text_deltas_sse, input_deltas_json, argument_deltas_sse],
                         ids=["sse-text-deltas", "json-input-deltas", "openai-argument-deltas"])
def test_a_body_of_tiny_events_raises_peak_memory_by_at_most_four_times_its_size(
    database_url: str, tmp_path: Path, make_body: Callable[[str, int], Body]
) -> None:
    """A 16 MB body of one-character deltas raises the server's peak memory by at most 4x its size."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning"}, tmp_path)
    with contextlib.closing(server.start()), httpx.Client(base_url=server.url, timeout=300) as api:
        assert server.process is not None
        api.post("/v1/runs", json={"runId": "big"}).raise_for_status()
        warm_up(api, [("big", make_body("msg_warm", 200_000))])
        body = make_body("msg_big", BODY_BYTES)
        answers, ratio = peak_ratio(api, server.process.pid, [("big", body)])
        print(f"{make_body.__name__}: body {len(body[0])} bytes, peak rose {ratio:.2f}x")
        assert ratio <= MOST, f"a {len(body[0])}-byte body raised the peak by {ratio:.2f}x its size"
        assert_stored_whole(api, "big", answers[0])


def test_four_bodies_at_once_raise_peak_memory_by_at_most_four_times_their_size(
    database_url: str, tmp_path: Path
) -> None:
    """Four 16 MB bodies sent at once (the worst shape, a JSON array of tool-input deltas) raise
    the server's peak memory by at most four times their total size."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning"}, tmp_path)
    runs = [f"big-{number}" for number in range(4)]
    with contextlib.closing(server.start()), httpx.Client(base_url=server.url, timeout=300) as api:
        assert server.process is not None
        for run in runs:
            api.post("/v1/runs", json={"runId": run}).raise_for_status()
        warm_up(api, [(run, input_deltas_json(f"msg_warm_{run}", 200_000)) for run in runs])
        bodies = [(run, input_deltas_json(f"msg_big_{run}", BODY_BYTES)) for run in runs]
        answers, ratio = peak_ratio(api, server.process.pid, bodies)
        print(f"four bodies at once: {sum(len(body[0]) for _, body in bodies)} bytes, peak rose {ratio:.2f}x")
        assert ratio <= MOST, f"four bodies at once raised the peak by {ratio:.2f}x their size"
        for run, answer in zip(runs, answers, strict=True):
            assert_stored_whole(api, run, answer)


def send(api: httpx.Client, run: str, body: Body) -> httpx.Response:
    content, media, format = body
    return api.post(f"/v1/runs/{run}/ingest/{format}", content=content, headers={"content-type": media})


def warm_up(api: httpx.Client, bodies: list[tuple[str, Body]]) -> None:
    """The first body of a kind loads code and fills caches that are not its cost."""
    for run, body in bodies:
        answer = send(api, run, body)
        assert answer.status_code == 200, answer.text


def peak_ratio(api: httpx.Client, pid: int, bodies: list[tuple[str, Body]]) -> tuple[list[dict[str, Any]], float]:
    """Send ``bodies`` at once; their answers, and the rise of the server's peak memory over its
    memory before, as a ratio to their total size."""
    reset_peak(pid)
    before = memory(pid)["VmRSS"]
    with ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(lambda item: send(api, *item), bodies))
    peak = memory(pid)["VmHWM"]
    for response in responses:
        assert response.status_code == 200, response.text
    return [response.json() for response in responses], (peak - before) / sum(len(body[0]) for _, body in bodies)


def assert_stored_whole(api: httpx.Client, run: str, answer: dict[str, Any]) -> None:
    last = api.get(f"/v1/runs/{run}/events", params={"limit": 1, "after": answer["lastSeq"] - 1}).json()
    assert last["events"][0]["event"]["type"] == "assistant/message"
