"""OpenAI Agents SDK children (agents used as tools) streamed into lastword child runs.

``pip install 'lastword[openai-agents]'``, then make the tool with :func:`as_tool` where you used
``agent.as_tool(...)`` (it takes the same arguments)::

    from lastword.integrations.openai_agents import as_tool

    researcher_tool = as_tool(researcher, lastword=lw, parent_run_id="plan-1",
                              tool_name="research", tool_description="Research a question")
    planner = Agent(name="planner", tools=[researcher_tool], ...)

A handoff hands the run itself to another agent: iterate ``stream_events(result, lastword=lw,
run_id="plan-1")`` in place of ``result.stream_events()`` (``result`` from ``Runner.run_streamed``)
and the starting agent's part goes into ``plan-1``, the part of the agent it handed off to into
``plan-1.{call_id}`` (the handoff's function call id), and so on down a chain of handoffs.

Each call of the tool is a child run ``{parent_run_id}.{call_id}`` (``call_id``: the parent
model's function call id; ``agent``: the child agent's name). The child agent's run is streamed
into it through the SDK's public ``on_stream`` callback of ``Agent.as_tool`` as it happens, over
one NDJSON ``POST /v1/runs/{id}/events`` (lastword's stream pusher): its text deltas, each model
response as an ``assistant/message`` with its finish reason and usage, its tool results
(:mod:`lastword.integrations.agents_events`). The child's turn always ends: ``max_turns`` when the
SDK stops it at ``max_turns``, ``cancelled`` when the parent is cancelled, ``error`` naming the
exception when the child's run fails (a model API error), else the last response's stop
(``max_tokens`` when the output-token ceiling cut it) or ``completed``. So the child answers its
partial text in lastword however it stopped.

The parent's own run is not changed: the tool returns what ``Agent.as_tool`` returns, a failure
gives the parent model what your ``failure_error_function`` (or the SDK's default) says, and an
exception the SDK would raise is raised. Should lastword not take a child's events, that is logged
(logger ``lastword.integrations``) and the parent's run goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents import Agent, FunctionTool, MaxTurnsExceeded, RunResultStreaming, StreamEvent
from agents.tool import default_tool_error_function

from lastword.client.aio import AsyncLastwordClient
from lastword.client.stream_pusher import AsyncStreamPusher
from lastword.integrations.agents_events import AgentRunEvents

__all__ = ["as_tool", "child_run_id", "stream_events"]

logger = logging.getLogger("lastword.integrations")

ErrorFunction = Callable[[Any, Exception], Any]


def child_run_id(parent_run_id: str, call_id: str) -> str:
    """The run of the child that answers the parent's call ``call_id``."""
    return f"{parent_run_id}.{call_id}"


class _Child:
    """One call's child run: its events on their way in, and how it ended."""

    def __init__(self, lastword: AsyncLastwordClient, run_id: str, pusher: AsyncStreamPusher) -> None:
        self._lastword = lastword
        self.run_id = run_id
        self._pusher = pusher
        self.events = AgentRunEvents()
        self.ended = False

    def take(self, stream_event: Any) -> None:
        events = self.events.events(stream_event)
        if events and not self.ended:
            try:
                self._pusher.push_events(events)
            except Exception as trouble:  # a pusher that failed says so again at the end
                logger.warning("lastword: the events of run %s could not be sent: %r", self.run_id, trouble)

    async def end(self, stop_reason: str, error: dict[str, Any] | None = None) -> None:
        """Make what was pushed durable, then end the turn (once)."""
        if self.ended:
            return
        self.ended = True
        try:
            await self._pusher.close()
        except Exception as trouble:
            logger.warning("lastword: the events of run %s could not be stored: %r", self.run_id, trouble)
        try:
            await self._lastword.end(self.run_id, stop_reason, error=error)
        except Exception as trouble:
            logger.warning("lastword: run %s could not be ended %s: %r", self.run_id, stop_reason, trouble)

    async def end_after(self, raised: BaseException) -> None:
        cancelled = isinstance(raised, (asyncio.CancelledError, GeneratorExit)) or isinstance(
            getattr(raised, "cancelled_error", None), asyncio.CancelledError)
        if cancelled:
            await self.end("cancelled")
        elif isinstance(raised, MaxTurnsExceeded):
            await self.end("max_turns", {"message": str(raised), "type": "MaxTurnsExceeded"})
        else:
            error = {"message": f"{type(raised).__name__}: {raised}", "type": type(raised).__name__}
            # The SDK raises when a response was cut (ModelBehaviorError for `response.incomplete`):
            # the turn keeps the stop it actually ended with (§6), not a generic error.
            await self.end(self.events.last_stop or "error", error)


class _Children:
    """The child runs of one tool, by the parent's call id."""

    def __init__(self, lastword: AsyncLastwordClient, parent_run_id: str, agent: str) -> None:
        self._lastword = lastword
        self._parent_run_id = parent_run_id
        self._agent = agent
        self._by_call: dict[str, _Child] = {}

    async def start(self, call_id: str) -> _Child | None:
        run_id = child_run_id(self._parent_run_id, call_id)
        try:
            await self._lastword.create_run(run_id, parent_run_id=self._parent_run_id, agent=self._agent)
        except Exception as trouble:
            logger.warning("lastword: run %s could not be created: %r", run_id, trouble)
            return None
        child = _Child(self._lastword, run_id, self._lastword.stream_pusher(run_id))
        self._by_call[call_id] = child
        return child

    async def open(self, run_id: str, parent_run_id: str | None, agent: str | None) -> _Child | None:
        """A run of its own for one part of a streamed run (a handoff's target)."""
        try:
            await self._lastword.create_run(run_id, parent_run_id=parent_run_id, agent=agent)
        except Exception as trouble:
            logger.warning("lastword: run %s could not be created: %r", run_id, trouble)
            return None
        return _Child(self._lastword, run_id, self._lastword.stream_pusher(run_id))

    def on_stream(self, theirs: Callable[[Any], Any] | None) -> Callable[[Any], Awaitable[None]]:
        async def on_stream(payload: Any) -> None:
            call = payload.get("tool_call")
            child = self._by_call.get(getattr(call, "call_id", None) or "")
            if child is not None:
                child.take(payload.get("event"))
            if theirs is not None:
                result = theirs(payload)
                if inspect.isawaitable(result):
                    await result
        return on_stream

    def on_failure(self, theirs: ErrorFunction | None) -> ErrorFunction | None:
        """The caller's failure function (the SDK's default unless given), after the child's end."""
        if theirs is None:
            return None  # the SDK raises; the invocation's wrapper ends the child

        async def on_failure(context: Any, error: Exception) -> Any:
            child = self._by_call.get(getattr(context, "tool_call_id", None) or "")
            if child is not None:
                await child.end_after(error)
            result = theirs(context, error)
            return await result if inspect.isawaitable(result) else result
        return on_failure

    def forget(self, call_id: str) -> None:
        self._by_call.pop(call_id, None)


def as_tool(
    agent: Agent[Any], tool_name: str | None = None, tool_description: str | None = None, *,
    lastword: AsyncLastwordClient, parent_run_id: str, on_stream: Callable[[Any], Any] | None = None,
    failure_error_function: ErrorFunction | None = default_tool_error_function, **options: Any,
) -> FunctionTool:
    """``agent.as_tool(...)`` whose every call streams the child's run into a lastword child run
    (see the module's docstring); ``options`` are the rest of ``Agent.as_tool``'s arguments."""
    children = _Children(lastword, parent_run_id, agent.name)
    tool = agent.as_tool(tool_name, tool_description, on_stream=children.on_stream(on_stream),
                         failure_error_function=children.on_failure(failure_error_function), **options)
    invoke_inner = tool.on_invoke_tool

    async def invoke(context: Any, arguments: str) -> Any:
        call_id = str(getattr(context, "tool_call_id", ""))
        child = await children.start(call_id)
        try:
            output = await invoke_inner(context, arguments)
        except BaseException as raised:
            if child is not None:
                await child.end_after(raised)
            raise
        finally:
            children.forget(call_id)
        if child is not None:
            await child.end(child.events.last_stop or "completed")
        return output

    tool.on_invoke_tool = invoke
    return tool


async def stream_events(result: RunResultStreaming, *, lastword: AsyncLastwordClient, run_id: str,
                        agent: str | None = None) -> AsyncIterator[StreamEvent]:
    """``result.stream_events()``, unchanged, with the run's parts streamed into lastword: the
    starting agent's into ``run_id`` (created), each agent handed off to into a child run
    ``{run_id}.{call_id}`` of the one that handed off. Every part's turn ends when the SDK's run
    does, as the run ended (see the module's docstring); the agents before a handoff end
    ``completed``, their part being done."""
    parts = _Children(lastword, run_id, agent or result.current_agent.name)
    current = await parts.open(run_id, None, agent or result.current_agent.name)
    try:
        async for event in result.stream_events():
            if current is not None:
                current.take(event)
            item = getattr(event, "item", None)
            if getattr(event, "name", None) == "handoff_occured" and item is not None:
                call_id = getattr(getattr(item, "raw_item", None), "call_id", None)
                if call_id is None and isinstance(getattr(item, "raw_item", None), dict):
                    call_id = item.raw_item.get("call_id")
                parent = current.run_id if current is not None else run_id
                if current is not None:
                    await current.end(current.events.last_stop or "completed")
                current = await parts.open(child_run_id(parent, str(call_id)), parent,
                                           getattr(getattr(item, "target_agent", None), "name", None))
            yield event
    except BaseException as raised:
        if current is not None:
            await current.end_after(raised)
        raise
    if current is not None:
        await current.end(current.events.last_stop or "completed")
