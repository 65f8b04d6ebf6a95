"""The SSE streams (SPEC §8, §9): a run's stream, the firehose, resume, keep-alive, slow readers.

Every test talks to a real server over a real connection with an SSE client library, and reads
with a deadline (``tests.sse``), so a stream that stops sending fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from tests.builders import chunk, create_run_async, message, text
from tests.servers import threaded_server
from tests.sse import WAIT_SECONDS, ids, open_stream, payload, strictly_increasing

pytestmark = pytest.mark.anyio

LIFECYCLE = {"subagent/start", "subagent/end", "run/closed"}


async def post_events(client: httpx.AsyncClient, run_id: str, *events: dict[str, Any]) -> None:
    response = await client.post(f"/v1/runs/{run_id}/events", json=list(events))
    assert response.status_code == 200, response.text


async def end(client: httpx.AsyncClient, run_id: str, stop_reason: str = "completed") -> dict[str, Any]:
    response = await client.post(f"/v1/runs/{run_id}/end", json={"stopReason": stop_reason})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def log(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The run's whole durable log, every page."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = (await client.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 1000})).json()
        events.extend(page["events"])
        if not page["events"]:
            return events
        after = page["nextAfter"]


def as_logged(events: list[Any]) -> list[tuple[int, str, Any]]:
    """SSE events as (id, type, body), to compare with the log."""
    return [(int(event.id), event.event, payload(event)) for event in events]


def log_entries(logged: list[dict[str, Any]], types: set[str], after: int) -> list[tuple[int, str, Any]]:
    return [
        (entry["seq"], entry["event"]["type"], entry["event"])
        for entry in logged
        if entry["seq"] > after and entry["event"]["type"] in types
    ]


async def refused(client: httpx.AsyncClient, path: str, **kwargs: Any) -> httpx.Response:
    """GET a stream that should be refused; bounded, since a stream opened by mistake never ends."""
    async with asyncio.timeout(WAIT_SECONDS):
        return await client.get(path, **kwargs)


# -- a run's stream ------------------------------------------------------------------------


async def test_run_stream_opens_with_a_snapshot_of_the_run_and_its_current_result(
    client: httpx.AsyncClient,
) -> None:
    """A fresh subscription's first event is run/snapshot: the run and the output selected so far."""
    run_id = await create_run_async(client, agent="researcher")
    await post_events(client, run_id, message(text("so far"), usage={"inputTokens": 3, "outputTokens": 2}))
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        snapshot = await stream.next()
    assert snapshot.event == "run/snapshot"
    body = payload(snapshot)
    assert body["run"]["runId"] == run_id
    assert body["run"]["status"] == "running"
    assert body["result"]["status"] == "running"
    assert body["result"]["output"] == [text("so far")]
    assert body["result"]["usage"]["outputTokens"] == 2
    assert int(snapshot.id) == body["run"]["lastSeq"]


async def test_oneshot_stream_sends_subagent_end_and_then_closes(client: httpx.AsyncClient) -> None:
    """A oneshot run's stream delivers subagent/end when the turn ends and then closes."""
    run_id = await create_run_async(client)
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        snapshot = await stream.next()
        await post_events(client, run_id, message(text("done")))
        await end(client, run_id)
        rest = await stream.until_closed()
    assert [event.event for event in rest] == ["subagent/end"]
    assert strictly_increasing(ids([snapshot, *rest]))
    assert payload(rest[0])["stopReason"] == "completed"


async def test_stream_of_an_ended_oneshot_run_is_just_the_snapshot(client: httpx.AsyncClient) -> None:
    """Subscribing to a finished oneshot run gives its final snapshot and closes."""
    run_id = await create_run_async(client)
    await post_events(client, run_id, message(text("final")))
    await end(client, run_id, "max_tokens")
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        events = await stream.until_closed()
    assert [event.event for event in events] == ["run/snapshot"]
    result = payload(events[0])["result"]
    assert (result["status"], result["stopReason"], result["output"]) == ("ended", "max_tokens", [text("final")])


async def test_continuable_stream_stays_open_across_turns_and_closes_after_close(
    client: httpx.AsyncClient,
) -> None:
    """A continuable run's stream carries every turn's start and end, then run/closed, then closes."""
    run_id = await create_run_async(client, mode="continuable")
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        seen = [await stream.next()]
        await post_events(client, run_id, message(text("turn one")))
        await end(client, run_id)
        seen.append(await stream.next())
        assert (await client.post(f"/v1/runs/{run_id}/turns")).status_code == 201
        seen.append(await stream.next())
        await post_events(client, run_id, message(text("turn two")))
        await end(client, run_id)
        seen.append(await stream.next())
        assert (await client.post(f"/v1/runs/{run_id}/close")).status_code == 200
        seen.extend(await stream.until_closed())
    assert [(event.event, payload(event).get("turn")) for event in seen] == [
        ("run/snapshot", None),
        ("subagent/end", 1),
        ("subagent/start", 2),
        ("subagent/end", 2),
        ("run/closed", None),
    ]
    assert [payload(event)["lastAssistantMessage"] for event in seen if event.event == "subagent/end"] == [
        [text("turn one")],
        [text("turn two")],
    ]
    assert strictly_increasing(ids(seen))


async def test_chunks_are_streamed_only_with_include_chunks(client: httpx.AsyncClient) -> None:
    """?include=chunks adds the live assistant/chunk deltas in order; without it there are none."""
    run_id = await create_run_async(client)
    deltas = ["Hel", "lo, ", "wor", "ld"]
    async with (
        open_stream(client, f"/v1/runs/{run_id}/stream?include=chunks") as with_chunks,
        open_stream(client, f"/v1/runs/{run_id}/stream") as without,
    ):
        await with_chunks.next()
        await without.next()
        for delta in deltas:
            await post_events(client, run_id, chunk(delta))
        await client.post(f"/v1/runs/{run_id}/chunks", content=b"!", headers={"content-type": "text/plain"})
        await end(client, run_id, "cancelled")
        chunked = await with_chunks.until_closed()
        plain = await without.until_closed()
    assert [payload(event)["delta"]["text"] for event in chunked if event.event == "assistant/chunk"] == [
        *deltas,
        "!",
    ]
    assert [event.event for event in chunked][-1] == "subagent/end"
    assert strictly_increasing(ids(chunked))
    assert [event.event for event in plain] == ["subagent/end"]
    assert payload(plain[0])["lastAssistantMessage"] == [text("Hello, world!")]


async def test_idle_stream_sends_keepalive_comments(client: httpx.AsyncClient) -> None:
    """While nothing happens, the stream sends SSE comment lines, so proxies keep it open."""
    run_id = await create_run_async(client)
    comments: list[str] = []
    async with client.stream("GET", f"/v1/runs/{run_id}/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        async with asyncio.timeout(WAIT_SECONDS):
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    comments.append(line)
                    break
    assert comments and "ping" in comments[0]


async def test_unknown_run_stream_is_a_404_problem(client: httpx.AsyncClient) -> None:
    """Subscribing to a run that does not exist is refused with a 404 problem document."""
    response = await refused(client, "/v1/runs/no-such-run/stream")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "run_not_found"


async def test_bad_last_event_id_is_a_400_problem(client: httpx.AsyncClient) -> None:
    """A Last-Event-ID the stream could never have sent is refused with a 400 problem document."""
    run_id = await create_run_async(client)
    for bad_id in ("abc", "-3", "1.5", str(2**64)):
        for path in (f"/v1/runs/{run_id}/stream", "/v1/stream"):
            response = await refused(client, path, headers={"Last-Event-ID": bad_id})
            assert response.status_code == 400, (path, bad_id)
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.json()["code"] == "invalid_last_event_id"


async def test_resume_point_past_the_end_of_the_stream_is_a_400_problem(client: httpx.AsyncClient) -> None:
    """Resuming after an id the stream has not reached yet is refused, not silently waited for."""
    run_id = await create_run_async(client)
    past = str((await client.get(f"/v1/runs/{run_id}")).json()["lastSeq"] + 1000)
    for path in (f"/v1/runs/{run_id}/stream", "/v1/stream"):
        for response in (
            await refused(client, path, headers={"Last-Event-ID": past}),
            await refused(client, path, params={"after": past}),
        ):
            assert response.status_code == 400, path
            assert response.json()["code"] == "invalid_last_event_id"


async def test_bad_after_is_a_422_problem(client: httpx.AsyncClient) -> None:
    """An ?after= that is not a 64-bit id is refused with a 422 problem document."""
    run_id = await create_run_async(client)
    for after in ("-1", "abc", str(2**64)):
        for path in (f"/v1/runs/{run_id}/stream", "/v1/stream"):
            response = await refused(client, path, params={"after": after})
            assert response.status_code == 422, (path, after)
            assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize("resume_by", ["Last-Event-ID", "after"])
async def test_run_stream_resumes_after_a_disconnect_with_nothing_lost_or_repeated(
    client: httpx.AsyncClient, resume_by: str
) -> None:
    """Reconnecting with the last id received gives exactly the events that followed it."""
    run_id = await create_run_async(client)

    async def produce() -> None:
        for index in range(40):
            await post_events(client, run_id, chunk(f"<{index}>"))
        await end(client, run_id, "cancelled")

    path = f"/v1/runs/{run_id}/stream?include=chunks"
    async with open_stream(client, path) as stream:
        snapshot = await stream.next()
        producer = asyncio.create_task(produce())
        first = await stream.take(10)
    # Disconnected while the producer keeps going.
    last = first[-1].id
    if resume_by == "after":
        async with open_stream(client, f"{path}&after={last}") as stream:
            second = await stream.until_closed()
    else:
        async with open_stream(client, path, last_event_id=last) as stream:
            second = await stream.until_closed()
    await asyncio.wait_for(producer, WAIT_SECONDS)

    received = first + second
    assert "run/snapshot" not in [event.event for event in second]
    assert strictly_increasing(ids(received))
    wanted = log_entries(await log(client, run_id), LIFECYCLE | {"assistant/chunk"}, int(snapshot.id))
    assert as_logged(received) == wanted
    assert received[-1].event == "subagent/end"


async def test_resume_from_the_snapshot_id_gives_what_followed_the_snapshot(client: httpx.AsyncClient) -> None:
    """The snapshot's id is a resume point: resuming from it yields only later events."""
    run_id = await create_run_async(client, mode="continuable")
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        snapshot = await stream.next()
    await end(client, run_id)
    await client.post(f"/v1/runs/{run_id}/close")
    async with open_stream(client, f"/v1/runs/{run_id}/stream", last_event_id=snapshot.id) as stream:
        events = await stream.until_closed()
    assert [event.event for event in events] == ["subagent/end", "run/closed"]


async def test_subagent_end_carries_the_same_output_as_the_result(client: httpx.AsyncClient) -> None:
    """subagent/end's lastAssistantMessage is the result's output, even after an empty final message."""
    run_id = await create_run_async(client)
    partial = [text("partial answer"), {"type": "tool_call", "id": "c1", "name": "grep", "input": {"q": "x"}}]
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        await stream.next()
        await post_events(
            client, run_id,
            message(*partial, usage={"inputTokens": 5, "outputTokens": 7}),
            {"type": "tool/result", "toolCallId": "c1", "content": "found"},
            message(usage={"inputTokens": 9, "outputTokens": 4096}),
        )
        await end(client, run_id, "max_output_tokens")
        (ended,) = await stream.until_closed()
    result = (await client.get(f"/v1/runs/{run_id}/result")).json()
    assert result["output"] == partial
    assert payload(ended)["lastAssistantMessage"] == result["output"]
    assert payload(ended)["stopReason"] == result["stopReason"] == "max_tokens"
    assert payload(ended)["usage"] == result["usage"]


@pytest.mark.parametrize("mode", ["oneshot", "continuable"])
async def test_subagent_end_without_output_has_no_last_assistant_message(
    client: httpx.AsyncClient, mode: str
) -> None:
    """When the output is empty, subagent/end has no lastAssistantMessage key at all."""
    run_id = await create_run_async(client, mode=mode)
    async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
        await stream.next()
        await post_events(client, run_id, message(text("   "), usage={"inputTokens": 1, "outputTokens": 1}))
        await end(client, run_id, "error")
        ended = await stream.next()
    assert ended.event == "subagent/end"
    assert "lastAssistantMessage" not in payload(ended)
    assert (await client.get(f"/v1/runs/{run_id}/result")).json()["output"] == []


async def test_slow_subscriber_receives_every_event_in_order_once_it_reads(make_settings: Any) -> None:
    """A subscriber that stops reading while its buffer overflows still gets every event, once."""
    with threaded_server(make_settings(subscriber_buffer=3)) as url:
        async with (
            httpx.AsyncClient(base_url=url, timeout=WAIT_SECONDS) as client,
            httpx.AsyncClient(base_url=url, timeout=WAIT_SECONDS) as reader,
        ):
            run_id = await create_run_async(client)
            async with open_stream(reader, f"/v1/runs/{run_id}/stream?include=chunks") as stream:
                snapshot = await stream.next()
                # Not reading: batches far larger than the buffer, and more bytes (16 MB) than
                # the connection holds, so the server's sender stalls while events keep coming.
                filler = "x" * 40_000
                for batch in range(40):
                    chunks = [chunk(f"[{batch}.{index}]{filler}") for index in range(10)]
                    await post_events(client, run_id, *chunks)
                await end(client, run_id, "cancelled")
                received = await stream.until_closed()
            wanted = log_entries(await log(client, run_id), LIFECYCLE | {"assistant/chunk"}, int(snapshot.id))
    assert len(wanted) == 401
    assert as_logged(received) == wanted


async def test_keepalives_never_reach_an_sse_client_as_events(make_settings: Any) -> None:
    """Between events, keep-alives are invisible to an SSE client library: no phantom events."""
    with threaded_server(make_settings(keepalive_seconds=0.2)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT_SECONDS) as client:
            run_id = await create_run_async(client)
            async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
                await stream.next()
                await asyncio.sleep(1.0)  # several keep-alives go by
                await end(client, run_id)
                rest = await stream.until_closed()
    assert [event.event for event in rest] == ["subagent/end"]


async def open_subscriptions(client: httpx.AsyncClient) -> float:
    metrics = (await client.get("/metrics")).text
    (line,) = [line for line in metrics.splitlines() if line.startswith("lastword_sse_subscribers ")]
    return float(line.split()[1])


async def test_subscriber_gauge_counts_open_streams_and_returns_to_zero(client: httpx.AsyncClient) -> None:
    """lastword_sse_subscribers counts open streams, and drops back when they close or clients leave."""
    run_id = await create_run_async(client)
    async with open_stream(client, "/v1/stream") as firehose:
        async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
            await stream.next()
            assert await open_subscriptions(client) == 2
            await end(client, run_id)
            await stream.until_closed()
        await firehose.next()
    # The server learns of the firehose client's departure a moment later.
    async with asyncio.timeout(WAIT_SECONDS):
        while await open_subscriptions(client) != 0:
            await asyncio.sleep(0.05)


# -- the firehose --------------------------------------------------------------------------


async def test_firehose_carries_lifecycle_events_of_every_run(client: httpx.AsyncClient) -> None:
    """/v1/stream gets every run's subagent/start and subagent/end, and no chunks or messages."""
    async with open_stream(client, "/v1/stream") as stream:
        parent = await create_run_async(client, agent="lead")
        child = await create_run_async(client, parentRunId=parent, agent="worker")
        await post_events(client, child, chunk("hidden"), message(text("child answer")))
        await end(client, child)
        await end(client, parent)
        events = await stream.take(4)
    assert [(event.event, payload(event)["runId"]) for event in events] == [
        ("subagent/start", parent),
        ("subagent/start", child),
        ("subagent/end", child),
        ("subagent/end", parent),
    ]
    assert payload(events[1])["parentRunId"] == parent
    assert payload(events[2])["lastAssistantMessage"] == [text("child answer")]
    assert strictly_increasing(ids(events))


async def test_firehose_filters_by_parent_run(client: httpx.AsyncClient) -> None:
    """?parentRunId= limits the firehose to that parent's children."""
    parent = await create_run_async(client)
    async with open_stream(client, f"/v1/stream?parentRunId={parent}") as stream:
        other = await create_run_async(client)
        child = await create_run_async(client, parentRunId=parent)
        stranger = await create_run_async(client, parentRunId=other)
        await end(client, stranger)
        await end(client, parent)
        await end(client, child)
        events = await stream.take(2)
        # A later child of the parent comes next, not the other runs' events.
        late = await create_run_async(client, parentRunId=parent)
        events.append(await stream.next())
    assert [(event.event, payload(event)["runId"]) for event in events] == [
        ("subagent/start", child),
        ("subagent/end", child),
        ("subagent/start", late),
    ]


@pytest.mark.parametrize("resume_by", ["Last-Event-ID", "after"])
async def test_firehose_resumes_with_nothing_lost_or_repeated(client: httpx.AsyncClient, resume_by: str) -> None:
    """A firehose reconnecting with its last id gets exactly the lifecycle events that followed."""
    async with open_stream(client, "/v1/stream") as stream:
        first_runs = [await create_run_async(client) for _ in range(3)]
        first = await stream.take(3)
    later_runs = [await create_run_async(client) for _ in range(2)]
    for run_id in first_runs + later_runs:
        await end(client, run_id)
    if resume_by == "after":
        resumed = open_stream(client, f"/v1/stream?after={first[-1].id}")
    else:
        resumed = open_stream(client, "/v1/stream", last_event_id=first[-1].id)
    async with resumed as stream:
        second = await stream.take(7)
    async with open_stream(client, "/v1/stream?after=0") as stream:
        everything = await stream.take(10)
    assert as_logged(first + second) == as_logged(everything)
    assert strictly_increasing(ids(first + second))
    assert [payload(event)["runId"] for event in second] == later_runs + first_runs + later_runs


async def test_a_client_that_stops_reading_is_cut_off_and_resumes_without_loss(make_settings: Any) -> None:
    """After LASTWORD_SSE_SEND_TIMEOUT_SECONDS with a send stuck, the server closes the stream,
    unfinished (no last chunk), and frees the subscription; the client resumes from its last id."""
    # 2 s, not less: the resumed stream below replays some 13 MB to httpx in this process (the
    # server's too); under a loaded CI its reads stalled past 0.5 s and it was cut off as well.
    with threaded_server(make_settings(sse_send_timeout_seconds=2.0)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT_SECONDS) as client:
            run_id = await create_run_async(client)
            host, port = url.removeprefix("http://").split(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills fast
            sock.connect((host, int(port)))
            sock.sendall(f"GET /v1/runs/{run_id}/stream?include=chunks HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            while await open_subscriptions(client) != 1:
                await asyncio.sleep(0.01)
            # Not reading: far more bytes (16 MB) than the connection holds, so a send gets stuck.
            filler = "x" * 40_000
            for batch in range(40):
                await post_events(client, run_id, *[chunk(f"[{batch}.{index}]{filler}") for index in range(10)])
            await end(client, run_id, "cancelled")
            deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
            while await open_subscriptions(client) != 0:
                assert asyncio.get_running_loop().time() < deadline, "the stuck stream was never cut off"
                await asyncio.sleep(0.05)
            received = await asyncio.to_thread(_read_to_eof, sock)
            assert not received.endswith(b"0\r\n\r\n"), "a cut stream must not look complete"
            sent_ids = [int(line[4:]) for line in received.split(b"\r\n") if line.startswith(b"id: ")]
            # The last id may belong to a message that was cut in half; resume from the one before.
            resume_at = sent_ids[-2]
            async with open_stream(client, f"/v1/runs/{run_id}/stream?include=chunks",
                                   last_event_id=str(resume_at)) as stream:
                rest = await stream.until_closed()
            wanted = log_entries(await log(client, run_id), LIFECYCLE | {"assistant/chunk"}, resume_at)
    assert as_logged(rest) == wanted
    assert wanted[-1][1] == "subagent/end"


def _read_to_eof(sock: socket.socket) -> bytes:
    sock.settimeout(WAIT_SECONDS)
    received = bytearray()
    with sock:
        while piece := sock.recv(1 << 16):
            received += piece
    return bytes(received)


async def test_a_request_pipelined_behind_a_stream_is_answered_after_its_last_chunk(client: httpx.AsyncClient) -> None:
    """HTTP/1.1 lets a client send its next request on a connection whose response is still
    streaming: it is answered once the stream has ended whole, on the same connection."""
    run_id = await create_run_async(client)
    host, port = str(client.base_url).removeprefix("http://").rstrip("/").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT_SECONDS)
    with sock:
        sock.sendall(f"GET /v1/runs/{run_id}/stream HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        first = await asyncio.to_thread(_read_until, sock, b"event: run/snapshot")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await post_events(client, run_id, chunk("a"))
        await end(client, run_id)
        received = first + await asyncio.to_thread(_read_to_eof, sock)
    stream, last_chunk, after = received.partition(b"\r\n0\r\n\r\nHTTP/1.1 ")
    assert last_chunk, received[-300:]
    assert stream.count(b"HTTP/1.1 ") == 1 and b"event: subagent/end" in stream
    assert after.startswith(b"200 ")


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    received = bytearray()
    while marker not in received:
        piece = sock.recv(1 << 16)
        assert piece, "the connection closed"
        received += piece
    return bytes(received)
