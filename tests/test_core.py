"""The core without a face: ``open_core(settings)`` gives the services, and a run is driven end to
end through them — created, written, followed live, ended, read back after the core is opened
again — with no app, no HTTP and no web framework."""

from __future__ import annotations

from typing import Any

import pytest
from lastword.core import open_core
from lastword.rules.records import NewRun

from tests.builders import chunk, message
from tests.clock import ManualClock

pytestmark = pytest.mark.anyio

ANSWER = [{"type": "text", "text": "The partial answer."}]


async def test_a_run_is_driven_end_to_end_through_the_core(make_settings: Any) -> None:
    """SPEC §1 through the core alone: the answer survives a usage-only max-tokens message, the
    live subscriber hears the end with it, and a core opened again on the database reads it."""
    settings = make_settings()
    async with open_core(settings, background=False) as core:
        await core.runs.create(NewRun(run_id="core-1", agent="researcher"))
        heard = core.runs.subscribe_run("core-1", frozenset({"subagent/end"}))
        outcome = await core.runs.append("core-1", [
            chunk("The partial "), chunk("answer."), message(*ANSWER),
            message(usage={"inputTokens": 5, "outputTokens": 7}, stopReason="max_tokens"),
        ])
        assert outcome.accepted == 4
        await core.runs.end("core-1", "max_tokens", None)
        ends = await heard.take()
        assert ends is not None and [event.type for event in ends] == ["subagent/end"]
        assert ends[0].body["lastAssistantMessage"] == ANSWER
    async with open_core(settings, background=False) as again:
        run, turn = await again.runs.result("core-1", None, 0)
        assert (run.status, turn.stop_reason, turn.output) == ("ended", "max_tokens", ANSWER)
        assert turn.usage["outputTokens"] == 7


async def test_a_turn_whose_lease_ran_out_while_closed_ends_as_timeout_when_the_core_opens(make_settings: Any) -> None:
    """The start of a core sweeps: a turn left open past its lease ends ``timeout`` with the
    output its fold selects (the streamed text of a chunk-only child), before the core is handed out."""
    clock = ManualClock()
    settings = make_settings()
    async with open_core(settings, clock=clock, background=False) as core:
        await core.runs.create(NewRun(run_id="core-lease", lease_seconds=30))
        await core.runs.append("core-lease", [chunk("streamed "), chunk("only")])
    clock.advance(31)
    async with open_core(settings, clock=clock, background=False) as again:
        _, turn = await again.runs.result("core-lease", None, 0)
        assert turn.stop_reason == "timeout"
        assert turn.output == [{"type": "text", "text": "streamed only"}]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_an_append_wakes_the_runs_stream_readers_once(make_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One append that commits live events and a message tells the Durable Streams readers of
    its run once, not once for the live events and again for the log's growth. (SQLite: on
    PostgreSQL the commit's notice wakes them again later, as it wakes other replicas' readers.)"""
    async with open_core(make_settings(), background=False) as core:
        await core.runs.create(NewRun(run_id="core-wake"))
        core.runs.subscribe_run("core-wake", frozenset({"assistant/chunk"}))
        told: list[str] = []
        monkeypatch.setattr(core.streams, "run_changed", told.append)
        await core.runs.append("core-wake", [chunk("a"), message(*ANSWER)])
        assert told == ["core-wake"]
