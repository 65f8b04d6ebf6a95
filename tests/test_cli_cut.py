"""``CliAdapter.cut``: what the lines before a bad or cut line assembled, through the adapters
(SPEC §16a), on recorded output (``tests/cli_children/fixtures``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lastword.adapters import CLI_ADAPTERS
from lastword.adapters.cli_base import CliAdapter, Made

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures"


def fed(format: str, scenario: str, count: int) -> tuple[CliAdapter, list[Made]]:
    """An adapter fed the first ``count`` lines of a recording, and what they made."""
    lines = [json.loads(line) for line in (FIXTURES / format / f"{scenario}.ndjson").read_text().splitlines()]
    adapter = CLI_ADAPTERS[format]()
    made = [item for index, line in enumerate(lines[:count]) for item in adapter.feed(index, line)]
    return adapter, made


def ids(made: list[Made]) -> list[tuple[str, Any]]:
    return [(item.event["type"], item.event.get("eventId")) for item in made]


def test_a_cut_makes_the_step_being_built_under_an_id_naming_the_line() -> None:
    """opencode: the open step's message (its text and tool call) and the tool's result; only
    the message, which the whole step would have completed differently, is renamed."""
    adapter, made = fed("opencode", "tool_then_empty_end_turn", 3)
    assert made == []
    whole = fed("opencode", "tool_then_empty_end_turn", 3)[0].assembled()
    cut = adapter.cut(3)
    assert [item.event["type"] for item in cut] == ["assistant/message", "tool/result"]
    assert cut[0].event["eventId"] == f"{whole[0].event['eventId']}:cut3"
    assert cut[1].event["eventId"] == whole[1].event["eventId"]
    assert cut[0].event["message"] == whole[0].event["message"]
    assert adapter.cut(3) == []  # made once


def test_a_cut_is_not_the_turns_end() -> None:
    """Claude Code: after its ``result`` line the body's end ends the turn; a cut does not."""
    lines = (FIXTURES / "claude-code" / "completion.ndjson").read_text().splitlines()
    adapter, _ = fed("claude-code", "completion", len(lines))
    assert "turn/end" not in [kind for kind, _ in ids(adapter.cut(len(lines)))]
    ended, _ = fed("claude-code", "completion", len(lines))
    assert [kind for kind, _ in ids(ended.finish())][-1] == "turn/end"


def test_a_cut_of_claude_codes_reply_keeps_its_blocks() -> None:
    adapter, made = fed("claude-code", "tool_then_empty_end_turn", 2)
    assert [kind for kind, _ in ids(made)] == ["x-claude-code-system"]
    cut = adapter.cut(2)
    assert [item.event["type"] for item in cut] == ["assistant/message"]
    reply_id = cut[0].event["message"]["id"]
    assert cut[0].event["eventId"] == f"{reply_id}:cut2"
    assert [block["type"] for block in cut[0].event["message"]["content"]] == ["text"]


def test_codexs_unanswered_reasoning_is_kept_by_a_cut_under_its_own_id() -> None:
    adapter = CLI_ADAPTERS["codex"]()
    adapter.feed(0, {"type": "thread.started", "thread_id": "t"})
    assert adapter.feed(1, {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "hm"}}) == []
    assert ids(adapter.cut(2)) == [("x-codex-reasoning", "t:item_0")]
