"""The run lifecycle as a state machine: hypothesis drives the HTTP API against a model of SPEC §5–§8.

The model here is written from the contract, not from the service's code: a naive selection
rule (§5), stop-reason aliases (§6), turns and run status (§7), the lifecycle events with
``lastAssistantMessage`` absent when the output is empty (§8), ``eventId`` retries and clashes
(§9), and the exact log each run must hold. Every answer the service gives is compared with
what the model expects: status code, problem code, counts, ``lastSeq``, outputs, usage.

Runs get service-made ids, so examples never meet each other's runs and one server serves all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from lastword.settings import Settings

from tests.builders import message, turn_end
from tests.reference import expected_output, expected_usage
from tests.servers import threaded_server

#: Shrinking a failing sequence replays it against the server many times (up to hypothesis's
#: five-minute shrink limit): opt in with LASTWORD_SHRINK=1 when a failure needs a short example.
PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("LASTWORD_SHRINK") == "1" else [])

#: Stop reasons as a producer may send them, and the wire value each must become (§6).
STOP_REASONS = {
    "completed": "completed", "end_turn": "completed", "STOP": "completed", "success": "completed",
    "max_tokens": "max_tokens", "Max-Tokens": "max_tokens", "length": "max_tokens",
    "max_turns": "max_turns", "refusal": "refusal", "content_filter": "refusal",
    "cancelled": "cancelled", "canceled": "cancelled", "aborted": "cancelled",
    "error": "error", "failed": "error",
}


@dataclass
class TurnModel:
    events: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None


@dataclass
class RunModel:
    run_id: str
    mode: str
    status: str = "running"
    turns: list[TurnModel] = field(default_factory=lambda: [TurnModel()])
    #: The log as (turn, type, producer event or None for the service's own events).
    log: list[tuple[int, str, dict[str, Any] | None]] = field(default_factory=list)
    #: eventId → the event stored under it.
    ids: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_batch: list[dict[str, Any]] | None = None

    @property
    def turn(self) -> int:
        return len(self.turns)

    @property
    def current(self) -> TurnModel:
        return self.turns[-1]

    def end_turn(self, stop_reason: str) -> None:
        self.current.stop_reason = stop_reason
        self.log.append((self.turn, "subagent/end", None))
        self.status = "idle" if self.mode == "continuable" else "ended"


# -- what producers send ------------------------------------------------------------------

texts = st.sampled_from(["Hello", " world", "", "  ", "\n", "partial answer", "\u00e9t\u00e9 \u6f22"])
#: Mostly none or unique; now and then one from a small pool, so retries and clashes happen.
event_ids = st.sampled_from(["none", "none", "none", "unique", "unique", "pool"]).flatmap(
    lambda kind: st.none() if kind == "none"
    else st.integers(0, 2**40).map(lambda n: f"u{n}") if kind == "unique"
    else st.sampled_from(["e1", "e2", "e3"])
)
usages = st.none() | st.fixed_dictionaries(
    {"inputTokens": st.integers(0, 50), "outputTokens": st.integers(0, 50)},
    optional={"cacheReadTokens": st.integers(0, 9)},
)

def weighted(**choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``choices``, picked in proportion to its weight (stateful draws stay small otherwise)."""
    names = [name for name, (weight, _) in choices.items() for _ in range(weight)]
    return st.sampled_from(names).flatmap(lambda name: choices[name][1])


blocks = weighted(
    text=(4, texts.map(lambda t: {"type": "text", "text": t})),
    reasoning=(1, texts.map(lambda t: {"type": "reasoning", "text": t})),
    tool_call=(1, st.just({"type": "tool_call", "id": "c1", "name": "search", "input": {"q": "x"}})),
    tool_result=(1, st.just({"type": "tool_result", "toolCallId": "c1", "content": "found", "isError": False})),
    other=(1, st.sampled_from([{"type": "step-start"}, {"type": "step-finish"}, {"type": "image", "url": "u"}])),
)


def with_id(event: dict[str, Any], event_id: str | None) -> dict[str, Any]:
    return event if event_id is None else {**event, "eventId": event_id}


plain_events = weighted(
    text=(4, texts.map(lambda t: {"type": "assistant/chunk", "delta": {"type": "text", "text": t}})),
    reasoning=(1, texts.map(lambda t: {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": t}})),
    message=(4, st.builds(lambda content, use: message(*content, usage=use), st.lists(blocks, min_size=1, max_size=4), usages)),
    empty=(1, st.builds(lambda use: message(usage=use), usages)),  # usage only: must never hide a message
    tool=(1, st.just({"type": "tool/result", "toolCallId": "c1", "content": "found"})),
    user=(1, st.just({"type": "user/message", "message": {"content": "go on"}})),
    other=(1, st.sampled_from([{"type": "step/start"}, {"type": "step/finish"}, {"type": "x-trace", "span": 1}])),
)
events = st.builds(with_id, plain_events, event_ids)
turn_ends = st.builds(with_id, st.builds(turn_end, st.sampled_from(sorted(STOP_REASONS)), usages), event_ids)
batches = st.tuples(st.lists(events, min_size=1, max_size=5), st.sampled_from(["open"] * 7 + ["end"] * 2 + ["mid"])).flatmap(
    lambda pair: st.just(pair[0]) if pair[1] == "open"
    else turn_ends.map(lambda end: [*pair[0], end]) if pair[1] == "end"  # ends the turn
    else st.tuples(turn_ends, st.integers(0, len(pair[0]) - 1)).map(  # a turn/end with events after it
        lambda cut: [*pair[0][: cut[1]], cut[0], *pair[0][cut[1]:]]
    )
)
bad_events = st.sampled_from([
    {"type": "assistant/nonsense"},
    {"type": "assistant/chunk"},
    {"type": "assistant/message", "message": {"content": [{"text": "no type"}]}},
    {"type": "turn/end", "stopReason": "because"},
    {"type": "assistant/chunk", "delta": {"type": "text", "text": 5}},
])


# -- the machine ----------------------------------------------------------------------------


class Lifecycle(RuleBasedStateMachine):
    """Drives a real server; ``url`` is set by the test before the machine runs."""

    url = ""
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self.client = httpx.Client(base_url=self.url, timeout=30)
        self.models: dict[str, RunModel] = {}

    def teardown(self) -> None:
        self.client.close()

    # -- helpers --------------------------------------------------------------------------

    def problem(self, response: httpx.Response, status: int, code: str) -> dict[str, Any]:
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        assert (body["status"], body["code"]) == (status, code), body
        return dict(body)

    def unchanged(self, model: RunModel) -> None:
        """A refused request changed nothing: the run and its current result are still the model's."""
        self.verify(model)

    def verify(self, model: RunModel) -> None:
        """The run and its current turn's result are what the model says (after every step)."""
        self.check_run_view(model, self.client.get(f"/v1/runs/{model.run_id}").json())
        response = self.client.get(f"/v1/runs/{model.run_id}/result")
        assert response.status_code == 200, response.text
        self.check_result(model, model.turn, response.json())

    def apply_batch(self, model: RunModel, batch: list[dict[str, Any]]) -> tuple[int, str | None, Any]:
        """What the model expects for ``batch``: (status, problem code or None, duplicates)."""
        known = dict(model.ids)
        fresh: list[dict[str, Any]] = []
        duplicates = 0
        for event in batch:
            event_id = event.get("eventId")
            if event_id is not None and event_id in known:
                if known[event_id] != event:
                    return 409, "event_id_conflict", None
                duplicates += 1
                continue
            if event_id is not None:
                known[event_id] = event
            fresh.append(event)
        if not fresh:
            return 200, None, duplicates
        if model.status != "running":
            return 409, "run_ended", None
        ends = [index for index, event in enumerate(fresh) if event["type"] == "turn/end"]
        if ends and ends[0] != len(fresh) - 1:
            return 409, "run_ended", None
        for event in fresh:
            model.log.append((model.turn, event["type"], event))
            model.current.events.append(event)
            if event.get("eventId") is not None:
                model.ids[event["eventId"]] = event
        if ends:
            model.end_turn(STOP_REASONS[fresh[-1]["stopReason"]])
        return 200, None, (duplicates, len(fresh))

    # -- rules ----------------------------------------------------------------------------

    @initialize(target=runs, mode=st.sampled_from(["oneshot", "continuable"]))
    def first_run(self, mode: str) -> Any:
        return self.create(mode)

    @rule(target=runs, mode=st.sampled_from(["oneshot", "continuable"]))
    def create(self, mode: str) -> str:
        response = self.client.post("/v1/runs", json={"mode": mode, "agent": "machine"})
        assert response.status_code == 201, response.text
        run = response.json()
        assert (run["status"], run["turn"], run["lastSeq"], run["mode"]) == ("running", 1, 1, mode)
        model = RunModel(run["runId"], mode)
        model.log.append((1, "subagent/start", None))
        self.models[model.run_id] = model
        return model.run_id

    @rule(run=runs, batch=batches, ndjson=st.booleans())
    def push_events(self, run: str, batch: list[dict[str, Any]], ndjson: bool) -> None:
        model = self.models[run]
        if ndjson:
            # NDJSON applies line by line; keep it to batches the model reads the same way.
            if len(batch) != 1:
                ndjson = False
        expected_status, code, counts = self.apply_batch(model, batch)
        if ndjson:
            response = self.client.post(f"/v1/runs/{run}/events", content=orjson.dumps(batch[0]) + b"\n",
                                        headers={"content-type": "application/x-ndjson"})
        else:
            response = self.client.post(f"/v1/runs/{run}/events", json=batch)
        if code is not None:
            body = self.problem(response, expected_status, code)
            if code == "run_ended" and model.status != "running":
                assert body["stopReason"] == model.current.stop_reason
            self.unchanged(model)
            return
        assert response.status_code == 200, response.text
        answer = response.json()
        if isinstance(counts, int):  # every event was a retry
            assert (answer["accepted"], answer["duplicates"]) == (0, counts)
        else:
            assert (answer["duplicates"], answer["accepted"]) == counts
        assert answer["lastSeq"] == len(model.log)
        model.last_batch = batch
        self.verify(model)

    @precondition(lambda self: any(m.last_batch for m in self.models.values()))
    @rule(data=st.data())
    def retry_last_batch(self, data: st.DataObject) -> None:
        """A producer that lost the answer sends the same batch again: with eventIds, stored once."""
        model = data.draw(st.sampled_from([m for m in self.models.values() if m.last_batch]))
        batch = model.last_batch
        assert batch is not None
        expected_status, code, counts = self.apply_batch(model, batch)
        response = self.client.post(f"/v1/runs/{model.run_id}/events", json=batch)
        if code is not None:
            self.problem(response, expected_status, code)
            self.unchanged(model)
            return
        assert response.status_code == 200, response.text
        answer = response.json()
        if isinstance(counts, int):
            assert (answer["accepted"], answer["duplicates"]) == (0, counts)
        else:
            assert (answer["duplicates"], answer["accepted"]) == counts
        assert answer["lastSeq"] == len(model.log)
        self.verify(model)

    @rule(run=runs, bad=bad_events, position=st.integers(0, 2))
    def push_bad_batch(self, run: str, bad: dict[str, Any], position: int) -> None:
        """One bad event refuses the whole batch with 422 naming its index, and stores nothing."""
        model = self.models[run]
        good = [{"type": "x-before", "n": n} for n in range(position)]
        response = self.client.post(f"/v1/runs/{run}/events", json=[*good, bad, {"type": "x-after"}])
        body = self.problem(response, 422, "invalid_event")
        assert body["index"] == position
        self.unchanged(model)

    @rule(run=runs, text=texts, event_id=event_ids)
    def push_chunk(self, run: str, text: str, event_id: str | None) -> None:
        model = self.models[run]
        body: dict[str, Any] = {"text": text}
        event = {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}
        if event_id is not None:
            body["eventId"] = event["eventId"] = event_id
        expected_status, code, counts = self.apply_batch(model, [event])
        response = self.client.post(f"/v1/runs/{run}/chunks", json=body)
        if code is not None:
            self.problem(response, expected_status, code)
            self.unchanged(model)
            return
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["lastSeq"] == len(model.log)
        assert answer["accepted"] == (0 if isinstance(counts, int) else 1)
        self.verify(model)

    @rule(run=runs, reason=st.sampled_from([*sorted(STOP_REASONS), "because"]),
          error=st.none() | st.just({"message": "it broke"}))
    def end(self, run: str, reason: str, error: Any) -> None:
        model = self.models[run]
        body: dict[str, Any] = {"stopReason": reason}
        if error is not None:
            body["error"] = error
        response = self.client.post(f"/v1/runs/{run}/end", json=body)
        if reason not in STOP_REASONS:
            self.problem(response, 422, "validation_error")
            self.unchanged(model)
            return
        wire = STOP_REASONS[reason]
        if model.status == "running":
            model.end_turn(wire)
        elif model.current.stop_reason != wire:
            body = self.problem(response, 409, "turn_already_ended")
            assert body["stopReason"] == model.current.stop_reason
            self.unchanged(model)
            return
        # Ended now, or the same end again: the same result either way.
        assert response.status_code == 200, response.text
        self.check_result(model, model.turn, response.json())
        self.verify(model)

    @rule(run=runs)
    def next_turn(self, run: str) -> None:
        model = self.models[run]
        response = self.client.post(f"/v1/runs/{run}/turns")
        if model.mode == "oneshot":
            self.problem(response, 409, "not_continuable")
        elif model.status != "idle":
            self.problem(response, 409, f"run_{model.status}")
        else:
            assert response.status_code == 201, response.text
            model.turns.append(TurnModel())
            model.status = "running"
            model.log.append((model.turn, "subagent/start", None))
            self.check_run_view(model, response.json())
            self.verify(model)
            return
        self.unchanged(model)

    @rule(run=runs)
    def close(self, run: str) -> None:
        model = self.models[run]
        response = self.client.post(f"/v1/runs/{run}/close")
        if model.mode == "oneshot":
            self.problem(response, 409, "not_continuable")
            self.unchanged(model)
            return
        assert response.status_code == 200, response.text
        if model.status == "running":
            model.end_turn("cancelled")
        if model.status != "ended":
            model.log.append((model.turn, "run/closed", None))
            model.status = "ended"
        self.check_run_view(model, response.json())
        self.verify(model)

    @rule(run=runs)
    def read_everything(self, run: str) -> None:
        """The run, every turn's result and tool result, and the whole log agree with the model."""
        model = self.models[run]
        self.check_run_view(model, self.client.get(f"/v1/runs/{run}").json())
        for turn in range(1, model.turn + 1):
            response = self.client.get(f"/v1/runs/{run}/result", params={"turn": turn})
            assert response.status_code == 200, response.text
            self.check_result(model, turn, response.json())
            self.check_tool_result(model, turn)
        latest = self.client.get(f"/v1/runs/{run}/result")
        assert latest.status_code == 200 and latest.json()["turn"] == model.turn
        self.problem(self.client.get(f"/v1/runs/{run}/result", params={"turn": model.turn + 1}), 404, "turn_not_found")
        self.check_log(model)

    @rule()
    def unknown_run(self) -> None:
        """Every operation on a run that does not exist answers 404."""
        requests: list[tuple[str, str, dict[str, Any]]] = [
            ("GET", "", {}), ("GET", "/result", {}), ("GET", "/events", {}),
            ("POST", "/events", {"json": {"type": "x-a"}}), ("POST", "/end", {"json": {"stopReason": "stop"}}),
            ("POST", "/turns", {}), ("POST", "/close", {}),
        ]
        for method, path, kwargs in requests:
            response = self.client.request(method, f"/v1/runs/no-such-run{path}", **kwargs)
            assert response.status_code == 404, (method, path, response.text)

    # -- checks ---------------------------------------------------------------------------

    def check_run_view(self, model: RunModel, run: dict[str, Any]) -> None:
        assert run["runId"] == model.run_id
        assert (run["mode"], run["status"], run["turn"], run["lastSeq"]) == (
            model.mode, model.status, model.turn, len(model.log)
        )

    def check_result(self, model: RunModel, turn: int, result: dict[str, Any]) -> None:
        expected = model.turns[turn - 1]
        assert result["turn"] == turn
        assert result["output"] == expected_output(expected.events)
        assert result["usage"] == expected_usage(expected.events)
        if expected.stop_reason is None:
            assert result["status"] == "running" and "stopReason" not in result
            assert result["isError"] is False
        else:
            assert (result["status"], result["stopReason"]) == ("ended", expected.stop_reason)
            assert result["isError"] is (expected.stop_reason != "completed")

    def check_tool_result(self, model: RunModel, turn: int) -> None:
        expected = model.turns[turn - 1]
        response = self.client.get(f"/v1/runs/{model.run_id}/tool-result", params={"turn": turn})
        if expected.stop_reason is None:
            assert response.status_code == 202 and "retry-after" in response.headers
            return
        assert response.status_code == 200, response.text
        answer = response.json()
        [content] = answer["content"]
        assert content["type"] == "text" and content["text"].strip()
        partial = "\n\n".join(b["text"] for b in expected_output(expected.events) if b["type"] == "text")
        assert answer["isError"] is (expected.stop_reason != "completed")
        if expected.stop_reason == "completed":
            if partial:
                assert content["text"] == partial
        else:
            headline = content["text"].split("\n", 1)[0]
            assert expected.stop_reason in headline
            if partial:
                assert content["text"].endswith("\n\n" + partial)

    def check_log(self, model: RunModel) -> None:
        response = self.client.get(f"/v1/runs/{model.run_id}/events", params={"limit": 1000})
        assert response.status_code == 200, response.text
        log = response.json()["events"]
        assert [entry["seq"] for entry in log] == list(range(1, len(model.log) + 1))
        assert [(e["turn"], e["event"]["type"]) for e in log] == [(turn, kind) for turn, kind, _ in model.log]
        for entry, (turn, _, event) in zip(log, model.log, strict=True):
            if event is not None:
                assert entry["event"] == event  # stored exactly as sent
            elif entry["event"]["type"] == "subagent/end":
                end = entry["event"]
                expected = model.turns[turn - 1]
                output = expected_output(expected.events)
                assert end["stopReason"] == expected.stop_reason
                assert end["isError"] is (expected.stop_reason != "completed")
                assert end["usage"] == expected_usage(expected.events)
                if output:
                    assert end["lastAssistantMessage"] == output
                else:
                    assert "lastAssistantMessage" not in end  # absent, not [] (§8)


@pytest.fixture(scope="module")
def machine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    database = tmp_path_factory.mktemp("machine") / "lastword.db"
    settings_ = Settings(database_url=f"sqlite:///{database}", lease_seconds=0, keepalive_seconds=1.0)
    with threaded_server(settings_) as url:
        yield url


def test_the_lifecycle_follows_the_contract(machine_url: str) -> None:
    """Random sequences of create, ingest, retry, chunk, end, new turn, close and read match the model of SPEC §5–§8."""
    machine = type("Machine", (Lifecycle,), {"url": machine_url})
    run_settings = settings(
        max_examples=40, stateful_step_count=50, deadline=None, database=None, phases=PHASES,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    run_state_machine_as_test(machine, settings=run_settings)

