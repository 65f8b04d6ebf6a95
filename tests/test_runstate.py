"""The run/turn state machine (lastword.rules.runstate), without a database.

The rules are applied to records held in memory, as the store would hold them: each operation's
:class:`Change` is folded into the run the next operation sees. The property test drives random
sequences of every operation and checks what must hold after any of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.errors import (
    EventIdConflict,
    LastwordError,
    NotContinuable,
    RunEnded,
    RunExists,
    RunRunning,
    TurnAlreadyEnded,
)
from lastword.rules import runstate
from lastword.rules.fold import TurnFold
from lastword.rules.records import RunMode, RunRecord, RunSpec, TurnRecord
from lastword.rules.stop_reasons import WIRE_VALUES, StopReason

from tests.builders import chunk, turn_end

NOW = 1_700_000_000.0


def spec(run_id: str = "r", *, mode: RunMode = "oneshot", lease: float | None = 30.0, body: str = "{}") -> RunSpec:
    return RunSpec(run_id=run_id, parent_run_id=None, agent=None, mode=mode, metadata={}, lease_seconds=lease,
                   canonical=body)


@dataclass
class Logged:
    seq: int
    type: str
    body: dict[str, Any]


@dataclass
class Memory:
    """A run as a store would keep it: the record, its turns, its log, and the open turn's fold."""

    run: RunRecord
    turns: dict[int, TurnRecord] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)
    fold: TurnFold = field(default_factory=TurnFold)

    @classmethod
    def create(cls, created: runstate.Change) -> Memory:
        memory = cls(run=created.run)
        memory.apply(created)
        return memory

    def apply(self, change: runstate.Change) -> None:
        logged = [Logged(seq, event["type"], event) for seq, event, _ in change.appended]
        logged += [Logged(event.seq, event.type, event.body) for event in change.events]
        assert [entry.seq for entry in logged] == list(
            range(self.log[-1].seq + 1 if self.log else 1, change.run.last_seq + 1)
        ), "a change logs the seqs after the run's last, gap-free, up to its new last"
        self.log.extend(logged)
        if change.started is not None:
            self.turns[change.started.turn] = change.started
            self.fold = TurnFold(last_seq=change.started.start_seq)
        if change.ended is not None:
            ended = change.ended
            self.turns[ended.turn] = replace(self.turns[ended.turn], ended_at=ended.ended_at,
                                             stop_reason=ended.stop_reason, error=ended.error,
                                             output=ended.output, usage=ended.usage)
        self.run = change.run

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def last_turn(self) -> TurnRecord:
        return self.turns[self.run.turn]


# -- examples ----------------------------------------------------------------------------


def test_a_new_run_runs_turn_one_from_seq_one() -> None:
    """create: running, turn 1, subagent/start at seq 1, the lease counted from now."""
    change = runstate.create(spec(lease=None), NOW, default_lease_seconds=60)
    assert (change.run.status, change.run.turn, change.run.last_seq) == ("running", 1, 1)
    assert change.run.lease_seconds == 60 and change.run.lease_expires_at == NOW + 60
    assert [(e.seq, e.type) for e in change.events] == [(1, "subagent/start")]
    assert change.started is not None and change.started.start_seq == 1
    assert runstate.create(spec(lease=0), NOW, 60).run.lease_expires_at is None


def test_a_repeated_create_is_answered_or_refused_by_its_body() -> None:
    existing = runstate.create(spec(body='{"a":1}'), NOW, 60).run
    assert runstate.repeated_create(existing, spec(body='{"a":1}')) is existing
    with pytest.raises(RunExists):
        runstate.repeated_create(existing, spec(body='{"a":2}'))


def test_a_turn_end_in_a_batch_ends_the_turn_with_the_selected_output() -> None:
    memory = Memory.create(runstate.create(spec(), NOW, 60))
    change = runstate.append(memory.run, memory.fold, list(enumerate([chunk("hel"), chunk("lo"), turn_end("stop")])), NOW + 1)
    memory.apply(change)
    assert memory.run.status == "ended" and memory.run.lease_expires_at is None
    assert [e.type for e in memory.log] == ["subagent/start", "assistant/chunk", "assistant/chunk", "turn/end",
                                            "subagent/end"]
    assert memory.last_turn.stop_reason == "completed"
    assert memory.last_turn.output == [{"type": "text", "text": "hello"}]
    assert memory.log[-1].body["lastAssistantMessage"] == [{"type": "text", "text": "hello"}]


def test_nothing_may_follow_a_turn_end_in_its_request() -> None:
    memory = Memory.create(runstate.create(spec(), NOW, 60))
    with pytest.raises(RunEnded) as refused:
        runstate.append(memory.run, memory.fold, list(enumerate([turn_end(), chunk("late")])), NOW)
    assert refused.value.extra["index"] == 1


def test_an_ended_run_refuses_events_naming_how_it_ended() -> None:
    memory = Memory.create(runstate.create(spec(), NOW, 60))
    memory.apply(runstate.end_turn(memory.run, memory.fold, "max_tokens", None, NOW))
    assert not runstate.accepts_events(memory.run)
    error = runstate.turn_has_ended(memory.run, memory.last_turn, 3)
    assert isinstance(error, RunEnded) and error.extra == {"runId": "r", "turn": 1, "stopReason": "max_tokens",
                                                            "index": 3}


def test_a_repeated_end_answers_the_same_and_another_reason_is_refused() -> None:
    memory = Memory.create(runstate.create(spec(), NOW, 60))
    memory.apply(runstate.end_turn(memory.run, memory.fold, "completed", None, NOW))
    assert runstate.decide_end(memory.run, NOW, only_if_expired=False) == "repeat"
    assert runstate.repeated_end(memory.run, memory.last_turn, "completed") == memory.last_turn
    with pytest.raises(TurnAlreadyEnded):
        runstate.repeated_end(memory.run, memory.last_turn, "error")


def test_the_sweep_ends_only_a_running_turn_whose_lease_ran_out() -> None:
    run = runstate.create(spec(lease=10), NOW, 60).run
    assert runstate.decide_end(run, NOW + 9.999, only_if_expired=True) == "skip"
    assert runstate.decide_end(run, NOW + 10, only_if_expired=True) == "end"
    unleased = runstate.create(spec(lease=0), NOW, 60).run
    assert runstate.decide_end(unleased, NOW + 1e9, only_if_expired=True) == "skip"
    ended = replace(run, status="ended", lease_expires_at=None)
    assert runstate.decide_end(ended, NOW + 100, only_if_expired=True) == "skip"


def test_every_accepted_event_renews_the_lease() -> None:
    memory = Memory.create(runstate.create(spec(lease=10), NOW, 60))
    memory.apply(runstate.append(memory.run, memory.fold, [(0, chunk("x"))], NOW + 7))
    assert memory.run.lease_expires_at == NOW + 17 and memory.run.updated_at == NOW + 7


def test_continuable_runs_take_turns_and_close() -> None:
    memory = Memory.create(runstate.create(spec(mode="continuable"), NOW, 60))
    with pytest.raises(RunRunning):
        runstate.next_turn(memory.run, NOW)
    memory.apply(runstate.end_turn(memory.run, memory.fold, "completed", None, NOW))
    assert memory.status == "idle"
    memory.apply(runstate.next_turn(memory.run, NOW + 1))
    assert (memory.status, memory.run.turn) == ("running", 2)
    assert memory.log[-1].type == "subagent/start" and memory.log[-1].body["turn"] == 2
    memory.apply(runstate.close(memory.run, memory.fold, NOW + 2))
    assert memory.status == "ended"
    assert [e.type for e in memory.log[-2:]] == ["subagent/end", "run/closed"]
    assert memory.last_turn.stop_reason == "cancelled"
    assert runstate.decide_close(memory.run) == "closed"
    with pytest.raises(RunEnded):
        runstate.next_turn(memory.run, NOW)


def test_a_oneshot_run_has_one_turn_and_is_not_closed() -> None:
    run = runstate.create(spec(), NOW, 60).run
    with pytest.raises(NotContinuable):
        runstate.next_turn(replace(run, status="ended"), NOW)
    with pytest.raises(NotContinuable):
        runstate.close(run, TurnFold(), NOW)


def test_a_repeated_event_id_is_kept_once_and_other_content_is_a_conflict() -> None:
    events = [chunk("a", "1"), chunk("b", "2"), chunk("a", "1")]
    fresh, duplicates = runstate.without_duplicates(events, {"2": chunk("b", "2")})
    assert [index for index, _ in fresh] == [0] and duplicates == 2
    with pytest.raises(EventIdConflict) as refused:
        runstate.without_duplicates([chunk("a", "1"), chunk("z", "1")], {})
    assert refused.value.extra == {"index": 1, "eventId": "1"}


# -- properties --------------------------------------------------------------------------

OPERATIONS = st.sampled_from(["append", "append_end", "end", "sweep", "next", "close"])


@settings(max_examples=300, deadline=None)
@given(
    mode=st.sampled_from(["oneshot", "continuable"]),
    lease=st.sampled_from([0.0, 5.0]),
    steps=st.lists(st.tuples(OPERATIONS, st.integers(0, 3), st.sampled_from(WIRE_VALUES), st.floats(0, 10)),
                   max_size=25),
)
def test_any_sequence_of_operations_keeps_the_run_consistent(
    mode: RunMode, lease: float, steps: list[tuple[str, int, StopReason, float]]
) -> None:
    """Whatever is asked in whatever order: seqs are gap-free, a turn ends exactly once, the
    status follows the mode, only a running turn has a lease, and every refusal changes nothing."""
    now = NOW
    memory = Memory.create(runstate.create(spec(mode=mode, lease=lease), now, 60))
    for operation, count, reason, pause in steps:
        now += pause
        before = memory.run
        try:
            if operation in ("append", "append_end"):
                events = [chunk(f"t{i}") for i in range(count)] + ([turn_end(reason)] if operation == "append_end" else [])
                if not events:
                    continue
                if not runstate.accepts_events(before):
                    error = runstate.turn_has_ended(before, memory.last_turn, 0)
                    assert before.status != "running" and isinstance(error, RunEnded)
                    continue
                change = runstate.append(before, memory.fold, list(enumerate(events)), now)
            elif operation in ("end", "sweep"):
                decision = runstate.decide_end(before, now, only_if_expired=operation == "sweep")
                if decision == "skip":
                    assert operation == "sweep" and not runstate.lease_expired(before, now)
                    continue
                if decision == "repeat":
                    assert before.status != "running"
                    try:
                        assert runstate.repeated_end(before, memory.last_turn, reason).stop_reason == reason
                    except TurnAlreadyEnded:
                        assert memory.last_turn.stop_reason != reason
                    continue
                change = runstate.end_turn(before, memory.fold, "timeout" if operation == "sweep" else reason, None, now)
            elif operation == "next":
                change = runstate.next_turn(before, now)
                assert before.mode == "continuable" and before.status == "idle"
            else:
                closing = runstate.decide_close(before)
                change = runstate.close(before, memory.fold if closing == "end_and_close" else None, now)
                assert before.mode == "continuable"
        except LastwordError:
            assert memory.run == before  # a refusal changes nothing
            continue
        memory.apply(change)
        run = memory.run
        assert run.turn == len(memory.turns)
        assert (run.lease_expires_at is not None) == (run.status == "running" and run.lease_seconds > 0)
        if run.mode == "oneshot":
            assert run.status in ("running", "ended") and run.turn == 1
        ended_turns = [e.body["turn"] for e in memory.log if e.type == "subagent/end"]
        assert len(ended_turns) == len(set(ended_turns)), "a turn ends exactly once"
        assert sorted(ended_turns) == sorted(t.turn for t in memory.turns.values() if t.ended)
        if run.status == "running":
            assert not memory.last_turn.ended
        closes = [e for e in memory.log if e.type == "run/closed"]
        assert len(closes) <= 1 and (not closes or memory.log[-1].type == "run/closed")


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.sampled_from(["x", "y"])), max_size=12),
    stored=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"]), max_size=3),
)
def test_event_ids_are_stored_once_and_conflicts_refuse_the_batch(
    events: list[tuple[str | None, str]], stored: dict[str, str]
) -> None:
    """Each eventId ends up in the log once; a repeat with other content refuses the whole batch."""
    batch = [chunk(content, event_id) for event_id, content in events]
    in_log = {event_id: chunk(content, event_id) for event_id, content in stored.items()}
    first_content: dict[str, str] = dict(stored)
    conflict = False
    for event_id, content in events:
        if event_id is not None:
            conflict |= first_content.setdefault(event_id, content) != content
    if conflict:
        with pytest.raises(EventIdConflict):
            runstate.without_duplicates(batch, in_log)
        return
    fresh, duplicates = runstate.without_duplicates(batch, in_log)
    assert len(fresh) + duplicates == len(batch)
    fresh_ids = [event.get("eventId") for _, event in fresh if event.get("eventId") is not None]
    assert len(fresh_ids) == len(set(fresh_ids)) and not set(fresh_ids) & set(stored)
    assert [index for index, _ in fresh] == sorted(index for index, _ in fresh)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.sampled_from(["x", "y"])), max_size=12),
    stored=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"]), max_size=3),
)
def test_listing_the_carried_event_ids_answers_the_same(
    events: list[tuple[str | None, str]], stored: dict[str, str]
) -> None:
    """The store lists the eventIds a batch carries (to read those in the log) and hands them
    on: whatever the batch, the answer or the refusal is the one without them."""
    batch = [chunk(content, event_id) for event_id, content in events]
    carried = list(dict.fromkeys(event_id for event_id, _ in events if event_id is not None))
    in_log = {event_id: chunk(content, event_id) for event_id, content in stored.items() if event_id in carried}

    def answer(**given: Any) -> Any:
        try:
            return runstate.without_duplicates(batch, in_log, **given)
        except EventIdConflict as error:
            return error.extra

    assert answer(carried=carried) == answer()


@settings(max_examples=300, deadline=None)
@given(
    kept=st.lists(st.booleans(), max_size=12),
    last_seq=st.integers(min_value=0, max_value=5),
    with_json=st.booleans(),
)
def test_numbered_events_follow_the_run_and_keep_their_own_json(
    kept: list[bool], last_seq: int, with_json: bool
) -> None:
    """Whichever events of a request are fresh, each is numbered after the run's last seq, in
    order, with the JSON the request carried for it (its index in the request, not its place)."""
    events = [chunk(str(index)) for index in range(len(kept))]
    encoded = [f'"{index}"' for index in range(len(kept))] if with_json else None
    fresh = [(index, event) for index, event in enumerate(events) if kept[index]]
    run = replace(runstate.create(WHOLE, NOW, 60).run, last_seq=last_seq)
    assert runstate.numbered(run, fresh, encoded) == [
        (last_seq + 1 + place, event, None if encoded is None else encoded[index])
        for place, (index, event) in enumerate(fresh)
    ]


# -- what each operation says and keeps (the mutation baseline, docs/MUTATION.md) ----------------

FULL = RunSpec(run_id="r", parent_run_id="p", agent="a", mode="continuable", metadata={"k": 1}, lease_seconds=30,
               canonical='{"runId":"r"}', fork_of=("f", 4), join_continuations=True)
#: The same, not a fork (so the Memory's log starts at seq 1).
WHOLE = replace(FULL, fork_of=None)


def identity(run: RunRecord) -> RunRecord:
    """``run`` with what operations move set aside: what it is, not where it stands."""
    return replace(run, status="idle", turn=0, last_seq=0, lease_expires_at=None, updated_at=0.0)


def test_create_keeps_the_whole_spec_and_a_fork_goes_on_after_its_boundary() -> None:
    """The run is the spec, running turn 1 from the seq after the fork's boundary, with its
    turn record and a subagent/start that names the run, its parent and agent."""
    change = runstate.create(FULL, NOW, 60)
    assert change.run == RunRecord(
        pk=0, run_id="r", parent_run_id="p", agent="a", mode="continuable", metadata={"k": 1}, lease_seconds=30,
        canonical='{"runId":"r"}', status="running", turn=1, last_seq=5, lease_expires_at=NOW + 30, created_at=NOW,
        updated_at=NOW, fork_of=("f", 4), join_continuations=True)
    assert change.started == TurnRecord(run_id="r", turn=1, start_seq=5, started_at=NOW, ended_at=None,
                                        stop_reason=None, error=None, output=[], usage={})
    [event] = change.events
    assert (event.seq, event.turn, event.type) == (5, 1, "subagent/start")
    assert {key: event.body[key] for key in ("runId", "parentRunId", "agent", "turn")} == {
        "runId": "r", "parentRunId": "p", "agent": "a", "turn": 1}


def test_every_operation_keeps_what_the_run_is_and_names_it_in_its_events() -> None:
    """append, end, next turn and close move status, turn, seq, lease and time only, and each
    lifecycle event they log is in the run's turn and names the run, its parent and agent."""
    memory = Memory.create(runstate.create(WHOLE, NOW, 60))
    created = identity(memory.run)
    steps: list[Callable[[float], runstate.Change]] = [
        lambda now: runstate.append(memory.run, memory.fold, [(0, chunk("x"))], now),
        lambda now: runstate.end_turn(memory.run, memory.fold, "completed", None, now),
        lambda now: runstate.next_turn(memory.run, now),
        lambda now: runstate.close(memory.run, memory.fold, now),
    ]
    for number, step in enumerate(steps, 1):
        change = step(NOW + number)
        memory.apply(change)
        assert identity(memory.run) == created and memory.run.updated_at == NOW + number
        for event in change.events:
            assert event.turn == memory.run.turn, event.type
            assert (event.body["runId"], event.body["parentRunId"], event.body["agent"]) == ("r", "p", "a")
    fork = runstate.create(FULL, NOW, 60).run
    assert runstate.append(fork, TurnFold(), [(0, chunk("x"))], NOW).run.fork_of == ("f", 4)


def test_an_end_logs_its_reason_error_and_usage() -> None:
    """The ended turn and its subagent/end carry the stop reason, the error and the usage; an
    error sent with turn/end is the one the turn ends with."""
    memory = Memory.create(runstate.create(WHOLE, NOW, 60))
    usage = {"type": "assistant/message", "message": {"content": [], "usage": {"inputTokens": 3, "outputTokens": 4}}}
    end = {**turn_end("error"), "error": {"message": "boom"}}
    change = runstate.append(memory.run, memory.fold, list(enumerate([usage, end])), NOW + 1)
    assert change.ended is not None
    assert (change.ended.stop_reason, change.ended.error) == ("error", {"message": "boom"})
    assert (change.ended.usage["inputTokens"], change.ended.usage["outputTokens"]) == (3, 4)
    body = change.events[-1].body
    assert (body["stopReason"], body["error"], body["usage"]) == ("error", {"message": "boom"}, change.ended.usage)


def test_appended_events_keep_their_json_and_bring_the_fold_to_their_seq() -> None:
    memory = Memory.create(runstate.create(WHOLE, NOW, 60))
    fresh = [(0, chunk("a")), (2, chunk("b"))]
    encoded = ['"zero"', '"one"', '"two"']
    change = runstate.append(memory.run, memory.fold, fresh, NOW, encoded)
    assert [(seq, text) for seq, _, text in change.appended] == [(2, '"zero"'), (3, '"two"')]
    assert memory.fold.last_seq == 3
    assert runstate.numbered(memory.run, fresh, encoded) == [(2, chunk("a"), '"zero"'), (3, chunk("b"), '"two"')]


def test_closing_an_open_turn_cancels_it_with_the_closing_error() -> None:
    memory = Memory.create(runstate.create(WHOLE, NOW, 60))
    change = runstate.close(memory.run, memory.fold, NOW + 1)
    assert change.ended is not None and change.ended.stop_reason == "cancelled"
    assert change.ended.error == {"message": "the run was closed"}
    assert [event.type for event in change.events] == ["subagent/end", "run/closed"]
    assert change.run.status == "ended" and change.run.updated_at == NOW + 1
    with pytest.raises(ValueError, match="^closing a running run needs its open turn's fold$"):
        runstate.close(memory.run, None, NOW + 1)


def test_the_decisions_name_what_happens() -> None:
    running = runstate.create(FULL, NOW, 60).run
    assert runstate.decide_end(running, NOW, only_if_expired=False) == "end"
    assert runstate.decide_close(replace(running, status="idle")) == "close"
    assert runstate.decide_close(running) == "end_and_close"
    assert runstate.lease_expiry(0.5, NOW) == NOW + 0.5


def test_each_refusal_says_what_and_names_the_run() -> None:
    """The service's errors carry a sentence and the fields a problem document shows."""
    running = runstate.create(FULL, NOW, 60).run
    oneshot = replace(running, mode="oneshot")
    refusals: list[tuple[Callable[[], object], str, dict[str, Any]]] = [
        (lambda: runstate.next_turn(running, NOW), "is running", {"runStatus": "running"}),
        (lambda: runstate.next_turn(replace(running, status="ended"), NOW), "is ended", {"runStatus": "ended"}),
        (lambda: runstate.next_turn(oneshot, NOW), "is oneshot", {}),
        (lambda: runstate.decide_close(oneshot), "is oneshot", {}),
        (lambda: runstate.repeated_create(running, replace(FULL, canonical="{}")), "different body", {"runId": "r"}),
        (lambda: runstate.append(running, TurnFold(), list(enumerate([turn_end("max_tokens", error={"m": 1}),
                                                                      chunk("late")])), NOW),
         "event 1 follows the turn/end", {"index": 1, "runId": "r", "turn": 1, "stopReason": "max_tokens"}),
        (lambda: runstate.without_duplicates([chunk("a", "1"), chunk("b", "1")], {}), "already used for other content",
         {"index": 1, "eventId": "1"}),
    ]
    for refuse, words, extra in refusals:
        with pytest.raises(LastwordError) as refused:
            refuse()
        assert words in refused.value.detail and refused.value.extra == extra, refused.value.detail
    ended = replace(running, status="idle")
    last = TurnRecord(run_id="r", turn=1, start_seq=5, started_at=NOW, ended_at=NOW, stop_reason="completed",
                      error=None, output=[], usage={})
    with pytest.raises(TurnAlreadyEnded) as again:
        runstate.repeated_end(ended, last, "error")
    assert "already ended with completed" in again.value.detail
    assert again.value.extra == {"runId": "r", "turn": 1, "stopReason": "completed"}
    assert runstate.turn_has_ended(ended, last).detail == (
        "turn 1 of run 'r' has ended (completed); no more events are accepted for it")


def test_the_state_machine_refuses_what_the_store_must_never_ask() -> None:
    """Programming errors, not requests: each says which."""
    ended = replace(runstate.create(FULL, NOW, 60).run, status="ended")
    with pytest.raises(ValueError, match="^append to a run that is not running$"):
        runstate.append(ended, TurnFold(), [(0, chunk("x"))], NOW)
    with pytest.raises(ValueError, match="^end_turn of a run that is not running$"):
        runstate.end_turn(ended, TurnFold(), "completed", None, NOW)
    change = runstate.Change(run=ended, ended=runstate.EndedTurn(turn=1, ended_at=NOW, stop_reason="completed",
                                                                error=None, output=[], usage={}))
    with pytest.raises(ValueError, match="^one change ends at most one turn$"):
        change.then(change)
    with pytest.raises(ValueError, match="^ingested events come first in a change$"):
        runstate.Change(run=ended).then(runstate.Change(run=ended, appended=[(1, chunk("x"), None)]))


def test_a_change_then_another_keeps_the_turn_that_started() -> None:
    created = runstate.create(FULL, NOW, 60)
    later = runstate.Change(run=created.run)
    assert created.then(later).started == created.started
    assert later.then(created).started == created.started


def test_a_secret_is_kept_as_its_sha256_and_an_old_plain_one_still_matches() -> None:
    """A create with a webhook secret stored before secrets were digested (the secret itself in
    the stored body) is the same create as one stored now; another secret is a conflict."""
    assert runstate.secret_digest("whsec_abc") == "sha256:" + hashlib.sha256(b"whsec_abc").hexdigest()

    def canonical(secret: str | None) -> str:
        return orjson.dumps({"runId": "r", "webhook": {"secret": secret, "url": "https://h.example/x"}},
                            option=orjson.OPT_SORT_KEYS).decode()

    now = canonical(runstate.secret_digest("whsec_abc"))
    stored_then = replace(runstate.create(FULL, NOW, 60).run, canonical=canonical("whsec_abc"))
    assert runstate.repeated_create(stored_then, replace(FULL, canonical=now)) is stored_then
    assert runstate.repeated_create(stored_then, replace(FULL, canonical=canonical("whsec_abc"))) is stored_then
    with pytest.raises(RunExists):
        runstate.repeated_create(stored_then, replace(FULL, canonical=canonical(runstate.secret_digest("whsec_x"))))
    # Stored in another key order, the plain secret's body is still compared in canonical order.
    unsorted = orjson.dumps({"webhook": {"url": "https://h.example/x", "secret": "whsec_abc"}, "runId": "r"}).decode()
    assert runstate.repeated_create(replace(stored_then, canonical=unsorted), replace(FULL, canonical=now))
    # A digest stored is never taken for a plain secret and digested again.
    digest = runstate.secret_digest("whsec_abc")
    with pytest.raises(RunExists):
        runstate.repeated_create(replace(stored_then, canonical=canonical(digest)),
                                 replace(FULL, canonical=canonical(runstate.secret_digest(digest))))
    for body in (canonical(None), canonical(now), "[]", '{"webhook": null}', '{"webhook": {"secret": 1}}'):
        stored = replace(stored_then, canonical=body)
        with pytest.raises(RunExists):
            runstate.repeated_create(stored, replace(FULL, canonical=now))
