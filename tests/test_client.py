"""The client library against a real server: typed answers, safe retries, resuming streams."""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from lastword.client.core import AsyncLastwordClient, LastwordAPIError, LastwordClient

MESSAGE = {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "done"}],
                                                    "usage": {"inputTokens": 3, "outputTokens": 4}}}


class FlakyTransport(httpx.HTTPTransport):
    """Delivers every request but loses the first answer to each POST, as a dropped connection would."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: set[str] = set()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        key = f"{request.method} {request.url.path}"
        if request.method == "POST" and key not in self.lost:
            self.lost.add(key)
            response.read()
            raise httpx.ReadError("connection dropped after the request was delivered", request=request)
        return response


class CountingTransport(httpx.HTTPTransport):
    """Records the Last-Event-ID of every stream request it carries."""

    def __init__(self) -> None:
        super().__init__()
        self.streams: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stream"):
            self.streams.append(request.headers.get("last-event-id"))
        return super().handle_request(request)


@pytest.fixture
def client(base_url: str) -> Iterator[LastwordClient]:
    with LastwordClient(base_url, backoff=0.01) as lastword:
        yield lastword


def test_the_whole_loop_with_typed_answers(client: LastwordClient) -> None:
    """create_run, push_events, push_text, end, wait_result and tool_result return typed values."""
    run = client.create_run(agent="writer")
    assert run.status == "running" and run.agent == "writer"
    assert client.push_text(run.runId, "draft ").accepted == 1
    assert client.push_events(run.runId, [MESSAGE]).accepted == 1
    assert client.tool_result(run.runId) is None  # still running
    ended = client.end(run.runId, "end_turn")
    assert ended.stopReason == "completed"
    result = client.wait_result(run.runId, timeout=5)
    assert result.output == [{"type": "text", "text": "done"}]
    assert result.usage.outputTokens == 4
    assert result.texts is None
    assert client.result(run.runId, texts=True).texts == ["done"]
    assert client.wait_result(run.runId, timeout=5, texts=True).texts == ["done"]
    tool = client.tool_result(run.runId)
    assert tool is not None and tool.content[0].text == "done" and not tool.isError


def test_retries_after_a_lost_answer_store_nothing_twice(base_url: str) -> None:
    """Each POST's first answer is lost; the retries reuse runId and eventIds, so nothing doubles."""
    transport = FlakyTransport()
    with LastwordClient(base_url, backoff=0.01, transport=transport) as flaky:
        run = flaky.create_run(agent="flaky")
        flaky.push_events(run.runId, [{"type": "assistant/chunk", "delta": {"type": "text", "text": "a"}}, MESSAGE])
        flaky.push_text(run.runId, "b")
        flaky.end(run.runId, "cancelled")
    with httpx.Client(base_url=base_url) as plain:
        runs = plain.get("/v1/runs", params={"agent": "flaky"}).json()["runs"]
        events = plain.get(f"/v1/runs/{run.runId}/events").json()["events"]
    assert len(runs) == 1
    assert [e["event"]["type"] for e in events] == [
        "subagent/start", "assistant/chunk", "assistant/message", "assistant/chunk", "subagent/end"]
    assert len(transport.lost) == 4


def test_problem_documents_become_errors(client: LastwordClient) -> None:
    """A refused request raises LastwordAPIError with the status and the problem's code."""
    with pytest.raises(LastwordAPIError) as refused:
        client.get_run("no-such-run")
    assert refused.value.status == 404 and refused.value.code == "run_not_found"
    run = client.create_run()
    with pytest.raises(LastwordAPIError) as bad:
        client.end(run.runId, "exploded")
    assert bad.value.status == 422


def test_stream_resumes_after_a_dropped_connection(client: LastwordClient, base_url: str) -> None:
    """A stream cut mid-way resumes from its last id: every message once, in order."""
    run = client.create_run(agent="streamer")
    pieces = [f"p{i} " for i in range(30)]
    received = []
    started = threading.Event()

    def produce() -> None:
        started.wait(10)
        with LastwordClient(base_url) as producer:
            for piece in pieces:
                producer.push_text(run.runId, piece)
            producer.end(run.runId, "completed")

    reconnects = CountingTransport()
    thread = threading.Thread(target=produce)
    thread.start()
    stream = client.stream(run.runId, include_chunks=True)
    for message in stream:
        received.append(message)
        if message.event == "run/snapshot":
            started.set()
        if len(received) == 10:
            # Drop the connection under the iterator; it must reconnect by itself.
            client._http.close()
            client._http = httpx.Client(base_url=base_url, timeout=30, transport=reconnects)
    thread.join(10)
    ids = [m.id for m in received]
    assert ids == sorted(set(ids)), "ids repeat or go backwards"
    texts = "".join(m.data["delta"]["text"] for m in received if m.event == "assistant/chunk")
    assert texts == "".join(pieces)
    assert received[-1].event == "subagent/end"
    # It resumed once, from an id it had read: the events it read past the 10th before the cut
    # (one network read can bring several) are not asked for again, and none is missing.
    [resumed_from] = reconnects.streams
    assert resumed_from in [str(m.id) for m in received[9:]], "the client did not resume from an id it read"


def test_async_client_matches_the_sync_one(base_url: str) -> None:
    """The async client runs the same loop and streams to subagent/end."""

    async def main() -> list[str]:
        async with AsyncLastwordClient(base_url, backoff=0.01) as client:
            run = await client.create_run(agent="async")
            await client.push_events(run.runId, [MESSAGE])
            await client.end(run.runId, "max_tokens")
            result = await client.wait_result(run.runId, timeout=5, texts=True)
            assert result.stopReason == "max_tokens" and result.isError and result.texts == ["done"]
            assert (await client.result(run.runId, texts=True)).texts == ["done"]
            tool = await client.tool_result(run.runId)
            assert tool is not None and tool.isError and "done" in tool.content[0].text
            return [message.event async for message in client.stream(run.runId, after=0)]

    assert anyio.run(main) == ["subagent/start", "subagent/end"]


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")}


def test_both_clients_have_the_same_public_methods() -> None:
    """Every public method of one client exists in the other with the same parameters and
    answer; only closing differs in name (close / aclose)."""
    sync, asynchronous = _public_methods(LastwordClient), _public_methods(AsyncLastwordClient)
    sync["aclose"] = sync.pop("close")
    assert sorted(sync) == sorted(asynchronous)
    for name, signature in sync.items():
        other = asynchronous[name]
        assert list(signature.parameters.values()) == list(other.parameters.values()), name
        # The async stream methods are async generators: AsyncIterator where the sync has Iterator.
        # The pushers are a Pusher and a StreamPusher (a thread sends) where the async client's
        # are an AsyncPusher and an AsyncStreamPusher.
        mine = re.sub(r"\b(Iterator|Pusher|StreamPusher)\b", r"Async\1", str(signature.return_annotation))
        assert mine == str(other.return_annotation), name
    for name in ("stream", "stream_all"):
        assert inspect.isasyncgenfunction(getattr(AsyncLastwordClient, name)), name
    for name in set(asynchronous) - {"stream", "stream_all", "pusher", "stream_pusher"}:
        assert inspect.iscoroutinefunction(getattr(AsyncLastwordClient, name)), name


def test_async_client_follows_the_firehose(base_url: str) -> None:
    """AsyncLastwordClient.stream_all gives every run's lifecycle events, filtered by parent."""

    async def main() -> list[tuple[str, str]]:
        with anyio.fail_after(30):
            return await follow()

    async def follow() -> list[tuple[str, str]]:
        async with AsyncLastwordClient(base_url, backoff=0.01) as client:
            parent = await client.create_run(agent="parent")
            child = await client.create_run(parent_run_id=parent.runId)
            await client.create_run(agent="stranger")
            await client.end(child.runId, "completed")
            seen = []
            async for message in client.stream_all(parent_run_id=parent.runId, after=0):
                seen.append((message.event, message.data["runId"]))
                if message.event == "subagent/end":
                    return seen
            raise AssertionError("the firehose ended")

    seen = anyio.run(main)
    assert seen[-2:] == [("subagent/start", seen[-1][1]), ("subagent/end", seen[-1][1])]
    assert {run for _, run in seen} == {seen[-1][1]}


def test_wait_result_time_outs_are_the_same_in_both_clients(base_url: str) -> None:
    """wait_result's requests carry the same ?wait= and the same time-out from either client."""

    class Recording(httpx.HTTPTransport):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str | None, object]] = []

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            self.seen.append((request.url.params.get("wait"), request.extensions["timeout"]))
            return super().handle_request(request)

    class AsyncRecording(httpx.AsyncHTTPTransport):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str | None, object]] = []

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            self.seen.append((request.url.params.get("wait"), request.extensions["timeout"]))
            return await super().handle_async_request(request)

    with LastwordClient(base_url) as setup:
        run = setup.create_run()
        setup.end(run.runId, "completed")
    sync_transport, async_transport = Recording(), AsyncRecording()
    with LastwordClient(base_url, timeout=7, transport=sync_transport) as client:
        client.wait_result(run.runId, timeout=30)

    async def wait() -> None:
        async with AsyncLastwordClient(base_url, timeout=7, transport=async_transport) as client:
            await client.wait_result(run.runId, timeout=30)

    anyio.run(wait)
    [(sync_wait, sync_timeout)] = sync_transport.seen
    [(async_wait, async_timeout)] = async_transport.seen
    assert float(sync_wait or 0) == pytest.approx(float(async_wait or 0), abs=1)
    assert sync_timeout == async_timeout or (
        isinstance(sync_timeout, dict) and isinstance(async_timeout, dict)
        and sync_timeout.keys() == async_timeout.keys()
        and all(abs(sync_timeout[k] - async_timeout[k]) < 1 for k in sync_timeout))


def test_wait_result_keeps_to_the_turn_current_when_called(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait that needs several polls answers the turn that was current when it was called,
    even when that turn ends and the next one starts between two polls."""
    monkeypatch.setattr("lastword.client.polls.WAIT_PER_REQUEST", 0.2)  # a poll ends while turn 1 runs
    first_poll_answered, next_turn_started = threading.Event(), threading.Event()

    class PausingAfterFirstPoll(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = super().handle_request(request)
            if request.url.path.endswith("/result") and not first_poll_answered.is_set():
                first_poll_answered.set()
                assert next_turn_started.wait(30)
            return response

    with LastwordClient(base_url) as setup:
        run = setup.create_run(mode="continuable")
    results: list[Any] = []
    with LastwordClient(base_url, transport=PausingAfterFirstPoll()) as waiter:
        thread = threading.Thread(target=lambda: results.append(waiter.wait_result(run.runId, timeout=3)))
        thread.start()
        assert first_poll_answered.wait(30)
        with httpx.Client(base_url=base_url) as api:
            api.post(f"/v1/runs/{run.runId}/end", json={"stopReason": "completed"}).raise_for_status()
            api.post(f"/v1/runs/{run.runId}/turns").raise_for_status()
        next_turn_started.set()
        thread.join(30)
    [result] = results
    assert (result.turn, result.status, result.stopReason) == (1, "ended", "completed")
