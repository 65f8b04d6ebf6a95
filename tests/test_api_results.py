"""Results over HTTP: the SubagentResult of a turn, long-polling for its end, and the tool result."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.api_helpers import PROBLEM_JSON, result, shared_api, shared_base_url
from tests.builders import chunk, create_run, message, text

__all__ = ["shared_api", "shared_base_url"]  # fixtures, imported for pytest to find

NO_TEXT = "The subagent finished without text output."


@pytest.fixture
def base_url(shared_base_url: str) -> str:
    """Every test here only touches runs it creates: one server per backend serves them all."""
    return shared_base_url


@pytest.fixture
def api(shared_api: httpx.Client) -> httpx.Client:
    return shared_api


def send(api: httpx.Client, run_id: str, *events: dict[str, Any]) -> None:
    response = api.post(f"/v1/runs/{run_id}/events", json=list(events))
    assert response.status_code == 200, response.text


def end(api: httpx.Client, run_id: str, stop_reason: str, error: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"stopReason": stop_reason}
    if error is not None:
        body["error"] = error
    response = api.post(f"/v1/runs/{run_id}/end", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def tool_result(api: httpx.Client, run_id: str, **params: Any) -> dict[str, Any]:
    response = api.get(f"/v1/runs/{run_id}/tool-result", params=params)
    assert response.status_code == 200, response.text
    body = dict(response.json())
    # Never empty, never an empty text (SPEC §9).
    assert len(body["content"]) == 1
    assert body["content"][0]["type"] == "text"
    assert body["content"][0]["text"].strip()
    return body


class EndOnceParked(threading.Thread):
    """Ends the turn from another client as soon as a long-poll is parked on the server.

    "Parked" is read from the server itself: its ``lastword_result_waiters`` gauge reads 1 (the
    tests of this module run one at a time on their server). The waiting client's own timeout
    is far below ``?wait``, so only a wait that the end woke answers at all.
    """

    def __init__(self, base_url: str, run_id: str, events: tuple[dict[str, Any], ...], stop_reason: str) -> None:
        super().__init__(daemon=True)
        self.base_url, self.run_id, self.events, self.stop_reason = base_url, run_id, events, stop_reason
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.base_url, timeout=30) as client:
                for _ in range(1000):  # bounded: up to about 10 s for the long-poll to arrive
                    if "\nlastword_result_waiters 1.0" in client.get("/metrics").text:
                        break
                    threading.Event().wait(0.01)
                else:
                    raise AssertionError("the long-poll never parked on the server")
                if self.events:
                    client.post(f"/v1/runs/{self.run_id}/events", json=list(self.events)).raise_for_status()
                else:
                    client.post(f"/v1/runs/{self.run_id}/end", json={"stopReason": self.stop_reason}).raise_for_status()
        except BaseException as error:  # handed to the test by join()
            self.failure = error

    def join(self, timeout: float | None = 20) -> None:
        super().join(timeout)
        if self.failure is not None:
            raise self.failure


def end_later(base_url: str, run_id: str, *events: dict[str, Any], stop_reason: str = "completed") -> EndOnceParked:
    """Send ``events`` (or end the turn with ``stop_reason``) once a long-poll is parked."""
    ender = EndOnceParked(base_url, run_id, events, stop_reason)
    ender.start()
    return ender


def long_poll(base_url: str, path: str, **params: Any) -> httpx.Response:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        return client.get(path, params={"wait": 120, **params})


# -- the result ---------------------------------------------------------------------------


def test_result_of_a_running_turn(api: httpx.Client) -> None:
    """A running turn's result is status running with the output and usage so far, and no end."""
    run_id = create_run(api)
    send(api, run_id, message(text("draft"), usage={"inputTokens": 4, "outputTokens": 2}), chunk("more"))
    running = result(api, run_id)
    assert running["runId"] == run_id
    assert running["turn"] == 1
    assert running["status"] == "running"
    assert running["isError"] is False
    assert running["output"] == [text("draft")]
    assert running["usage"] == {"inputTokens": 4, "outputTokens": 2, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    assert running["startedAt"]
    for key in ("stopReason", "endedAt", "error"):
        assert key not in running


def test_result_of_a_running_turn_follows_chunks(api: httpx.Client) -> None:
    """Before any message, a running turn's output is the text streamed so far, unchanged."""
    run_id = create_run(api)
    assert result(api, run_id)["output"] == []
    send(api, run_id, chunk("  Hello"), chunk(", world \n"))
    assert result(api, run_id)["output"] == [text("  Hello, world \n")]


def test_result_of_an_ended_turn(api: httpx.Client) -> None:
    """An ended turn's result carries the stop reason, isError, the error and endedAt."""
    run_id = create_run(api)
    send(api, run_id, message(text("partial")))
    ended = end(api, run_id, "error", error={"message": "tool crashed", "code": 7})
    assert ended == result(api, run_id)
    assert ended["status"] == "ended"
    assert ended["stopReason"] == "error"
    assert ended["isError"] is True
    assert ended["error"] == {"message": "tool crashed", "code": 7}
    assert ended["output"] == [text("partial")]
    assert ended["endedAt"] >= ended["startedAt"]


def test_wait_returns_when_the_turn_ends(api: httpx.Client, base_url: str) -> None:
    """?wait= blocks until another client ends the turn, then answers the ended result."""
    run_id = create_run(api)
    send(api, run_id, message(text("final answer")))
    timer = end_later(base_url, run_id, stop_reason="completed")
    response = long_poll(base_url, f"/v1/runs/{run_id}/result")
    timer.join(20)
    assert response.status_code == 200
    assert response.json()["status"] == "ended"
    assert response.json()["stopReason"] == "completed"
    assert response.json()["output"] == [text("final answer")]


def test_wait_returns_when_the_turn_ends_by_event(api: httpx.Client, base_url: str) -> None:
    """?wait= also wakes when a turn/end event ends the turn."""
    run_id = create_run(api)
    timer = end_later(base_url, run_id, chunk("streamed"), {"type": "turn/end", "stopReason": "length"})
    response = long_poll(base_url, f"/v1/runs/{run_id}/result")
    timer.join(20)
    assert response.status_code == 200
    assert response.json()["stopReason"] == "max_tokens"
    assert response.json()["output"] == [text("streamed")]


def test_wait_times_out_with_the_running_result(api: httpx.Client) -> None:
    """?wait= on a turn that does not end answers the running result when the wait is over."""
    run_id = create_run(api)
    send(api, run_id, chunk("so far"))
    running = result(api, run_id, wait=0.3)
    assert running["status"] == "running"
    assert running["output"] == [text("so far")]


def test_wait_on_an_ended_turn_answers_at_once(api: httpx.Client, base_url: str) -> None:
    """?wait= for a turn that has already ended answers its result without waiting."""
    run_id = create_run(api)
    end(api, run_id, "cancelled")
    response = long_poll(base_url, f"/v1/runs/{run_id}/result")
    assert response.json()["stopReason"] == "cancelled"


def test_wait_for_an_earlier_turn_of_a_continuable_run(api: httpx.Client, base_url: str) -> None:
    """?turn=1&wait= answers turn 1 while turn 2 runs; ?wait= on the latest follows turn 2."""
    run_id = create_run(api, mode="continuable")
    send(api, run_id, message(text("one")), {"type": "turn/end", "stopReason": "completed"})
    api.post(f"/v1/runs/{run_id}/turns").raise_for_status()
    first = long_poll(base_url, f"/v1/runs/{run_id}/result", turn=1).json()
    assert first["turn"] == 1
    assert first["output"] == [text("one")]
    timer = end_later(base_url, run_id, stop_reason="aborted")
    second = long_poll(base_url, f"/v1/runs/{run_id}/result").json()
    timer.join(20)
    assert second["turn"] == 2
    assert second["stopReason"] == "cancelled"


@pytest.mark.parametrize("params", [{"turn": 0}, {"turn": "first"}, {"wait": -1}, {"wait": "soon"}, {"turn": 2**70}])
def test_result_refuses_bad_parameters(api: httpx.Client, params: dict[str, Any]) -> None:
    """A turn below 1 or not a number, or a negative wait, is 422."""
    run_id = create_run(api)
    for path in ("result", "tool-result"):
        response = api.get(f"/v1/runs/{run_id}/{path}", params=params)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)


def test_result_of_an_unknown_turn_is_404(api: httpx.Client) -> None:
    """?turn= beyond the run's turns is 404 turn_not_found, for the result and the tool result."""
    run_id = create_run(api)
    for path in ("result", "tool-result"):
        response = api.get(f"/v1/runs/{run_id}/{path}", params={"turn": 2})
        assert response.status_code == 404
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        assert response.json()["code"] == "turn_not_found"


# -- usage --------------------------------------------------------------------------------


def test_usage_sums_every_assistant_message_including_empty_ones(api: httpx.Client) -> None:
    """A turn's usage is the sum over all its messages, usage-only empty ones included, everywhere."""
    run_id = create_run(api)
    send(
        api, run_id,
        message(text("a"), usage={"inputTokens": 10, "outputTokens": 1}),
        message(usage={"inputTokens": 20, "outputTokens": 2, "cacheReadTokens": 5}),
        message(text("  "), usage={"inputTokens": 30, "outputTokens": 3, "cacheWriteTokens": 7}),
        message(text("no usage")),
        chunk("ignored"),
    )
    expected = {"inputTokens": 60, "outputTokens": 6, "cacheReadTokens": 5, "cacheWriteTokens": 7}
    assert result(api, run_id)["usage"] == expected
    last = message(usage={"inputTokens": 1, "outputTokens": 1})
    send(api, run_id, last, {"type": "turn/end", "stopReason": "max_tokens"})
    expected = {"inputTokens": 61, "outputTokens": 7, "cacheReadTokens": 5, "cacheWriteTokens": 7}
    ended = result(api, run_id)
    assert ended["usage"] == expected
    assert ended["output"] == [text("no usage")]
    events = api.get(f"/v1/runs/{run_id}/events", params={"limit": 100}).json()["events"]
    [end_event] = [item["event"] for item in events if item["event"]["type"] == "subagent/end"]
    assert end_event["usage"] == expected


def test_usage_of_a_turn_without_messages_is_zero(api: httpx.Client) -> None:
    """A turn with no assistant message reports zero usage, with every field present."""
    run_id = create_run(api)
    send(api, run_id, chunk("text only"))
    assert end(api, run_id, "completed")["usage"] == {
        "inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def test_usage_is_per_turn(api: httpx.Client) -> None:
    """Each turn of a continuable run counts only its own messages."""
    run_id = create_run(api, mode="continuable")
    send(api, run_id, message(text("1"), usage={"inputTokens": 5, "outputTokens": 5}))
    end(api, run_id, "completed")
    api.post(f"/v1/runs/{run_id}/turns").raise_for_status()
    send(api, run_id, message(text("2"), usage={"inputTokens": 1, "outputTokens": 2}))
    assert result(api, run_id)["usage"]["inputTokens"] == 1
    assert result(api, run_id, turn=1)["usage"]["inputTokens"] == 5


# -- the tool result ----------------------------------------------------------------------


def test_tool_result_is_202_while_the_turn_runs(api: httpx.Client) -> None:
    """The tool result of a running turn is 202 with Retry-After, and 200 once the turn ends."""
    run_id = create_run(api)
    send(api, run_id, message(text("not yet")))
    response = api.get(f"/v1/runs/{run_id}/tool-result")
    assert response.status_code == 202
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["status"] == "running"
    assert "content" not in response.json()
    waited = api.get(f"/v1/runs/{run_id}/tool-result", params={"wait": 0.2})
    assert waited.status_code == 202
    end(api, run_id, "completed")
    assert tool_result(api, run_id) == {"content": [text("not yet")], "isError": False}


def test_tool_result_wait_returns_when_the_turn_ends(api: httpx.Client, base_url: str) -> None:
    """The tool result's ?wait= answers 200 when another client ends the turn."""
    run_id = create_run(api)
    send(api, run_id, message(text("waited for")))
    timer = end_later(base_url, run_id, stop_reason="success")
    response = long_poll(base_url, f"/v1/runs/{run_id}/tool-result")
    timer.join(20)
    assert response.status_code == 200
    assert response.json() == {"content": [text("waited for")], "isError": False}


def test_completed_tool_result_joins_text_blocks_with_a_blank_line(api: httpx.Client) -> None:
    """A completed turn's tool result is its output's text blocks joined by a blank line, nothing else."""
    run_id = create_run(api)
    send(api, run_id, message(
        {"type": "reasoning", "text": "hidden"},
        text("First part."),
        {"type": "tool_call", "id": "t", "name": "n", "input": {}},
        text("   "),
        {"type": "tool_result", "toolCallId": "t", "content": "tool said"},
        text("Second part.\n"),
    ))
    end(api, run_id, "completed")
    assert tool_result(api, run_id) == {"content": [text("First part.\n\nSecond part.\n")], "isError": False}


@pytest.mark.parametrize(
    "events",
    [
        [],
        [message(usage={"inputTokens": 1, "outputTokens": 1})],
        [message({"type": "tool_call", "id": "t", "name": "n", "input": {}})],
        [message({"type": "reasoning", "text": ""}), chunk("text streamed before a textless message")],
        [chunk("  \n ")],
    ],
    ids=["nothing", "usage-only", "tool-call-only", "reasoning-only", "blank-chunks"],
)
def test_completed_tool_result_without_text_says_so(api: httpx.Client, events: list[dict[str, Any]]) -> None:
    """A completed turn without text gives a fixed, non-empty sentence."""
    run_id = create_run(api)
    if events:
        send(api, run_id, *events)
    end(api, run_id, "completed")
    assert tool_result(api, run_id) == {"content": [text(NO_TEXT)], "isError": False}


@pytest.mark.parametrize("stop_reason", ["max_tokens", "max_turns", "refusal", "cancelled", "error", "timeout"])
def test_tool_result_of_an_incomplete_turn_has_a_headline_and_the_partial_text(
    api: httpx.Client, stop_reason: str
) -> None:
    """An incomplete turn gives isError: a one-line headline naming the stop reason, a blank line, the text."""
    run_id = create_run(api)
    send(api, run_id, message(text("Partial answer."), text("More.")))
    end(api, run_id, stop_reason)
    body = tool_result(api, run_id)
    assert body["isError"] is True
    headline, rest = body["content"][0]["text"].split("\n\n", 1)
    assert "\n" not in headline
    assert stop_reason in headline
    assert rest == "Partial answer.\n\nMore."


@pytest.mark.parametrize("stop_reason", ["max_tokens", "cancelled", "error", "timeout"])
def test_tool_result_of_an_incomplete_turn_without_text_is_the_headline(api: httpx.Client, stop_reason: str) -> None:
    """A turn that did not complete and said nothing gives just the headline, never an empty text."""
    run_id = create_run(api)
    send(api, run_id, message(usage={"inputTokens": 1, "outputTokens": 1}))
    end(api, run_id, stop_reason)
    body = tool_result(api, run_id)
    assert body["isError"] is True
    assert "\n" not in body["content"][0]["text"]
    assert stop_reason in body["content"][0]["text"]


@pytest.mark.parametrize(
    ("error", "shown"),
    [({"message": "the tool\nexploded"}, "the tool exploded"), ("rate limited", "rate limited")],
)
def test_tool_result_headline_names_the_error(api: httpx.Client, error: Any, shown: str) -> None:
    """The headline of an errored turn carries its error message on one line, then the partial text."""
    run_id = create_run(api)
    send(api, run_id, chunk("Got halfway"))
    end(api, run_id, "failed", error=error)
    headline, rest = tool_result(api, run_id)["content"][0]["text"].split("\n\n", 1)
    assert "error" in headline
    assert shown in headline
    assert rest == "Got halfway"


def test_tool_result_of_a_cancelled_chunk_only_child_keeps_its_text(api: httpx.Client) -> None:
    """A child cancelled with only streamed text reports that text to its parent, not an empty result."""
    run_id = create_run(api)
    api.post(f"/v1/runs/{run_id}/chunks", content="Streamed findings".encode(),
             headers={"content-type": "text/plain"}).raise_for_status()
    end(api, run_id, "canceled")
    body = tool_result(api, run_id)
    assert body["isError"] is True
    assert body["content"][0]["text"].endswith("\n\nStreamed findings")


def test_tool_result_of_an_earlier_turn(api: httpx.Client) -> None:
    """?turn= picks the turn whose tool result is served; the latest running turn is 202."""
    run_id = create_run(api, mode="continuable")
    send(api, run_id, message(text("turn one")), {"type": "turn/end", "stopReason": "completed"})
    api.post(f"/v1/runs/{run_id}/turns").raise_for_status()
    assert api.get(f"/v1/runs/{run_id}/tool-result").status_code == 202
    assert tool_result(api, run_id, turn=1) == {"content": [text("turn one")], "isError": False}
