"""What a provider body costs the server's memory (issue 22, item 6), measured in a real ``lastword serve``.

The figure is the rise of the server process's peak resident memory (``VmHWM``, reset just before
the body is sent) over its resident memory then, as a ratio to the body's size, in one run: no
timing is asserted. The worst body for it is the longest list of the smallest events, a 16 MB
(the default body limit) stream of one-character deltas: about 145,000 events. Staged as dicts,
such a body raised the peak by twenty times its size.
"""

from __future__ import annotations

import contextlib
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


def text_deltas_sse(message_id: str, size: int) -> tuple[bytes, str]:
    """An SSE body of one-character text deltas, as long as the body limit allows."""
    one = len(sse([{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}}]))
    events = anthropic_events(message_id, {"type": "text", "text": ""}, {"type": "text_delta", "text": "a"},
                              size // one - 10)
    return sse(events), "text/event-stream"


def input_deltas_json(message_id: str, size: int) -> tuple[bytes, str]:
    """A JSON array whose one tool call's input comes a character at a time (every delta goes
    into the message's ``source``, none makes a chunk)."""
    delta = {"type": "input_json_delta", "partial_json": " "}
    one = len(orjson.dumps({"type": "content_block_delta", "index": 0, "delta": delta})) + 1
    events = anthropic_events(message_id, {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}},
                              delta, size // one - 10)
    events[2]["delta"] = {"type": "input_json_delta", "partial_json": '{"q": 1'}
    events[-4]["delta"] = {"type": "input_json_delta", "partial_json": "}"}
    return orjson.dumps(events), "application/json"


@pytest.mark.parametrize("make_body", [
    text_deltas_sse,
    # Measured 11.6x (from 17.9x): the assembled message is copied whole several times on its
    # way to the store (encoded, staged, read back, decoded to str for the row).
    pytest.param(input_deltas_json, marks=pytest.mark.xfail(strict=True, reason="one 16 MB message is copied whole")),
], ids=["sse-text-deltas", "json-input-deltas"])
def test_a_body_of_tiny_events_raises_peak_memory_by_at_most_four_times_its_size(
    database_url: str, tmp_path: Path, make_body: Callable[[str, int], tuple[bytes, str]]
) -> None:
    """A 16 MB body of one-character deltas raises the server's peak memory by at most 4x its size."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning"}, tmp_path)
    with contextlib.closing(server.start()), httpx.Client(base_url=server.url, timeout=300) as api:
        assert server.process is not None
        pid = server.process.pid
        api.post("/v1/runs", json={"runId": "big"}).raise_for_status()
        # Warm up: the first body of a kind loads code and fills caches that are not its cost.
        small, media = make_body("msg_warm", 200_000)
        warm = api.post("/v1/runs/big/ingest/anthropic", content=small, headers={"content-type": media})
        assert warm.status_code == 200, warm.text
        body, media = make_body("msg_big", BODY_BYTES)
        reset_peak(pid)
        before = memory(pid)["VmRSS"]
        answer = api.post("/v1/runs/big/ingest/anthropic", content=body, headers={"content-type": media})
        assert answer.status_code == 200, answer.text
        peak = memory(pid)["VmHWM"]
        ratio = (peak - before) / len(body)
        print(f"{make_body.__name__}: body {len(body)} bytes, peak rose {peak - before} bytes: {ratio:.2f}x")
        assert ratio <= MOST, f"a {len(body)}-byte body raised the peak by {ratio:.2f}x its size"
        last = api.get("/v1/runs/big/events", params={"limit": 1, "after": answer.json()["lastSeq"] - 1}).json()
        assert last["events"][0]["event"]["type"] == "assistant/message"

