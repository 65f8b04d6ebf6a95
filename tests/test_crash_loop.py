"""Crash loop: ``kill -9`` a real server again and again while producers ingest, and lose nothing.

Several producer threads, each owning two continuable runs, send batches of events (JSON arrays,
NDJSON bodies and JSON chunks, every event with an ``eventId``), end turns (by ``turn/end`` or by
``POST …/end``) and start the next ones, retrying every request that fails on the way (refused or
cut connections, 503) until it is acknowledged. Meanwhile the test kills the server with SIGKILL
at random moments (seeded, so a failure replays) and starts it again on the same database (a
SQLite file, or a PostgreSQL schema).

After every restart, with the producers held at a gate, each run's whole log is checked against
what its producer sent: the producer events in the log are exactly the first ones it sent, in
order, each once (so every acknowledged event is there exactly once, and nothing else is);
``seq`` runs from 1 without a gap; every ended turn's ``subagent/end`` and ``/result`` hold the
output and usage that :mod:`lastword.rules.fold` selects from that turn's stored events, and the open
turn's ``/result`` does too.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from lastword.rules.fold import TurnFold, final_assistant_output
from lastword.rules.lifecycle import LIFECYCLE_TYPES
from lastword.rules.stop_reasons import ACCEPTED_INPUTS, normalise_stop_reason

from tests.api_helpers import logged
from tests.servers import ServerProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SEED = 20_240_604
KILLS = 20
PRODUCERS = 3
RUNS_PER_PRODUCER = 2
#: Per request: a server that stops answering fails the request, which is then retried.
REQUEST_TIMEOUT = 10.0
#: Bounds on waiting, not assertions on speed: a hang fails instead of blocking CI. The loop
#: took ~60 s on a quiet machine and passed 240 s twice at load ~20, so the bound is far out.
GATE_TIMEOUT = 30.0
TEST_DEADLINE = 900.0


@dataclass
class RunScript:
    """What one producer sent to one run, and how much of it was acknowledged."""

    run_id: str
    turn: int = 1
    #: Every event handed to a request, in send order, with the turn it was sent for.
    sent: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: How many of ``sent`` (a prefix) a 2xx answer acknowledged.
    acknowledged: int = 0
    #: Turn → the stop reason its acknowledged end gave.
    ends: dict[int, str] = field(default_factory=dict)


class Gate:
    """Lets the checker hold the producers between requests and wait for those in flight."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._open = True
        self._in_flight = 0

    @contextmanager
    def passage(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: self._open, GATE_TIMEOUT)
            self._in_flight += 1
        try:
            yield
        finally:
            with self._condition:
                self._in_flight -= 1
                self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self._open = False
            assert self._condition.wait_for(lambda: self._in_flight == 0, GATE_TIMEOUT), "a request never ended"

    def open(self) -> None:
        with self._condition:
            self._open = True
            self._condition.notify_all()


class Retrying:
    """A client thread's requests, each sent again after every lost connection or 503 until the
    service answers; only while the gate lets requests through (never across a kill)."""

    rng: random.Random
    gate: Gate
    client: httpx.Client
    retries: int

    def until_answered(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        deadline = time.monotonic() + TEST_DEADLINE
        while time.monotonic() < deadline:
            with self.gate.passage():
                try:
                    response = send()
                except httpx.TransportError:
                    response = None
            if response is not None and response.status_code != 503:
                return response
            self.retries += 1
            time.sleep(self.rng.uniform(0.05, 0.15))
        raise AssertionError("the service did not answer in time")


class Producer(Retrying):
    """One client thread: a seeded script of batches, turn ends and new turns over its runs."""

    def __init__(self, index: int, url: str, gate: Gate, stop: threading.Event) -> None:
        self.index = index
        self.rng = random.Random(SEED + index)
        self.gate = gate
        self.stop = stop
        self.client = httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT)
        self.runs = [RunScript(f"crash-{index}-{n}") for n in range(RUNS_PER_PRODUCER)]
        self.counter = 0
        self.retries = 0
        self.failure: BaseException | None = None

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.until_answered(lambda: self.client.post(path, **kwargs))

    # -- the script ----------------------------------------------------------------------------

    def event(self, script: RunScript) -> dict[str, Any]:
        self.counter += 1
        event_id = f"p{self.index}-{self.counter}"
        roll = self.rng.random()
        words = " ".join(self.rng.choice(["alpha", "beta", "gamma", "delta", "\u00e9t\u00e9", "\u6f22"])
                         for _ in range(self.rng.randint(1, 4)))
        usage = {"inputTokens": self.rng.randint(0, 500), "outputTokens": self.rng.randint(0, 4096)}
        if roll < 0.45:
            text = self.rng.choice([words + " ", " ", "\n"]) if self.rng.random() < 0.2 else words + " "
            return {"type": "assistant/chunk", "delta": {"type": "text", "text": text}, "eventId": event_id}
        if roll < 0.55:
            return {"type": "assistant/chunk", "delta": {"type": "reasoning", "text": words}, "eventId": event_id}
        if roll < 0.75:
            content = self.rng.choice([
                [{"type": "text", "text": words}],
                [],  # a usage-only record: must never hide an earlier message
                [{"type": "tool_call", "id": event_id, "name": "search", "input": {"q": words}}],
                [{"type": "reasoning", "text": words}, {"type": "text", "text": "  "}],
                [{"type": "step-start"}, {"type": "tool_result", "toolCallId": "x", "content": words}],
            ])
            return {"type": "assistant/message", "message": {"content": content, "usage": usage},
                    "eventId": event_id}
        if roll < 0.85:
            return {"type": "tool/result", "toolCallId": f"call-{self.counter}", "content": words, "eventId": event_id}
        return {"type": "x-note", "n": self.counter, "eventId": event_id}

    def send_batch(self, script: RunScript) -> None:
        events = [self.event(script) for _ in range(self.rng.randint(1, 8))]
        ending = self.rng.random() < 0.08
        if ending:
            self.counter += 1
            events.append({"type": "turn/end", "stopReason": self.rng.choice(ACCEPTED_INPUTS),
                           "eventId": f"p{self.index}-{self.counter}"})
        script.sent.extend((script.turn, event) for event in events)
        path = f"/v1/runs/{script.run_id}/events"
        style = self.rng.random()
        if style < 0.15 and len(events) == 1 and events[0]["type"] == "assistant/chunk" \
                and events[0]["delta"]["type"] == "text":
            delta = events[0]
            response = self.post(f"/v1/runs/{script.run_id}/chunks",
                                 json={"text": delta["delta"]["text"], "eventId": delta["eventId"]})
        elif style < 0.5:
            body = b"".join(orjson.dumps(event) + b"\n" for event in events)
            response = self.post(path, content=body, headers={"content-type": "application/x-ndjson"})
        else:
            response = self.post(path, json=events)
        assert response.status_code == 200, response.text
        script.acknowledged = len(script.sent)
        if ending:
            script.ends[script.turn] = normalise_stop_reason(events[-1]["stopReason"])
            self.next_turn(script)

    def end_turn(self, script: RunScript) -> None:
        reason = self.rng.choice(["completed", "max_tokens", "cancelled", "error"])
        response = self.post(f"/v1/runs/{script.run_id}/end", json={"stopReason": reason})
        assert response.status_code == 200, response.text
        assert response.json()["stopReason"] == reason
        script.ends[script.turn] = reason
        self.next_turn(script)

    def next_turn(self, script: RunScript) -> None:
        response = self.post(f"/v1/runs/{script.run_id}/turns")
        if response.status_code == 409:
            # The first attempt started it and its answer was lost: the run says so.
            run = self.until_answered(lambda: self.client.get(f"/v1/runs/{script.run_id}")).json()
            assert (run["status"], run["turn"]) == ("running", script.turn + 1), response.text
        else:
            assert response.status_code == 201, response.text
        script.turn += 1

    def run(self) -> None:
        try:
            for script in self.runs:
                response = self.post("/v1/runs", json={"runId": script.run_id, "mode": "continuable",
                                                       "agent": f"producer-{self.index}"})
                assert response.status_code in (200, 201), response.text
            while not self.stop.is_set():
                script = self.rng.choice(self.runs)
                if self.rng.random() < 0.05:
                    self.end_turn(script)
                else:
                    self.send_batch(script)
                # A pace that keeps the log small enough to re-read whole after every restart.
                time.sleep(self.rng.uniform(0.0, 0.04))
        except BaseException as error:  # reported by the test thread
            self.failure = error
        finally:
            self.client.close()




def check_run(client: httpx.Client, script: RunScript) -> int:
    """Check one run against its script; the count of producer events found in its log."""
    acknowledged, sent = script.acknowledged, list(script.sent)  # read before the log
    run_response = client.get(f"/v1/runs/{script.run_id}")
    if run_response.status_code == 404:
        assert not sent, "a run that took events is gone"
        return 0
    run = run_response.json()
    log = logged(client, script.run_id)
    assert [entry["seq"] for entry in log] == list(range(1, run["lastSeq"] + 1)), "seq has a gap or a repeat"

    produced = [(entry["turn"], entry["event"]) for entry in log if entry["event"]["type"] not in LIFECYCLE_TYPES]
    assert len(produced) >= acknowledged, "an acknowledged event is missing"
    assert produced == sent[: len(produced)], "the log is not exactly the events sent, in order, each once"

    for turn in range(1, run["turn"] + 1):
        events = [event for at, event in produced if at == turn]
        expected_output = final_assistant_output(events)
        fold = TurnFold()
        for event in events:
            fold.push(event)
        starts = [e for e in log if e["event"]["type"] == "subagent/start" and e["turn"] == turn]
        ends = [e["event"] for e in log if e["event"]["type"] == "subagent/end" and e["turn"] == turn]
        assert len(starts) == 1 and len(ends) <= 1
        response = client.get(f"/v1/runs/{script.run_id}/result", params={"turn": turn})
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["output"] == expected_output
        assert result["usage"] == fold.usage
        if ends:
            end = ends[0]
            assert end.get("lastAssistantMessage", []) == expected_output
            assert ("lastAssistantMessage" in end) == bool(expected_output)
            assert end["usage"] == fold.usage
            assert (result["status"], result["stopReason"]) == ("ended", end["stopReason"])
            if turn in script.ends:
                assert end["stopReason"] == script.ends[turn]
        else:
            assert turn == run["turn"] and run["status"] == "running", "only the current turn may be open"
            assert result["status"] == "running"
            assert turn not in script.ends, "an acknowledged end is missing"
    return len(produced)


def test_nothing_acknowledged_is_lost_across_repeated_kill_9(database_url: str) -> None:
    """Twenty kill -9s at random moments under concurrent ingest: after each restart every acknowledged event is there once, seq has no gap, and every result is the rule applied to the log.

    On SQLite and on PostgreSQL, where the producers' small appends are merged commits
    (``lastword.store.postgres.group``) that the kill cuts at any point of a batch."""
    rng = random.Random(SEED)
    server = ServerProcess({
        "LASTWORD_DATABASE_URL": database_url,
        "LASTWORD_LEASE_SECONDS": "3600",
        "LASTWORD_LOG_LEVEL": "error",
    }, cwd=REPO).start()
    gate, stop = Gate(), threading.Event()
    producers = [Producer(index, server.url, gate, stop) for index in range(PRODUCERS)]
    threads = [threading.Thread(target=producer.run, name=f"producer-{producer.index}") for producer in producers]
    deadline = time.monotonic() + TEST_DEADLINE
    checked: list[int] = []
    try:
        for thread in threads:
            thread.start()
        with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as checker:
            for _ in range(KILLS):
                assert time.monotonic() < deadline, "the crash loop ran past its time bound"
                time.sleep(rng.uniform(0.05, 0.6))  # a random point in the producers' work
                server.kill()
                time.sleep(rng.uniform(0.0, 0.2))  # producers meet refused connections meanwhile
                server.start()
                gate.close()
                try:
                    assert all(p.failure is None for p in producers), [p.failure for p in producers]
                    checked.append(sum(check_run(checker, s) for p in producers for s in p.runs))
                finally:
                    gate.open()
            stop.set()
            for thread in threads:
                thread.join(GATE_TIMEOUT)
            assert not any(thread.is_alive() for thread in threads), "a producer did not finish"
            for producer in producers:
                if producer.failure is not None:
                    raise producer.failure
            # Everything sent was acknowledged in the end, and is there once.
            for producer in producers:
                for script in producer.runs:
                    assert script.acknowledged == len(script.sent)
                    assert check_run(checker, script) == len(script.sent)
    finally:
        stop.set()
        gate.open()
        for thread in threads:
            thread.join(GATE_TIMEOUT)
        server.kill()
    # The loop did what it claims: producers kept making progress, and kills cut requests.
    assert checked == sorted(checked) and checked[-1] > checked[0]
    assert sum(producer.retries for producer in producers) >= KILLS
