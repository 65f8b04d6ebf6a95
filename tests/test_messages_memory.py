"""``GET /v1/runs/{runId}/messages`` reads a run's log a page at a time (issue 22, item 9), measured in
a real ``lastword serve``.

A run of 100,000 one-character chunks over three turns (about 6 MB in the log) is asked for its
transcript. Holding every event of the run as a dict to build it raised the server's peak memory
by several times the log; read a page at a time, the transcript holds one page and what it has
assembled. The figure is the rise of the peak (``VmHWM``, reset just before) as a ratio to the
bytes the log holds, in one run: no timing. The answer is the same whatever the paging.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import orjson
import pytest

from tests.servers import ServerProcess
from tests.test_provider_memory import memory, reset_peak

pytestmark = pytest.mark.slow

TURNS = 3
#: Chunks a turn, pushed this many at a time (the batch limit).
CHUNKS = 34_000
BATCH = 10_000
#: The goal: the transcript's peak rises by at most the size of the log it reads.
MOST = 1.0


def letter(turn: int, number: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[(turn * 7 + number) % 26]


def push_turn(api: httpx.Client, run: str, turn: int) -> int:
    """One turn: a user message, then ``CHUNKS`` one-character text chunks; the bytes sent."""
    sent = 0
    events = [{"type": "user/message", "message": {"content": f"question {turn}"}}]
    events += [{"type": "assistant/chunk", "delta": {"type": "text", "text": letter(turn, n)}} for n in range(CHUNKS)]
    events.append({"type": "turn/end", "stopReason": "end_turn"})
    for start in range(0, len(events), BATCH):
        body = b"\n".join(orjson.dumps(event) for event in events[start:start + BATCH])
        answer = api.post(f"/v1/runs/{run}/events", content=body, headers={"content-type": "application/x-ndjson"})
        assert answer.status_code == 200, answer.text
        sent += len(body)
    return sent


def test_the_transcript_of_a_run_of_many_chunks_is_read_a_page_at_a_time(database_url: str, tmp_path: Path) -> None:
    """The transcript of 102,000 chunks raises the peak by at most the bytes of the log, and is
    each turn's question and its whole streamed text, in both formats."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning"}, tmp_path)
    with contextlib.closing(server.start()), httpx.Client(base_url=server.url, timeout=300) as api:
        assert server.process is not None
        api.post("/v1/runs", json={"runId": "long", "leaseSeconds": 0, "mode": "continuable"}).raise_for_status()
        logged = 0
        for turn in range(1, TURNS + 1):
            if turn > 1:
                api.post("/v1/runs/long/turns").raise_for_status()
            logged += push_turn(api, "long", turn)
        api.get("/v1/runs/long/messages", params={"format": "anthropic"}).raise_for_status()  # warm up
        reset_peak(server.process.pid)
        before = memory(server.process.pid)["VmRSS"]
        answer = api.get("/v1/runs/long/messages", params={"format": "anthropic"})
        peak = memory(server.process.pid)["VmHWM"]
        assert answer.status_code == 200, answer.text
        ratio = (peak - before) / logged
        print(f"/messages of {TURNS * CHUNKS} chunks ({logged} bytes logged): the peak rose {ratio:.2f}x")
        texts = ["".join(letter(turn, n) for n in range(CHUNKS)) for turn in range(1, TURNS + 1)]
        expected = []
        for turn, text in enumerate(texts, 1):
            expected += [{"role": "user", "content": [{"type": "text", "text": f"question {turn}"}]},
                         {"role": "assistant", "content": [{"type": "text", "text": text}]}]
        assert answer.json()["messages"] == expected
        openai = api.get("/v1/runs/long/messages", params={"format": "openai"}).json()["messages"]
        assert [message["content"] for message in openai] == [
            part for turn, text in enumerate(texts, 1) for part in (f"question {turn}", text)
        ]
        assert ratio <= MOST, f"/messages raised the peak by {ratio:.2f}x the log it read"
