"""Durability (SPEC §10): every acknowledged ingest survives ``kill -9``, and a restart loses nothing.

These tests run ``lastword serve`` as a real process on a SQLite file, kill it with SIGKILL (no
shutdown code runs), start it again on the same file and read everything back over HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import connect_sse

from tests.api_helpers import accepted, logged
from tests.builders import chunk, message, usage
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: Per-request bound; keep-alives are rarer than this, so a stalled stream times out.
TIMEOUT = 10.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {
        "LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
        "LASTWORD_LEASE_SECONDS": "3600",
        "LASTWORD_KEEPALIVE_SECONDS": "60",
        "LASTWORD_LOG_LEVEL": "warning",
    }
    process = ServerProcess(env, cwd=REPO).start()
    try:
        yield process
    finally:
        process.kill()


def restarted(server: ServerProcess) -> httpx.Client:
    """``kill -9`` the server, start it again on the same file; a client for it."""
    server.kill()
    server.start()
    return httpx.Client(base_url=server.url, timeout=TIMEOUT)


def ndjson(*events: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(event) + b"\n" for event in events)






def state(client: httpx.Client, run_id: str) -> dict[str, Any]:
    """Everything a reader can learn about a run: the run, every turn's result, the whole log."""
    run = accepted(client.get(f"/v1/runs/{run_id}"))
    results = [accepted(client.get(f"/v1/runs/{run_id}/result", params={"turn": turn}))
               for turn in range(1, run["turn"] + 1)]
    return {"run": run, "results": results, "log": logged(client, run_id)}


def test_every_acknowledged_event_and_result_survives_kill_9(server: ServerProcess) -> None:
    """After kill -9 and a restart, every acknowledged event, run and result reads back the same."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        runs = {}
        # A JSON batch with eventIds, ended by turn/end in a second batch.
        runs["json"] = accepted(client.post("/v1/runs", json={"agent": "json"}))["runId"]
        accepted(client.post(f"/v1/runs/{runs['json']}/events", json=[
            chunk("Look", "j1"), chunk("ing.", "j2"),
            message("Looked at it.", usage=usage(10, 4), event_id="j3"),
            {"type": "tool/result", "toolCallId": "t1", "content": "ok", "eventId": "j4"},
            {"type": "x-trace", "span": "abc"},
            message(usage=usage(12, 4096), event_id="j5"),
        ]))
        accepted(client.post(f"/v1/runs/{runs['json']}/events",
                             json={"type": "turn/end", "stopReason": "length", "eventId": "j6"}))
        # NDJSON, with and without eventIds, ended over /end.
        runs["ndjson"] = accepted(client.post("/v1/runs", json={"agent": "ndjson"}))["runId"]
        accepted(client.post(
            f"/v1/runs/{runs['ndjson']}/events",
            content=ndjson(chunk("Draft ", "n1"), chunk("answer"), {"type": "step/finish"}),
            headers={"content-type": "application/x-ndjson"},
        ))
        accepted(client.post(f"/v1/runs/{runs['ndjson']}/end", json={"stopReason": "cancelled"}))
        # Bare chunk text, streamed and as JSON; left open.
        runs["chunks"] = accepted(client.post("/v1/runs", json={"agent": "chunks"}))["runId"]
        accepted(client.post(f"/v1/runs/{runs['chunks']}/chunks",
                             content=iter([b"streamed ", "t\xc3".encode("latin-1"), b"\xa9xt "]),
                             headers={"content-type": "text/plain"}))
        accepted(client.post(f"/v1/runs/{runs['chunks']}/chunks", json={"text": "before the crash", "eventId": "c1"}))
        # A continuable run: turn 1 ended, turn 2 open.
        runs["continuable"] = accepted(client.post("/v1/runs", json={"mode": "continuable"}))["runId"]
        accepted(client.post(f"/v1/runs/{runs['continuable']}/events", json=[message("first turn", usage=usage(1, 1))]))
        accepted(client.post(f"/v1/runs/{runs['continuable']}/end", json={"stopReason": "end_turn"}))
        accepted(client.post(f"/v1/runs/{runs['continuable']}/turns"))
        accepted(client.post(f"/v1/runs/{runs['continuable']}/events", json=[chunk("second turn", "k1")]))
        before = {name: state(client, run_id) for name, run_id in runs.items()}

    with restarted(server) as client:
        after = {name: state(client, run_id) for name, run_id in runs.items()}
        assert after == before
        # Spot checks of what the results say, so an empty state cannot pass for a kept one.
        assert before["json"]["results"][0]["output"] == [{"type": "text", "text": "Looked at it."}]
        assert before["json"]["results"][0]["stopReason"] == "max_tokens"
        assert before["ndjson"]["results"][0]["output"] == [{"type": "text", "text": "Draft answer"}]
        assert before["chunks"]["results"][0]["output"] == [{"type": "text", "text": "streamed téxt before the crash"}]
        assert [r["status"] for r in before["continuable"]["results"]] == ["ended", "running"]

        # A retried batch is recognised across the restart: counted, not stored again.
        retry = accepted(client.post(f"/v1/runs/{runs['chunks']}/chunks",
                                     json={"text": "before the crash", "eventId": "c1"}))
        assert (retry["accepted"], retry["duplicates"]) == (0, 1)


def test_open_turns_go_on_after_kill_9_with_their_earlier_events(server: ServerProcess) -> None:
    """A turn open at the crash accepts events after the restart, and its result holds both sides."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        oneshot = accepted(client.post("/v1/runs", json={}))["runId"]
        accepted(client.post(f"/v1/runs/{oneshot}/events", json=[chunk("Half an "), chunk("answer")]))
        continuable = accepted(client.post("/v1/runs", json={"mode": "continuable"}))["runId"]
        accepted(client.post(f"/v1/runs/{continuable}/events",
                             json=[message("kept", usage=usage(100, 20)), message(usage=usage(5, 4096))]))
        last_seq = accepted(client.get(f"/v1/runs/{oneshot}"))["lastSeq"]

    with restarted(server) as client:
        appended = accepted(client.post(f"/v1/runs/{oneshot}/events", json=[chunk(", finished.")]))
        assert appended["lastSeq"] == last_seq + 1  # seq goes on; nothing is reused
        result = accepted(client.post(f"/v1/runs/{oneshot}/end", json={"stopReason": "cancelled"}))
        assert result["output"] == [{"type": "text", "text": "Half an answer, finished."}]

        accepted(client.post(f"/v1/runs/{continuable}/events", json=[message(usage=usage(7, 4096))]))
        result = accepted(client.post(f"/v1/runs/{continuable}/end", json={"stopReason": "max_tokens"}))
        assert result["output"] == [{"type": "text", "text": "kept"}]
        assert (result["usage"]["inputTokens"], result["usage"]["outputTokens"]) == (112, 8212)
        tool_result = accepted(client.get(f"/v1/runs/{continuable}/tool-result"))
        assert tool_result["isError"] is True
        assert tool_result["content"][0]["text"].endswith("\n\nkept")


def test_every_acknowledged_batch_is_wholly_present_after_kill_9_mid_stream(server: ServerProcess) -> None:
    """Killed while batches stream in: each acknowledged batch is all there, and no batch is in part."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        run_id = accepted(client.post("/v1/runs", json={}))["runId"]
    size = 8
    acknowledged: list[int] = []
    enough = threading.Event()

    def produce() -> None:
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as producer:
            for batch in range(100_000):
                events = [chunk(f"{batch}.{index} ", f"b{batch}-{index}") for index in range(size)]
                try:
                    response = producer.post(f"/v1/runs/{run_id}/events", json=events)
                except httpx.TransportError:
                    return  # the server is gone
                if response.status_code != 200:
                    return
                acknowledged.append(batch)
                if len(acknowledged) >= 30:
                    enough.set()

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert enough.wait(TIMEOUT * 3), "the producer made no progress"
        server.kill()  # while the producer keeps sending
    finally:
        producer.join(TIMEOUT)
    assert not producer.is_alive()

    with restarted(server) as client:
        stored = [entry for entry in logged(client, run_id) if entry["event"]["type"] == "assistant/chunk"]
    batches: dict[int, list[str]] = {}
    for entry in stored:
        batch, index = entry["event"]["eventId"][1:].split("-")
        batches.setdefault(int(batch), []).append(index)
    assert set(acknowledged) <= set(batches)
    assert all(indexes == [str(i) for i in range(size)] for indexes in batches.values())
    assert sorted(batches) == list(range(len(batches)))  # acknowledged in order, so no gaps either
    seqs = [entry["seq"] for entry in stored]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_a_stream_resumes_across_a_restart_with_nothing_lost_or_repeated(server: ServerProcess) -> None:
    """An SSE client cut off by kill -9 resumes on the restarted server from its last id."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        run_id = accepted(client.post("/v1/runs", json={}))["runId"]
        received = []
        with connect_sse(client, "GET", f"/v1/runs/{run_id}/stream?include=chunks") as source:
            events = source.iter_sse()
            snapshot = next(events)
            for text in ("one ", "two "):
                accepted(client.post(f"/v1/runs/{run_id}/events", json=[chunk(text)]))
                received.append(next(events))
            server.kill()
            with pytest.raises(httpx.TransportError):
                next(events)
    with restarted(server) as client:
        accepted(client.post(f"/v1/runs/{run_id}/events", json=[chunk("three")]))
        accepted(client.post(f"/v1/runs/{run_id}/end", json={"stopReason": "cancelled"}))
        with connect_sse(client, "GET", f"/v1/runs/{run_id}/stream?include=chunks",
                         headers={"Last-Event-ID": received[-1].id}) as source:
            received.extend(source.iter_sse())
        since = [entry for entry in logged(client, run_id) if entry["seq"] > int(snapshot.id)]
    assert [(int(e.id), e.event) for e in received] == [(x["seq"], x["event"]["type"]) for x in since]
    assert received[-1].event == "subagent/end"
    assert '"lastAssistantMessage":[{"type":"text","text":"one two three"}]' in received[-1].data
