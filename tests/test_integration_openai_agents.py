"""lastword.integrations.openai_agents: agents used as tools, each call a lastword child run (SPEC §19).

A parent agent calls a child agent made a tool; both talk to a scripted Responses API server
(``tests/cli_children/fake_models.py``, the child's requests in its ``sub`` lane). Each case runs
the parent twice, with the SDK's own ``Agent.as_tool`` and with lastword's, and checks that the
parent's run is the same (its final output, what its model was given as the tool's result) and
that the child run in a real lastword server answers what SPEC §5 says, with its stop reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

agents = pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, handoff, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from lastword.client.core import AsyncLastwordClient  # noqa: E402
from lastword.integrations.openai_agents import as_tool, child_run_id, stream_events  # noqa: E402
from tests.cli_children import fake_models  # noqa: E402
from tests.cli_children.fake_models import SUBAGENT_MARKER, status, text, tool  # noqa: E402

pytestmark = pytest.mark.slow

# The SDK's traces would go to OpenAI's servers: no network here.
set_tracing_disabled(True)

PARENT_ANSWER = "The child has answered."


class TaskInput(BaseModel):
    """The arguments the fake model gives a subagent tool."""

    description: str
    prompt: str
    subagent_type: str


def _scenario(*child_steps: dict[str, Any]) -> dict[str, Any]:
    return {"main": [tool("subagent", prompt=f"{SUBAGENT_MARKER}: look into it"), text(PARENT_ANSWER)],
            "sub": list(child_steps)}


class Parent:
    """The parent, its child agent and the child's shell tool, on one fake model server."""

    def __init__(self, model_url: str, child_max_turns: int | None = None) -> None:
        client = AsyncOpenAI(base_url=f"{model_url}/v1", api_key="fake", max_retries=0)
        self.model = OpenAIResponsesModel(model="gpt-fake", openai_client=client)
        self.in_tool = asyncio.Event()
        self.tool_seconds = 0.0

        @function_tool
        async def bash(command: str, description: str) -> str:
            """Run a shell command."""
            self.in_tool.set()
            await asyncio.sleep(self.tool_seconds)
            return "hi"

        self.child = Agent(name="researcher", instructions="Research.", model=self.model, tools=[bash])
        self.options: dict[str, Any] = {"parameters": TaskInput,
                                        "input_builder": lambda given: given["params"]["prompt"]}
        if child_max_turns is not None:
            self.options["max_turns"] = child_max_turns

    async def run(self, child_tool: Any) -> tuple[Any, list[str]]:
        parent = Agent(name="planner", instructions="Plan.", model=self.model, tools=[child_tool])
        result = Runner.run_streamed(parent, "go")
        async for _ in result.stream_events():
            pass
        given = [str(item.output) for item in result.new_items if item.type == "tool_call_output_item"]
        return result.final_output, given


async def _ignore(payload: Any) -> None:
    return None


async def _both(scenario: dict[str, Any], base_url: str, parent_run_id: str,
                child_max_turns: int | None = None) -> tuple[tuple[Any, list[str]], tuple[Any, list[str]]]:
    with fake_models.start(scenario, "openai-responses") as model:
        plain = Parent(model.url, child_max_turns)
        # With an on_stream callback the SDK streams the child's run (the fake Responses server
        # answers streamed requests only); lastword's tool always passes one.
        alone = await plain.run(plain.child.as_tool("task", "Delegate a task.", on_stream=_ignore, **plain.options))
    with fake_models.start(scenario, "openai-responses") as model:
        async with AsyncLastwordClient(base_url) as lw:
            wrapped = Parent(model.url, child_max_turns)
            through = await wrapped.run(as_tool(wrapped.child, "task", "Delegate a task.", lastword=lw,
                                                parent_run_id=parent_run_id, **wrapped.options))
    return alone, through


def _child(base_url: str, parent_run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    children = httpx.get(f"{base_url}/v1/runs", params={"parentRunId": parent_run_id}, timeout=30).json()["runs"]
    assert len(children) == 1, children
    run = children[0]
    assert run["runId"].startswith(f"{parent_run_id}.call_")
    assert run["agent"] == "researcher"
    result = httpx.get(f"{base_url}/v1/runs/{run['runId']}/result", timeout=30).json()
    return run, result


def _texts(output: list[dict[str, Any]]) -> list[str]:
    return [block["text"] for block in output if block.get("type") == "text"]


def test_a_child_that_completes_answers_its_text(base_url: str) -> None:
    alone, through = asyncio.run(_both(_scenario(text("Hello from the child agent.")), base_url, "oa-done"))
    assert through == alone == (PARENT_ANSWER, ["Hello from the child agent."])
    _, result = _child(base_url, "oa-done")
    assert (result["status"], result["stopReason"]) == ("ended", "completed")
    assert _texts(result["output"]) == ["Hello from the child agent."]
    assert result["usage"]["inputTokens"] > 0


def test_a_child_cut_at_the_ceiling_keeps_its_partial_text(base_url: str) -> None:
    steps = text("The child's answer is cut at the ceil", stop="max_tokens")
    alone, through = asyncio.run(_both(_scenario(steps), base_url, "oa-ceiling"))
    assert through == alone
    _, result = _child(base_url, "oa-ceiling")
    assert result["stopReason"] == "max_tokens", result.get("error")
    assert _texts(result["output"]) == ["The child's answer is cut at the ceil"]


def test_a_child_stopped_at_max_turns_keeps_what_it_said(base_url: str) -> None:
    steps = [tool("shell", text_before="Let me look first."), text("Never asked for.")]
    alone, through = asyncio.run(_both(_scenario(*steps), base_url, "oa-turns", child_max_turns=1))
    assert through == alone
    assert alone[1] == ["An error occurred while running the tool. Please try again."]  # the SDK's words
    _, result = _child(base_url, "oa-turns")
    assert result["stopReason"] == "max_turns"
    assert _texts(result["output"]) == ["Let me look first."]
    assert [block["type"] for block in result["output"]] == ["text", "tool_call"]


def test_a_child_whose_model_fails_mid_run_keeps_the_text_before(base_url: str) -> None:
    steps = [tool("shell", text_before="Checking before the outage."), status(500)]
    alone, through = asyncio.run(_both(_scenario(*steps), base_url, "oa-outage"))
    assert through == alone
    _, result = _child(base_url, "oa-outage")
    assert result["stopReason"] == "error"
    assert _texts(result["output"]) == ["Checking before the outage."]
    assert "500" in result["error"]["message"]


def test_a_cancelled_parent_ends_its_child_cancelled(base_url: str) -> None:
    scenario = _scenario(tool("shell", text_before="Running a long command."), text("Done."))

    async def parent() -> None:
        with fake_models.start(scenario, "openai-responses") as model:
            async with AsyncLastwordClient(base_url) as lw:
                wrapped = Parent(model.url)
                wrapped.tool_seconds = 60
                child_tool = as_tool(wrapped.child, "task", "Delegate a task.", lastword=lw,
                                     parent_run_id="oa-cancelled", **wrapped.options)
                task = asyncio.create_task(wrapped.run(child_tool))
                await asyncio.wait_for(wrapped.in_tool.wait(), 60)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # The SDK runs the tool in a task of its own, which ends the child after the
                # parent's cancellation has reached it: the client stays open until then.
                children = (await lw.list_runs(parent_run_id="oa-cancelled")).runs
                assert len(children) == 1
                await lw.wait_result(children[0].runId, timeout=30)

    asyncio.run(parent())
    run, result = _child(base_url, "oa-cancelled")
    assert result["stopReason"] == "cancelled"
    assert _texts(result["output"]) == ["Running a long command."]
    assert run["runId"] == child_run_id("oa-cancelled", run["runId"].split(".", 1)[1])


async def _handoff(scenario: dict[str, Any], base_url: str | None, run_id: str) -> tuple[Any, BaseException | None]:
    """A planner that hands the run off to the researcher (a tool call named ``task``, which the
    fake model calls), streamed alone or through lastword."""
    with fake_models.start(scenario, "openai-responses") as model:
        agents_ = Parent(model.url)
        planner = Agent(name="planner", instructions="Plan.", model=agents_.model,
                        handoffs=[handoff(agents_.child, tool_name_override="task")])
        result = Runner.run_streamed(planner, "go")
        try:
            if base_url is None:
                async for _ in result.stream_events():
                    pass
            else:
                async with AsyncLastwordClient(base_url) as lw:
                    async for _ in stream_events(result, lastword=lw, run_id=run_id):
                        pass
        except Exception as error:
            return result.final_output, error
        return result.final_output, None


def _handed_off(scenario: dict[str, Any], base_url: str, run_id: str) -> tuple[Any, BaseException | None]:
    alone_output, alone_error = asyncio.run(_handoff(scenario, None, run_id))
    output, error = asyncio.run(_handoff(scenario, base_url, run_id))
    assert (output, type(error)) == (alone_output, type(alone_error))
    return output, error


def test_a_handoff_puts_the_agent_handed_to_into_a_child_run(base_url: str) -> None:
    scenario = {"main": [tool("subagent", text_before="Handing over."), text("Hello from the agent handed to.")]}
    output, error = _handed_off(scenario, base_url, "oa-handoff")
    assert (output, error) == ("Hello from the agent handed to.", None)
    parent = httpx.get(f"{base_url}/v1/runs/oa-handoff/result", timeout=30).json()
    assert (parent["stopReason"], _texts(parent["output"])) == ("completed", ["Handing over."])
    run, result = _child(base_url, "oa-handoff")
    assert (result["stopReason"], _texts(result["output"])) == ("completed", ["Hello from the agent handed to."])


def test_an_agent_handed_to_and_cut_at_the_ceiling_keeps_its_partial_text(base_url: str) -> None:
    scenario = {"main": [tool("subagent", text_before="Handing over."),
                         text("The agent handed to is cut at the ceil", stop="max_tokens")]}
    output, error = _handed_off(scenario, base_url, "oa-handoff-cut")
    assert output is None and error is not None  # the SDK raises on the cut response
    run, result = _child(base_url, "oa-handoff-cut")
    assert result["stopReason"] == "max_tokens"
    assert _texts(result["output"]) == ["The agent handed to is cut at the ceil"]
