"""The MCP face (SPEC §15): tools a parent agent calls to start, list and wait for its children.

A parent agent adds ``http://<lastword>/mcp`` as an MCP server (Streamable HTTP) and gets the
tools below with no code of its own. Each tool asks the same :class:`RunService` as the REST
routes, so ``wait_for_child_result`` answers exactly the ``CallToolResult`` that
``GET /v1/runs/{runId}/tool-result?wait=`` gives: an errored child carries its headline and its
partial text.

Choices made here:

* **Stateless transport.** Every MCP request stands alone (no ``Mcp-Session-Id``), so any replica
  behind a load balancer answers any request, as the REST API does.
* **Tokens as on REST.** The access middleware treats ``/mcp`` as a read: either token admits a
  request. The one tool that writes (``start_child_run``) also needs the ingest token when one is
  configured, checked here against the request's own ``Authorization`` header.
* **Tool errors are results.** An unknown run, a bad argument the service refuses, or a missing
  ingest token come back as ``isError: true`` with the problem's text, which a model can read and
  act on; protocol errors are left to the SDK.
* **No DNS-rebinding check of the SDK's own.** :class:`lastword.http.mcp_mount.McpMount` checks
  ``Host`` and ``Origin`` before a request reaches this face, with problem documents and the
  service's own settings (``LASTWORD_ALLOWED_HOSTS``, ``LASTWORD_CORS_ORIGINS``); the SDK's
  check would answer in plain text and could not say "any address literal".
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent
from pydantic import Field, ValidationError
from starlette.types import Receive, Scope, Send

from lastword import __version__
from lastword.errors import LastwordError
from lastword.http.access import bearer_matches
from lastword.http.views import run_view
from lastword.rules.stop_reasons import is_error
from lastword.rules.tool_result import tool_result
from lastword.schemas import RunCreate
from lastword.service import RunService
from lastword.settings import Settings

INSTRUCTIONS = (
    "lastword keeps the last word of subagent runs (children). Use start_child_run to register a "
    "child before you hand it work, wait_for_child_result to block until a child's turn ends and "
    "get its output as a tool result, list_child_runs to see every child of a parent with its "
    "status and stop reason, and read_child_transcript to get a child's history in a form a "
    "provider accepts when you continue it. A result whose isError is true names why the child stopped (for "
    "example max_tokens or cancelled) and still carries the partial text the child produced."
)

CHILDREN_LIMIT = 500

RunId = Annotated[str, Field(description="The child's runId, as given to or returned by start_child_run.")]


class McpFace:
    """The MCP server and its Streamable HTTP transport, as one ASGI app for the ``/mcp`` route."""

    def __init__(self, service: Callable[[], RunService], settings: Settings) -> None:
        self._service = service
        self._settings = settings
        self.server: MCPServer = MCPServer("lastword", version=__version__, instructions=INSTRUCTIONS)
        self._register_tools()
        self.manager = StreamableHTTPSessionManager(
            app=self.server._lowlevel_server,
            stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=settings.max_body_bytes,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The transport's task group; entered once, by :class:`lastword.http.mcp_mount.McpMount`."""
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request(scope, receive, send)

    def _register_tools(self) -> None:
        server = self.server

        @server.tool(
            name="wait_for_child_result",
            description=(
                "Wait for a child run's turn to end and return its result as your tool result. "
                "Blocks up to wait_seconds. When the turn has ended, the text is the child's "
                "output; if the child did not complete (isError true), the text starts with one "
                "line naming the stop reason (max_tokens, cancelled, timeout, refusal, error, "
                "max_turns), followed by whatever partial answer the child produced. If the turn "
                "is still running when the wait runs out, the text says so: call again to keep "
                "waiting. turn defaults to the turn current when you call."
            ),
        )
        async def wait_for_child_result(
            run_id: RunId,
            wait_seconds: Annotated[float, Field(ge=0, description="How long to wait for the turn to end.")] = 60,
            turn: Annotated[int | None, Field(ge=1, description="A turn number; the current turn when omitted.")] = None,
        ) -> CallToolResult:
            wait = min(wait_seconds, self._settings.max_wait_seconds)
            try:
                _, record = await self._service().result(run_id, turn, wait)
            except LastwordError as error:
                return _error_result(error)
            if not record.ended or record.stop_reason is None:
                return _text_result(
                    f"Child run {run_id} is still running (turn {record.turn}); "
                    "call wait_for_child_result again to keep waiting.", is_error=False)
            answer = tool_result(record.stop_reason, record.output, record.error)
            return CallToolResult(
                content=[TextContent(type="text", text=block["text"]) for block in answer["content"]],
                is_error=answer["isError"],
            )

        @server.tool(
            name="list_child_runs",
            description=(
                "List the child runs of a parent run, newest first, each with its runId, agent, "
                "status (running, idle or ended), current turn and, once that turn has ended, its "
                "stopReason. Use it to see which children are still working and which stopped "
                "early. Filter by status if you only want, say, the running ones."
            ),
        )
        async def list_child_runs(
            parent_run_id: Annotated[str, Field(description="The parent's runId.")],
            status: Annotated[Literal["running", "idle", "ended"] | None,
                              Field(description="Only children with this status.")] = None,
        ) -> CallToolResult:
            service = self._service()
            runs = await service.reads.list_runs(
                parent_run_id=parent_run_id, status=status, agent=None, limit=CHILDREN_LIMIT, before_pk=None)
            children = []
            for run in runs:
                child: dict[str, Any] = {"runId": run.run_id, "status": run.status, "turn": run.turn}
                if run.agent is not None:
                    child["agent"] = run.agent
                _, record = await service.result(run.run_id, run.turn, 0)
                if record.stop_reason is not None:
                    child["stopReason"] = record.stop_reason
                    child["isError"] = is_error(record.stop_reason)
                children.append(child)
            return _structured_result({"parentRunId": parent_run_id, "children": children})

        @server.tool(
            name="start_child_run",
            description=(
                "Register a new child run before you delegate work to a subagent, and get its "
                "runId to hand to the subagent's runtime (which reports its events to lastword). "
                "Give parent_run_id (your own runId) so the child shows under you, and agent, the "
                "subagent's name. mode 'continuable' allows further turns after the first. "
                "Creating the same run_id again with the same arguments returns the same run."
            ),
        )
        async def start_child_run(
            ctx: Context,
            parent_run_id: Annotated[str | None, Field(description="Your own runId, the child's parent.")] = None,
            agent: Annotated[str | None, Field(description="The subagent's name, e.g. 'researcher'.")] = None,
            run_id: Annotated[str | None, Field(description="A runId of your choosing; one is made if omitted.")] = None,
            mode: Annotated[Literal["oneshot", "continuable"], Field(description="oneshot: one turn.")] = "oneshot",
            metadata: Annotated[dict[str, Any] | None, Field(description="Free JSON kept with the run.")] = None,
        ) -> CallToolResult:
            if not self._may_ingest(ctx):
                return _text_result("start_child_run writes: it needs the ingest token, "
                                    "not the read token (code wrong_token_kind).", is_error=True)
            body: dict[str, Any] = {"mode": mode, "metadata": metadata or {}}
            for key, value in (("runId", run_id), ("parentRunId", parent_run_id), ("agent", agent)):
                if value is not None:
                    body[key] = value
            try:
                request = RunCreate.model_validate(body).new_run()
                run, _ = await self._service().create(request)
            except ValidationError as error:
                return _text_result(f"invalid arguments: {error.errors()[0]['msg']}", is_error=True)
            except LastwordError as error:
                return _error_result(error)
            return _structured_result(run_view(run))

        @server.tool(
            name="read_child_texts",
            description=(
                "Read every text a child run's assistant wrote in a turn, in order. Use it when the "
                "child's result only points back at something it said earlier (\"the findings are "
                "in my previous message\"): its earlier texts are here. turn defaults to the current turn."
            ),
        )
        async def read_child_texts(
            run_id: RunId,
            turn: Annotated[int | None, Field(ge=1, description="A turn number; the current turn when omitted.")] = None,
        ) -> CallToolResult:
            service = self._service()
            try:
                _, record = await service.result(run_id, turn, 0)
                texts = await service.texts(record)
            except LastwordError as error:
                return _error_result(error)
            return _structured_result({"runId": run_id, "turn": record.turn, "texts": texts})

        @server.tool(
            name="read_child_transcript",
            description=(
                "Read a child run's conversation history, ready to send back to a model when you "
                "continue or fork that child: 'anthropic' gives Messages API messages, 'openai' "
                "Chat Completions messages. It is provider-safe: empty usage-only messages, blank "
                "text and bookkeeping are left out, and tool calls cut off by a cancel or a "
                "max-tokens stop get an error result, so a provider will not refuse it. 'omitted' "
                "lists everything left out and why. turn limits the history to the end of that turn."
            ),
        )
        async def read_child_transcript(
            run_id: RunId,
            format: Annotated[Literal["anthropic", "openai"], Field(description="The provider's message format.")],  # noqa: A002
            turn: Annotated[int | None, Field(ge=1, description="History up to the end of this turn; all when omitted.")] = None,
        ) -> CallToolResult:
            try:
                transcript = await self._service().messages(run_id, format, turn)
            except LastwordError as error:
                return _error_result(error)
            return _structured_result(transcript.as_json())

    def _may_ingest(self, ctx: Context) -> bool:
        ingest_token = self._settings.token("ingest")
        if ingest_token is None:
            return True
        headers = ctx.headers or {}
        return bearer_matches(headers.get("authorization"), ingest_token)


def _text_result(text: str, *, is_error: bool) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)


def _structured_result(body: dict[str, Any]) -> CallToolResult:
    """JSON for the model to read, and the same as structured content for programs."""
    text = orjson.dumps(body).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body)


def _error_result(error: LastwordError) -> CallToolResult:
    problem = error.problem()
    return _text_result(f"{problem['detail']} (code {problem['code']})", is_error=True)
