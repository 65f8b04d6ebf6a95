"""The MCP face (SPEC §15), driven by the official ``mcp`` SDK's client against a real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from lastword import __version__
from lastword.cli.demo import run_scenario
from mcp import Client
from mcp.client._transport import Transport
from mcp.client.streamable_http import streamable_http_client

from tests.servers import threaded_server
from tests.polling import wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def secured_url(make_settings: Any) -> Iterator[str]:
    with threaded_server(make_settings(ingest_token="in-secret", read_token="read-secret")) as url:
        yield url


@asynccontextmanager
async def mcp_client(base_url: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        transport: Transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport) as client:
            yield client


def wait_for_parked_waiter(base_url: str) -> None:
    """Return once the server reports a long poll parked on a turn end (bounded)."""
    with httpx.Client(base_url=base_url) as http:
        wait_until(lambda: "lastword_result_waiters 1.0" in http.get("/metrics").text, "the wait is parked")


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content)


def test_the_mcp_sdk_is_loaded_only_when_mcp_is_first_called() -> None:
    """Building and serving the app does not import the MCP SDK (a restart stays fast)."""
    code = ("import sys\nfrom lastword.main import create_app\ncreate_app()\n"
            "print('mcp' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_the_server_names_itself_with_the_package_version(base_url: str) -> None:
    """The MCP handshake says which lastword answers: its name and the package's version."""
    async with mcp_client(base_url) as client:
        info = client.server_info
    assert info is not None
    assert (info.name, info.version) == ("lastword", __version__)


async def test_tools_are_listed_with_descriptions_and_schemas(base_url: str) -> None:
    """A parent sees the tools with descriptions written for a model and typed inputs."""
    async with mcp_client(base_url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"wait_for_child_result", "list_child_runs", "start_child_run", "read_child_transcript",
                          "read_child_texts"}
    wait = tools["wait_for_child_result"]
    assert "partial" in (wait.description or "")
    assert wait.input_schema["required"] == ["run_id"]
    assert set(wait.input_schema["properties"]) == {"run_id", "wait_seconds", "turn"}


async def test_wait_answers_the_rest_tool_result_for_a_child_cut_at_max_tokens(base_url: str) -> None:
    """The parent waits over MCP while the child runs; it gets exactly the REST tool result."""
    async with mcp_client(base_url) as client:
        started = await client.call_tool("start_child_run", {"parent_run_id": "parent-1", "agent": "researcher"})
        assert not started.is_error
        child = started.structured_content["runId"]
        async with anyio.create_task_group() as group:
            answers: list[Any] = []

            async def wait() -> None:
                answers.append(await client.call_tool("wait_for_child_result", {"run_id": child, "wait_seconds": 60}))

            group.start_soon(wait)
            # The child plays only once the server holds the wait parked (its gauge says so).
            await anyio.to_thread.run_sync(wait_for_parked_waiter, base_url)
            await anyio.to_thread.run_sync(lambda: run_scenario("max-tokens-partial", base_url, run_id=child))
        [result] = answers
    with httpx.Client(base_url=base_url) as http:
        rest = http.get(f"/v1/runs/{child}/tool-result").json()
    assert result.is_error is True
    assert [{"type": block.type, "text": block.text} for block in result.content] == rest["content"]
    assert "max_tokens" in text_of(result).splitlines()[0]
    assert "two pass a path, one passes a dict." in text_of(result)


async def test_list_children_shows_status_and_stop_reason(base_url: str) -> None:
    """Children of a parent are listed with status and, once ended, the stop reason."""
    with httpx.Client(base_url=base_url) as http:
        for run_id in ("kid-a", "kid-b"):
            http.post("/v1/runs", json={"runId": run_id, "parentRunId": "boss", "agent": "worker"}).raise_for_status()
        http.post("/v1/runs", json={"runId": "stranger"}).raise_for_status()
        http.post("/v1/runs/kid-a/end", json={"stopReason": "cancelled"}).raise_for_status()
    async with mcp_client(base_url) as client:
        listed = (await client.call_tool("list_child_runs", {"parent_run_id": "boss"})).structured_content
        running = (await client.call_tool("list_child_runs", {"parent_run_id": "boss", "status": "running"}))
    children = {child["runId"]: child for child in listed["children"]}
    assert set(children) == {"kid-a", "kid-b"}
    assert children["kid-a"]["status"] == "ended"
    assert children["kid-a"]["stopReason"] == "cancelled"
    assert children["kid-a"]["isError"] is True
    assert children["kid-b"]["status"] == "running"
    assert "stopReason" not in children["kid-b"]
    assert [child["runId"] for child in running.structured_content["children"]] == ["kid-b"]


async def test_unknown_run_is_a_tool_error_naming_it(base_url: str) -> None:
    """Waiting on a run that does not exist answers isError with the problem's text, at once."""
    async with mcp_client(base_url) as client:
        result = await client.call_tool("wait_for_child_result", {"run_id": "no-such-run", "wait_seconds": 30})
    assert result.is_error is True
    assert "no-such-run" in text_of(result)
    assert "run_not_found" in text_of(result)


async def test_still_running_after_the_wait_says_so_without_error(base_url: str) -> None:
    """A wait that runs out while the child works is not an error, and says to call again."""
    with httpx.Client(base_url=base_url) as http:
        http.post("/v1/runs", json={"runId": "busy"}).raise_for_status()
    async with mcp_client(base_url) as client:
        result = await client.call_tool("wait_for_child_result", {"run_id": "busy", "wait_seconds": 0})
    assert result.is_error is False
    assert "still running" in text_of(result)


async def test_tokens_apply_as_on_rest(secured_url: str) -> None:
    """No token: 401 before MCP; read token: reads work, starting a child is refused; ingest token: all."""
    async with httpx.AsyncClient() as http:
        refused = await http.post(f"{secured_url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                  headers={"accept": "application/json, text/event-stream"})
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    async with mcp_client(secured_url, "read-secret") as client:
        denied = await client.call_tool("start_child_run", {"agent": "x", "run_id": "not-made"})
        assert denied.is_error is True and "ingest token" in text_of(denied)
        missing = await client.call_tool("wait_for_child_result", {"run_id": "not-made", "wait_seconds": 0})
        assert missing.is_error is True  # the refused start created nothing
    async with mcp_client(secured_url, "in-secret") as client:
        made = await client.call_tool("start_child_run", {"agent": "x", "run_id": "made"})
        assert not made.is_error and made.structured_content["runId"] == "made"


async def test_transcript_is_the_rest_messages_answer_for_both_formats(base_url: str) -> None:
    """read_child_transcript gives what GET …/messages gives: the partial answer kept, the empty
    usage-only message omitted, the cut-off tool call answered with an error."""
    run_id = run_scenario("max-tokens-partial", base_url)
    async with mcp_client(base_url) as client:
        answers = {fmt: await client.call_tool("read_child_transcript", {"run_id": run_id, "format": fmt})
                   for fmt in ("anthropic", "openai")}
        unknown = await client.call_tool("read_child_transcript", {"run_id": "nobody", "format": "openai"})
    with httpx.Client(base_url=base_url) as http:
        for fmt, answer in answers.items():
            rest = http.get(f"/v1/runs/{run_id}/messages", params={"format": fmt}).json()
            assert not answer.is_error
            assert answer.structured_content == rest
    anthropic = answers["anthropic"].structured_content
    assert any(o["reason"] == "empty" for o in anthropic["omitted"])
    texts = [b["text"] for m in anthropic["messages"] if m["role"] == "assistant"
             for b in m["content"] if b["type"] == "text"]
    assert "Found three call sites of parse_config; two pass a path, one passes a dict." in texts
    assert unknown.is_error is True and "run_not_found" in text_of(unknown)


async def test_texts_are_the_rest_results_texts(base_url: str) -> None:
    """read_child_texts gives what GET …/result?include=texts gives: every text of the turn, the
    partial answer before the usage-only max-tokens message among them."""
    run_id = run_scenario("max-tokens-partial", base_url)
    async with mcp_client(base_url) as client:
        answer = await client.call_tool("read_child_texts", {"run_id": run_id})
        unknown = await client.call_tool("read_child_texts", {"run_id": "nobody"})
    with httpx.Client(base_url=base_url) as http:
        rest = http.get(f"/v1/runs/{run_id}/result", params={"include": "texts"}).json()
    assert not answer.is_error
    assert answer.structured_content == {"runId": run_id, "turn": rest["turn"], "texts": rest["texts"]}
    assert "Found three call sites of parse_config; two pass a path, one passes a dict." in rest["texts"]
    assert unknown.is_error is True and "run_not_found" in text_of(unknown)


LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "localhost.evil.example", "rebind.test."])
async def test_a_host_it_does_not_serve_is_refused(base_url: str, host: str) -> None:
    """DNS rebinding: a request whose Host is a name the service was not given is 403, before MCP."""
    async with httpx.AsyncClient() as http:
        refused = await http.post(f"{base_url}/mcp", json=LIST_TOOLS, headers={"host": host, **MCP_ACCEPT})
    assert refused.status_code == 403 and refused.json()["code"] == "host_not_allowed"
    assert "LASTWORD_ALLOWED_HOSTS" in refused.json()["detail"]


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:1234", "127.0.0.1:9", "[::1]:8000", "10.1.2.3", "sidecar.pod",
                                  "lastword.svc.cluster.local:8000"])
async def test_loopback_addresses_and_configured_names_are_served(make_settings: Any, host: str) -> None:
    """Loopback names, any address literal, LASTWORD_HOST and LASTWORD_ALLOWED_HOSTS are served (any port)."""
    settings = make_settings(host="sidecar.pod", allowed_hosts="lastword.svc.cluster.local, other.example")
    with threaded_server(settings) as url:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{url}/mcp", json=LIST_TOOLS, headers={"host": host, **MCP_ACCEPT})
    assert answer.status_code == 200, answer.text


async def test_any_host_when_told(make_settings: Any) -> None:
    """LASTWORD_ALLOWED_HOSTS='*' turns the Host check off (the operator's choice, behind their own proxy)."""
    with threaded_server(make_settings(allowed_hosts="*")) as url:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{url}/mcp", json=LIST_TOOLS, headers={"host": "anything.example", **MCP_ACCEPT})
    assert answer.status_code == 200


async def test_a_foreign_origin_is_refused_on_every_method(base_url: str) -> None:
    """A page on another origin cannot open /mcp's stream either (GET), nor post to it."""
    async with httpx.AsyncClient() as http:
        get = await http.get(f"{base_url}/mcp", headers={"origin": "https://evil.example", **MCP_ACCEPT})
        post = await http.post(f"{base_url}/mcp", json=LIST_TOOLS,
                               headers={"origin": "https://evil.example", **MCP_ACCEPT})
        own = await http.post(f"{base_url}/mcp", json=LIST_TOOLS, headers={"origin": base_url, **MCP_ACCEPT})
    assert get.status_code == 403 and get.json()["code"] == "cross_origin"
    assert post.status_code == 403 and post.json()["code"] == "cross_origin"
    assert own.status_code == 200
