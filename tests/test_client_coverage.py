"""The clients cover the REST API: every operation of openapi/openapi.json has a method of both
clients that calls it, and calling each method against a real server sends its operation."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest
from lastword.client.core import AsyncLastwordClient, LastwordClient, StreamMessage
from lastword.schemas import ForkOf, Selection

from tests.servers import free_port, threaded_server

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = json.loads((ROOT / "openapi" / "openapi.json").read_text())
CODEX_BODY = ROOT / "tests" / "cli_children" / "fixtures" / "codex" / "max_tokens_partial.ndjson"

Operation = tuple[str, str]

#: Each REST operation (method, path as the document writes it) and the client methods that call it.
CLIENT_METHODS: dict[Operation, tuple[str, ...]] = {
    ("GET", "/healthz"): ("health",),
    ("GET", "/livez"): ("live",),
    ("GET", "/readyz"): ("ready",),
    ("GET", "/metrics"): ("metrics",),
    ("GET", "/v1/runs"): ("list_runs",),
    ("POST", "/v1/runs"): ("create_run",),
    ("GET", "/v1/runs/{runId}"): ("get_run",),
    ("GET", "/v1/runs/{runId}/children"): ("join",),
    ("POST", "/v1/runs/{runId}/chunks"): ("push_text", "push_text_stream"),
    ("POST", "/v1/runs/{runId}/close"): ("close_run",),
    ("GET", "/v1/runs/{runId}/deliveries"): ("deliveries",),
    ("POST", "/v1/runs/{runId}/end"): ("end",),
    ("GET", "/v1/runs/{runId}/events"): ("events",),
    ("POST", "/v1/runs/{runId}/events"): ("push_events", "pusher", "stream_pusher"),
    ("POST", "/v1/runs/{runId}/ingest/{format}"): ("push_provider_stream", "ingest_cli_stream"),
    ("GET", "/v1/runs/{runId}/messages"): ("messages",),
    ("GET", "/v1/runs/{runId}/result"): ("result", "wait_result"),
    ("GET", "/v1/runs/{runId}/stream"): ("stream",),
    ("GET", "/v1/runs/{runId}/tool-result"): ("tool_result",),
    ("POST", "/v1/runs/{runId}/turns"): ("next_turn",),
    ("GET", "/v1/stream"): ("stream_all",),
}


#: Documented operations that are not lastword's own API: the Durable Streams protocol (SPEC §17)
#: is spoken to by Durable Streams clients (tests/test_ds_client.py drives PyPI's, and the
#: protocol's conformance suite every operation, tests/test_durable_streams.py), not by ours.
FOREIGN_PREFIXES = ("/ds/",)


def documented_operations() -> set[Operation]:
    return {(method.upper(), path) for path, item in DOCUMENT["paths"].items()
            for method in item if method in ("get", "post", "put", "patch", "delete")
            and not path.startswith(FOREIGN_PREFIXES)}


def test_every_documented_operation_has_a_method_in_both_clients() -> None:
    """A new operation in openapi.json fails here until the clients can call it (and a removed one
    until its entry goes)."""
    documented = documented_operations()
    assert sorted(documented - set(CLIENT_METHODS)) == [], "operations no client method calls"
    assert sorted(set(CLIENT_METHODS) - documented) == [], "operations the document no longer has"
    for names in CLIENT_METHODS.values():
        for name in names:
            assert callable(getattr(LastwordClient, name, None)), name
            assert callable(getattr(AsyncLastwordClient, name, None)), name


_TEMPLATES = [(operation, re.compile(re.sub(r"\{[^}]+\}", "[^/]+", operation[1]) + "$"))
              for operation in CLIENT_METHODS]


def operation_of(request: httpx.Request) -> Operation:
    for (method, path), pattern in _TEMPLATES:
        if method == request.method and pattern.match(request.url.path):
            return method, path
    raise AssertionError(f"{request.method} {request.url.path} is no documented operation")


class Recording(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[Operation] = set()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.add(operation_of(request))
        return super().handle_request(request)


class AsyncRecording(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[Operation] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.add(operation_of(request))
        return await super().handle_async_request(request)


@pytest.fixture
def server(make_settings: Any) -> Iterator[str]:
    """A server that lets webhooks target loopback (the one given here: nothing listens there)."""
    with threaded_server(make_settings(webhook_allow_private=True)) as url:
        yield url


MESSAGE = {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "done"}],
                                                    "usage": {"inputTokens": 3, "outputTokens": 4}}}
ACP_LINE = (b'{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": '
            b'{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "acp "}}}}\n')

Call = Callable[..., Awaitable[Any]]


async def every_method(call: Call) -> None:
    """Each method of the client once, in an order a parent and its children might use them,
    with its typed answer checked."""
    parent = await call("create_run", agent="cov-parent", mode="continuable")
    child = await call("create_run", parent_run_id=parent.runId, agent="cov-child",
                       selection=Selection(joinContinuations=True),
                       webhook={"url": f"http://127.0.0.1:{free_port()}/hook"})
    assert child.selection is not None and child.selection.joinContinuations
    assert (await call("get_run", child.runId)).agent == "cov-child"
    assert (await call("push_text", child.runId, "draft ")).accepted == 1
    assert (await call("push_text_stream", child.runId, ["str", "eamed "])).accepted >= 1
    await call("pusher", child.runId)
    await call("stream_pusher", child.runId)
    assert (await call("push_provider_stream", child.runId, "acp", ACP_LINE)).accepted >= 1
    assert (await call("push_events", child.runId, [MESSAGE])).accepted == 1
    assert (await call("tool_result", child.runId)) is None
    assert (await call("end", child.runId, "end_turn")).stopReason == "completed"
    assert (await call("result", child.runId)).status == "ended"
    assert (await call("wait_result", child.runId, timeout=5)).output == [{"type": "text", "text": "done"}]
    tool = await call("tool_result", child.runId)
    assert tool is not None and not tool.isError
    joined = await call("join", parent.runId, timeout=5, expect=1)
    assert joined.done and [c.runId for c in joined.children] == [child.runId]
    first = await call("events", child.runId, limit=2)
    assert [e.seq for e in first.events] == [1, 2]
    rest = await call("events", child.runId, after=first.nextAfter)
    assert rest.events[0].seq == 3 and rest.events[-1].event["type"] == "subagent/end"
    transcript = await call("messages", child.runId, "openai")
    assert transcript.format == "openai" and transcript.messages
    [delivery] = (await call("deliveries", child.runId)).deliveries
    assert delivery.turn == 1
    listed = await call("list_runs", parent_run_id=parent.runId, include_result=True, limit=5)
    assert [r.runId for r in listed.runs] == [child.runId] and listed.runs[0].result is not None
    fork = await call("create_run", fork_of=ForkOf(runId=child.runId, afterSeq=2))
    assert fork.forkOf == ForkOf(runId=child.runId, afterSeq=2)
    streamed = await call("stream", child.runId)
    assert streamed[-1] == "subagent/end"
    assert await call("stream_all") in ("subagent/start", "subagent/end", "run/closed")
    cli = await call("create_run", agent="cov-cli")
    assert (await call("ingest_cli_stream", cli.runId, "codex", CODEX_BODY.read_text().splitlines())).stopReason
    await call("end", parent.runId, "end_turn")
    assert (await call("next_turn", parent.runId)).turn == 2
    assert (await call("close_run", parent.runId)).status == "ended"
    for probe in ("health", "live", "ready"):
        assert (await call(probe)).status in ("ok", "ready")
    assert "lastword_" in await call("metrics")


def check(used: dict[str, set[Operation]]) -> None:
    """Every method was called and sent the operation it is listed for."""
    for operation, names in CLIENT_METHODS.items():
        for name in names:
            assert name in used, f"{name} was not called"
            assert operation in used[name], f"{name} sent {sorted(used[name])}, not {operation}"


def test_each_method_of_the_sync_client_sends_its_operation(server: str) -> None:
    transport = Recording()
    used: dict[str, set[Operation]] = {}
    with LastwordClient(server, backoff=0.01, transport=transport) as client:

        async def call(name: str, *args: Any, **kwargs: Any) -> Any:
            transport.seen = set()
            answer: Any
            if name in ("pusher", "stream_pusher"):
                with getattr(client, name)(*args, **kwargs) as pusher:
                    pusher.push_text(f"{name} ")
                answer = None
            elif name == "stream":
                answer = [message.event for message in client.stream(*args, after=0, **kwargs)]
            elif name == "stream_all":
                messages = cast(Generator[StreamMessage, None, None], client.stream_all(after=0))
                answer = next(messages).event
                messages.close()
            else:
                answer = getattr(client, name)(*args, **kwargs)
            used.setdefault(name, set()).update(transport.seen)
            return answer

        anyio.run(every_method, call)
    check(used)


def test_each_method_of_the_async_client_sends_its_operation(server: str) -> None:
    transport = AsyncRecording()
    used: dict[str, set[Operation]] = {}

    async def main() -> None:
        async with AsyncLastwordClient(server, backoff=0.01, transport=transport) as client:

            async def call(name: str, *args: Any, **kwargs: Any) -> Any:
                transport.seen = set()
                answer: Any
                if name in ("pusher", "stream_pusher"):
                    async with getattr(client, name)(*args, **kwargs) as pusher:
                        pusher.push_text(f"{name} ")
                    answer = None
                elif name == "stream":
                    answer = [message.event async for message in client.stream(*args, after=0, **kwargs)]
                elif name == "stream_all":
                    messages = cast(AsyncGenerator[StreamMessage, None], client.stream_all(after=0))
                    answer = (await anext(messages)).event
                    await messages.aclose()
                else:
                    answer = await getattr(client, name)(*args, **kwargs)
                used.setdefault(name, set()).update(transport.seen)
                return answer

            await every_method(call)

    anyio.run(main)
    check(used)
