"""What every CLI adapter inherits from ``cli_base.CliAdapter``, through the real adapters on
recorded output (``tests/cli_children/fixtures``): a later turn's eventIds, and the refusal of a
line whose field has the wrong type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lastword.adapters import CLI_ADAPTERS
from lastword.adapters.base import NotTheFormat
from lastword.adapters.cli_base import CliAdapter

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures"


def lines_of(folder: str, scenario: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / folder / f"{scenario}.ndjson").read_text().splitlines()]


def event_ids(adapter: CliAdapter, lines: list[dict[str, Any]]) -> list[str]:
    made = [item for index, line in enumerate(lines) for item in adapter.feed(index, line)]
    return [item.event["eventId"] for item in [*made, *adapter.finish()]]


@pytest.mark.parametrize("format", ["codex", "claude-code"])
def test_the_adapter_for_a_later_turn_prefixes_its_event_ids_with_the_turn(format: str) -> None:
    """``for_request(turn)`` of a resumed session's second invocation: the same ids as the
    adapter of turn 1 would make, each behind ``turn2:``."""
    lines = lines_of(format, "resume.turn2")
    first = event_ids(CLI_ADAPTERS[format].for_request(1), lines)
    second = event_ids(CLI_ADAPTERS[format].for_request(2), lines)
    assert first and not any(event_id.startswith("turn") for event_id in first)
    assert second == [f"turn2:{event_id}" for event_id in first]


@pytest.mark.parametrize(("format", "scenario", "edit", "field", "expected"), [
    pytest.param("codex", "completion", lambda line: line.update(thread_id=7), "thread_id", "a string", id="codex"),
    pytest.param("opencode", "completion", lambda line: line.update(part=[]), "part", "an object", id="opencode"),
    pytest.param("claude-code", "completion", lambda line: line["message"].update(content="hi"), "message.content",
                 "an array", id="claude-code"),
])
def test_a_field_of_the_wrong_type_is_refused_naming_its_json_type(
    format: str, scenario: str, edit: Any, field: str, expected: str,
) -> None:
    """The first line of the recording whose field is given a value of another JSON type is
    refused: the problem names the line, the field and the JSON type it must have."""
    lines = lines_of(format, scenario)
    kinds = {"codex": "thread.started", "opencode": "step_start", "claude-code": "assistant"}
    index = next(number for number, line in enumerate(lines) if line["type"] == kinds[format])
    edit(lines[index])
    adapter = CLI_ADAPTERS[format]()
    with pytest.raises(NotTheFormat) as refused:
        for number, line in enumerate(lines):
            adapter.feed(number, line)
    assert f"line {index}" in str(refused.value)
    assert field in str(refused.value)
    assert f"{field}: expected {expected} (not a" in str(refused.value)


@pytest.mark.parametrize("turn", [1, 2])
@pytest.mark.parametrize("format", ["codex", "claude-code"])
def test_feed_many_makes_what_feed_makes_line_by_line_up_to_a_refused_line(format: str, turn: int) -> None:
    """``feed_many`` (what the ingest calls, a batch of lines at a time) makes the events ``feed``
    makes, with the same eventIds of the turn, each with its line; a line refused mid-batch
    raises with what the lines before it made appended, their ids of the turn too."""
    lines = lines_of(format, "resume.turn2")
    one_by_one = CLI_ADAPTERS[format].for_request(turn)
    expected = [(index, item.event) for index, line in enumerate(lines) for item in one_by_one.feed(index, line)]
    made: list[Any] = []
    origins: list[int] = []
    CLI_ADAPTERS[format].for_request(turn).feed_many(enumerate(lines), made, origins)
    assert list(zip(origins, [item.event for item in made], strict=True)) == expected
    refused_at = max(origins)  # a line that makes something, so some were made before it
    broken = [*lines[:refused_at], {"type": 7}, *lines[refused_at + 1 :]]
    made, origins = [], []
    with pytest.raises(NotTheFormat):
        CLI_ADAPTERS[format].for_request(turn).feed_many(enumerate(broken), made, origins)
    before = [(index, event) for index, event in expected if index < refused_at]
    assert before and list(zip(origins, [item.event for item in made], strict=True)) == before
