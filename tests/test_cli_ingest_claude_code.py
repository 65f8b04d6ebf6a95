"""Claude Code's own output through ``POST …/ingest/claude-code`` (SPEC §16), over HTTP.

The bodies are what the real CLI printed against a scripted model (``tests/cli_children/``);
each scenario asserts what a parent gets back: the output, the stop reason, the usage and the
tool result — where the CLI's own ``result`` line loses the child's answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_problem, logged, of_type, result, shared_api, shared_base_url  # noqa: F401
from tests.builders import create_run

FIXTURES = Path(__file__).resolve().parent / "cli_children" / "fixtures"
MODES = ["claude-code", "claude-code-partial"]
TOOL = {"type": "tool_call", "name": "Bash", "input": {"command": "echo hi", "description": "Print hi"}}


def body(mode: str, scenario: str) -> bytes:
    return (FIXTURES / mode / f"{scenario}.ndjson").read_bytes()


def lines(mode: str, scenario: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body(mode, scenario).splitlines() if line.strip()]


def ingest(api: httpx.Client, run_id: str, data: bytes, format: str = "claude-code") -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/ingest/{format}", content=data,
                    headers={"content-type": "application/x-ndjson"})


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool calls compared without their (per-recording) ids."""
    return [{key: value for key, value in block.items() if key != "id"} for block in output]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# scenario -> (stop reason, output (without tool-call ids), output in the non-partial mode if it differs)
EXPECTED: dict[str, tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "completion": ("completed", [text("Hello from the fake model. The answer is 42.")], None),
    # The CLI answers "API Error: … exceeded the 32000 output token maximum"; the child had written this.
    "max_tokens_partial": ("max_tokens", [text("This answer is cut off at the token ceil")], None),
    # The CLI answers the same API error; the child's last substantive message was its tool call.
    "tool_then_empty_max_tokens": ("max_tokens", [TOOL], None),
    # The CLI answers result: "" after the empty final step.
    "tool_then_empty_end_turn": ("completed", [text("Let me run a command first."), TOOL], None),
    # The CLI answers only the last part; without joinContinuations so does §5 (the join is below).
    "continued_after_ceiling": ("completed", [text(" and part three, which completes the answer.")], None),
    # The CLI answers "API Error: 500 …" in place of the text before it.
    "http_500_mid_run": ("error", [text("Running a command before the outage."), TOOL], None),
    "http_529_mid_run": ("error", [text("Running a command before the overload."), TOOL], None),
    # Only the partial-messages mode printed the streamed text before the error; it is kept.
    "sse_error_mid_stream": ("error", [text("The stream starts and then")], []),
    "subagent_foreground": ("completed", [text("The subagent replied: hello from the subagent.")], None),
    "subagent": ("completed", [text("Noted: the background subagent has finished.")], None),
    # The CLI prints a call the ceiling cut, runs it, and answers result: "" after empty replies.
    "tool_cut_at_ceiling": ("completed", [text("I will check with a command.")], None),
    # The same with --max-turns 1: the CLI's result is null; the text before the cut call stays.
    "tool_cut_max_turns": ("max_turns", [text("I will check with a command.")], None),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_the_child_keeps_its_last_word(shared_api: httpx.Client, mode: str, scenario: str) -> None:  # noqa: F811
    stop, output, plain_output = EXPECTED[scenario]
    if mode == "claude-code" and plain_output is not None:
        output = plain_output
    run_id = create_run(shared_api)
    response = ingest(shared_api, run_id, body(mode, scenario))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["stopReason"] == stop and answer["providerStopReason"] == lines(mode, scenario)[-1]["subtype"]
    got = result(shared_api, run_id)
    assert got["status"] == "ended" and got["stopReason"] == stop and got["isError"] == (stop != "completed")
    assert without_ids(got["output"]) == output
    assert not any("API Error" in block.get("text", "") for block in got["output"])
    # §4's sum over the turn equals the CLI's own total (the sum of its result lines).
    totals = [line["usage"] for line in lines(mode, scenario) if line["type"] == "result"]
    assert got["usage"]["inputTokens"] == sum(usage["input_tokens"] for usage in totals)
    assert got["usage"]["outputTokens"] == sum(usage["output_tokens"] for usage in totals)
    tool = shared_api.get(f"/v1/runs/{run_id}/tool-result").json()
    assert tool["isError"] == (stop != "completed")
    if stop != "completed":
        headline, _, rest = tool["content"][0]["text"].partition("\n\n")
        assert stop in headline
        for block in output:
            if block["type"] == "text":
                assert block["text"] in rest
    if stop == "error":
        assert got["error"]["message"].startswith("API Error")
    if stop == "max_turns":
        assert got["error"]["message"] == "Reached maximum number of turns (1)"


@pytest.mark.parametrize("mode", MODES)
def test_a_call_cut_by_the_ceiling_is_kept_but_not_output(shared_api: httpx.Client, mode: str) -> None:  # noqa: F811
    """The cut call's line is in its stored message's source; its content is the text, max_tokens."""
    run_id = create_run(shared_api)
    assert ingest(shared_api, run_id, body(mode, "tool_cut_at_ceiling")).status_code == 200
    cut = next(line for line in lines(mode, "tool_cut_at_ceiling") if line["type"] == "assistant"
               and line["message"]["content"][0]["type"] == "tool_use")
    stored = next(event for event in of_type(shared_api, run_id, "assistant/message")
                  if event["eventId"] == cut["message"]["id"])
    assert stored["message"]["content"] == [text("I will check with a command.")]
    assert stored["message"]["stopReason"] == "max_tokens" and cut in stored["source"]["events"]


@pytest.mark.parametrize("mode", MODES)
def test_a_resumed_session_stores_its_second_turn(shared_api: httpx.Client, mode: str) -> None:  # noqa: F811
    """claude --resume in the run's next turn: its lines are stored (no duplicates claimed) and
    the turn answers its own reply."""
    run_id = create_run(shared_api, mode="continuable")
    assert ingest(shared_api, run_id, body(mode, "resume")).status_code == 200
    assert shared_api.post(f"/v1/runs/{run_id}/turns").status_code == 201
    second = ingest(shared_api, run_id, body(mode, "resume.turn2"))
    assert second.status_code == 200, second.text
    assert second.json()["duplicates"] == 0 and second.json()["accepted"] > 0
    assert second.json()["stopReason"] == "completed"
    got = result(shared_api, run_id)
    assert got["turn"] == 2 and got["output"] == [text("Second turn: still 42.")]
    again = ingest(shared_api, run_id, body(mode, "resume.turn2"))
    assert again.status_code == 200 and again.json()["accepted"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_subagent_line_after_its_child_ended_does_not_fail_the_body(shared_api: httpx.Client,  # noqa: F811
                                                                      mode: str) -> None:
    """A subagent's line printed after the tool result that ended its child is kept on the run."""
    printed = lines(mode, "subagent_foreground")
    sub = next(line for line in printed if line.get("parent_tool_use_id"))
    late = {**sub, "uuid": "late-subagent-line"}
    answered = next(index for index, line in enumerate(printed) if line.get("tool_use_result"))
    data = b"".join(json.dumps(line).encode() + b"\n" for line in [*printed[:answered + 1], late,
                                                                   *printed[answered + 1:]])
    run_id = create_run(shared_api)
    response = ingest(shared_api, run_id, data)
    assert response.status_code == 200, response.text
    assert response.json()["stopReason"] == "completed"
    kept = of_type(shared_api, run_id, "x-claude-code-late-subagent")
    assert [event["source"]["events"] for event in kept] == [[late]]
    assert result(shared_api, run_id)["output"] == [text("The subagent replied: hello from the subagent.")]


def test_two_results_in_one_line_end_each_child_with_its_own_report(shared_api: httpx.Client) -> None:  # noqa: F811
    """Each tool_result of one user line ends its own subagent's child run with its own content."""
    printed = lines("claude-code", "subagent_foreground")
    call = next(block for line in printed if line["type"] == "assistant"
                for block in line["message"]["content"] if block["type"] == "tool_use")
    answer_at = next(index for index, line in enumerate(printed) if line.get("tool_use_result"))
    answer = printed[answer_at]
    second = {**call, "id": "toolu_second"}
    call_line = next(line for line in printed if line["type"] == "assistant"
                     and line["message"]["content"][0]["type"] == "tool_use")
    both = {**answer, "message": {**answer["message"], "content": [
        *answer["message"]["content"],
        {"type": "tool_result", "tool_use_id": "toolu_second", "content": [text("The second report.")]}]}}
    extra_call = {**call_line, "uuid": "second-call", "message": {**call_line["message"], "content": [second]}}
    body_lines = [*printed[:answer_at], extra_call, both, *printed[answer_at + 1:]]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in body_lines)
    run_id = create_run(shared_api)
    assert ingest(shared_api, run_id, data).status_code == 200
    join = shared_api.get(f"/v1/runs/{run_id}/children", params={"wait": 0}).json()
    outputs = {child["runId"]: child["output"] for child in join["children"]}
    assert outputs[f"{run_id}.toolu_second"] == [text("The second report.")]
    first = outputs[f"{run_id}.{call['id']}"]
    assert first and first != [text("The second report.")]


@pytest.mark.parametrize("mode", MODES)
def test_a_reply_split_by_the_ceiling_joins_whole(shared_api: httpx.Client, mode: str) -> None:  # noqa: F811
    """Each part but the last is stored with stopReason max_tokens, so joinContinuations answers all three."""
    run_id = create_run(shared_api, selection={"joinContinuations": True})
    assert ingest(shared_api, run_id, body(mode, "continued_after_ceiling")).status_code == 200
    assert result(shared_api, run_id)["output"] == [
        text("Part one of a long answer, cut"), text(" part two, cut again"),
        text(" and part three, which completes the answer."),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_a_subagent_is_a_child_run(shared_api: httpx.Client, mode: str) -> None:  # noqa: F811
    """The Agent tool's subagent: a child run with the parent, its type, its output; the join sees it."""
    run_id = create_run(shared_api)
    assert ingest(shared_api, run_id, body(mode, "subagent_foreground")).status_code == 200
    call = next(block["id"] for line in lines(mode, "subagent_foreground") if line["type"] == "assistant"
                for block in line["message"]["content"] if block["type"] == "tool_use")
    child = shared_api.get(f"/v1/runs/{run_id}.{call}").json()
    assert child["parentRunId"] == run_id and child["agent"] == "general-purpose"
    join = shared_api.get(f"/v1/runs/{run_id}/children", params={"wait": 0}).json()
    assert join["done"] is True
    assert [(c["runId"], c["stopReason"], c["output"]) for c in join["children"]] == [
        (f"{run_id}.{call}", "completed", [text("Hello from the subagent.")])]


@pytest.mark.parametrize("mode", MODES)
def test_a_subagent_no_run_may_be_named_is_refused(shared_api: httpx.Client, mode: str) -> None:  # noqa: F811
    """A subagent whose id makes no valid child run id is the line's fault: 422 naming it, no child."""
    run_id = create_run(shared_api)
    call = next(block["id"] for line in lines(mode, "subagent_foreground") if line["type"] == "assistant"
                for block in line["message"]["content"] if block["type"] == "tool_use")
    data = body(mode, "subagent_foreground").replace(call.encode(), b"no spaces allowed")
    response = ingest(shared_api, run_id, data)
    problem = assert_problem(response, 422, "invalid_provider_event")
    assert isinstance(problem["index"], int)
    assert shared_api.get(f"/v1/runs/{run_id}/children", params={"wait": 0}).json()["children"] == []


def test_a_body_sent_again_stores_nothing_twice(shared_api: httpx.Client) -> None:  # noqa: F811
    run_id = create_run(shared_api)
    data = body("claude-code-partial", "subagent_foreground")
    first = ingest(shared_api, run_id, data).json()
    before = logged(shared_api, run_id)
    second = ingest(shared_api, run_id, data)
    assert second.status_code == 200, second.text
    assert second.json()["accepted"] == 0 and second.json()["duplicates"] == first["accepted"]
    assert second.json()["stopReason"] == "completed"
    assert logged(shared_api, run_id) == before


@pytest.mark.parametrize(("bad", "status", "code"), [
    (b"{not json", 400, "malformed_json"),
    (b'["a line", "that is an array"]', 422, "invalid_provider_event"),
    (b'{"type": "assistant", "message": {"id": "m", "content": "not blocks"}}', 422, "invalid_provider_event"),
])
def test_a_bad_line_is_named_and_the_lines_before_it_stay(shared_api: httpx.Client, bad: bytes, status: int,  # noqa: F811
                                                          code: str) -> None:
    good = body("claude-code", "tool_then_empty_end_turn").splitlines()
    run_id = create_run(shared_api)
    response = ingest(shared_api, run_id, b"\n".join([*good[:4], bad, *good[4:]]) + b"\n")
    problem = assert_problem(response, status, code)
    assert problem["index"] == 4
    stored = [item["event"]["type"] for item in logged(shared_api, run_id)]
    # init, the reply (stored when its tool result came), the tool result: before the bad line.
    assert stored == ["subagent/start", "x-claude-code-system", "assistant/message", "tool/result"]
    # The whole body sent again, corrected: nothing twice, and the turn ends.
    again = ingest(shared_api, run_id, b"\n".join(good) + b"\n").json()
    assert again["duplicates"] == 3 and again["stopReason"] == "completed"
    assert result(shared_api, run_id)["output"][0] == text("Let me run a command first.")


def test_lines_are_stored_as_they_arrive(shared_base_url: str) -> None:  # noqa: F811
    """One long request: the reply is in the log while the body is still open."""
    data = body("claude-code-partial", "tool_then_empty_end_turn").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(data) if b'"type":"user"' in line) + 1  # after the tool result
    seen = threading.Event()
    with httpx.Client(base_url=shared_base_url, timeout=30) as api:
        run_id = create_run(api)

        def parts() -> Iterator[bytes]:
            yield b"".join(data[:cut])
            assert seen.wait(20), "the first lines were not stored while the body was open"
            yield b"".join(data[cut:])

        answer: dict[str, Any] = {}
        sender = threading.Thread(target=lambda: answer.update(ingest(api, run_id, parts()).json()))  # type: ignore[arg-type]
        sender.start()
        try:
            with httpx.Client(base_url=shared_base_url, timeout=30) as reader:
                for _ in range(400):
                    types = [item["event"]["type"] for item in logged(reader, run_id)]
                    if "tool/result" in types:
                        break
                    threading.Event().wait(0.05)
                assert "assistant/message" in types and "tool/result" in types, types
                assert "turn/end" not in types
        finally:
            seen.set()
            sender.join(30)
        assert answer["stopReason"] == "completed"


def test_a_new_cli_turn_is_not_a_continuation(shared_api: httpx.Client) -> None:  # noqa: F811
    """A backgrounded subagent's end starts another CLI turn (system/init): the reply before it
    was answered, not cut, so joinContinuations does not join it to the next."""
    run_id = create_run(shared_api, selection={"joinContinuations": True})
    assert ingest(shared_api, run_id, body("claude-code", "subagent")).status_code == 200
    assert result(shared_api, run_id)["output"] == [text("Noted: the background subagent has finished.")]
