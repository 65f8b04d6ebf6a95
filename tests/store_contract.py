"""The storage contract (``lastword.store.base.Store``), as one abstract suite every backend runs.

The eventsourcing habit: the suite is written once against the contract, and each backend's
test module subclasses it with one factory, the ``database_url`` fixture of a fresh, empty
database (``tests/test_store_sqlite.py``, ``tests/test_store_postgres.py``). The tests talk to
the store directly, below HTTP and the service: what each operation stores, returns and
refuses, that a refused batch stores nothing, that a reopened store (a restart) reads back
the same, and that two stores on one database (two replicas) agree.

Times are plain numbers passed in (the store has no clock of its own), so leases are tested
by passing a later ``now``, never by waiting.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from dataclasses import replace
from typing import Any, Literal, cast

import orjson
import pytest
from lastword.errors import (
    Conflict,
    EventIdConflict,
    NotContinuable,
    RunDeleted,
    RunEnded,
    RunExists,
    RunNotFound,
    TurnAlreadyEnded,
    TurnNotFound,
    UnstorableValue,
)
from lastword.registry import open_store
from lastword.settings import Settings
from lastword.rules.ds import Producer
from lastword.rules.records import WebhookTarget
from lastword.store import Feed, Outbox, RunLog, RunSpec, Stats, Store
from lastword.store.sql.store import SqlStore
from lastword.store.sql.tx import Tx

from tests.builders import chunk, message, text, turn_end, usage

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000.0  # "now" for the tests: any fixed time will do


def spec(run_id: str, *, mode: Literal["oneshot", "continuable"] = "oneshot", parent: str | None = None,
         agent: str | None = None, lease: float | None = None, metadata: dict[str, Any] | None = None) -> RunSpec:
    body = {"runId": run_id, "mode": mode, "parentRunId": parent, "agent": agent, "leaseSeconds": lease}
    return RunSpec(run_id=run_id, parent_run_id=parent, agent=agent, mode=mode, metadata=metadata or {},
                   lease_seconds=lease, canonical=orjson.dumps(body).decode())


async def producer_rows(store: Store) -> set[str]:
    """The keys in ``ds_producers``, read from the table itself: no operation of the store shows
    the producers of a deleted run (both backends are :class:`SqlStore`)."""

    def keys(tx: Tx) -> set[str]:
        return {row[0] for row in tx.all("SELECT uid FROM ds_producers")}

    return await cast(SqlStore, store)._read(keys)


def bodies(events: list[Any]) -> list[dict[str, Any]]:
    return [event.body for event in events]


STARTER = textwrap.dedent(
    """
    import asyncio, sys, time
    from lastword.settings import Settings
    from lastword.registry import open_store

    async def main() -> None:
        store = open_store(Settings(database_url=sys.argv[1], lease_seconds=0))
        while time.time() < float(sys.argv[2]):
            time.sleep(0.0005)
        await store.open()
        await store.ping()
        await store.close()

    asyncio.run(main())
    print("opened")
    """
)


class ContractBase:
    """Abstract: a backend's subclass provides the ``database_url`` fixture (a fresh database per test)."""

    @pytest.fixture
    def database_url(self) -> Iterator[str]:
        raise NotImplementedError("a backend's test class supplies a fresh database")

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    def new_store(self, database_url: str, **settings: Any) -> Store:
        return open_store(Settings(**{"database_url": database_url, "lease_seconds": 0, **settings}))

    @pytest.fixture
    async def store(self, database_url: str) -> AsyncIterator[Store]:
        opened = self.new_store(database_url)
        await opened.open()
        try:
            yield opened
        finally:
            await opened.close()



class RunLogContract(ContractBase):
    """:class:`lastword.store.protocols.RunLog`: runs, turns and their logs."""

    # -- creating runs ---------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_create_starts_turn_one_and_logs_subagent_start(self, store: Store) -> None:
        """A new run is running on turn 1; its log holds subagent/start at seq 1 and in the feed."""
        run, created, stored = await store.create_run(spec("r1", agent="helper", parent="p"), T0)
        assert created
        assert (run.run_id, run.status, run.turn, run.last_seq, run.mode) == ("r1", "running", 1, 1, "oneshot")
        assert (run.agent, run.parent_run_id, run.created_at) == ("helper", "p", T0)
        [start] = stored
        assert (start.seq, start.type, start.turn) == (1, "subagent/start", 1)
        assert start.body["runId"] == "r1" and start.body["agent"] == "helper" and start.body["turn"] == 1
        assert bodies(await store.events_after("r1", 0, 10)) == [start.body]
        assert [event.feed_id for event in await store.feed_after(0, None, 10)] == [start.feed_id]
        assert await store.get_run("r1") == run

    @pytest.mark.anyio
    async def test_repeated_create_returns_the_run_and_a_different_one_conflicts(self, store: Store) -> None:
        """The same spec again is answered with the stored run and changes nothing; another spec is refused."""
        first, _, _ = await store.create_run(spec("r1", metadata={"k": 1}), T0)
        again, created, stored = await store.create_run(spec("r1", metadata={"k": 1}), T0 + 5)
        assert (again, created, stored) == (first, False, [])
        with pytest.raises(RunExists):
            await store.create_run(spec("r1", agent="other"), T0 + 5)
        assert len(await store.events_after("r1", 0, 10)) == 1

    @pytest.mark.anyio
    async def test_unknown_run_is_not_found_everywhere(self, store: Store) -> None:
        """Every operation on a run that does not exist raises NotFound and creates nothing."""
        for operation in (
            store.get_run("nope"),
            store.append("nope", [chunk("x")], T0),
            store.end_turn("nope", "completed", None, T0),
            store.start_turn("nope", T0),
            store.close_run("nope", T0),
            store.turn_result("nope", None),
        ):
            with pytest.raises(RunNotFound):
                await operation
        assert not any((await store.count_runs()).values())

    # -- appending -----------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_append_assigns_consecutive_seqs_and_keeps_events_as_sent(self, store: Store) -> None:
        """Each append takes the next seqs, gap-free; the log hands the events back unchanged."""
        await store.create_run(spec("r1"), T0)
        sent = [chunk("a", "e1"), message(text("b", extra={"x": [1]}), usage=usage(1, 2)), {"type": "x-trace", "n": 1}]
        first = await store.append("r1", sent[:2], T0 + 1)
        second = await store.append("r1", sent[2:], T0 + 2)
        assert (first.accepted, first.duplicates, first.last_seq) == (2, 0, 3)
        assert (second.accepted, second.last_seq) == (1, 4)
        logged = await store.events_after("r1", 1, 10)
        assert [(event.seq, event.turn, event.type) for event in logged] == [
            (2, 1, "assistant/chunk"), (3, 1, "assistant/message"), (4, 1, "x-trace"),
        ]
        assert bodies(logged) == sent
        assert [event.event_id for event in logged] == ["e1", None, None]
        assert [event.received_at for event in logged] == [T0 + 1, T0 + 1, T0 + 2]
        assert (await store.get_run("r1")).last_seq == 4

    @pytest.mark.anyio
    async def test_events_after_pages_and_filters_by_type(self, store: Store) -> None:
        """events_after(after, limit) pages in seq order; ``types`` keeps only those types."""
        await store.create_run(spec("r1"), T0)
        await store.append("r1", [chunk(str(number)) for number in range(10)], T0)
        pages = [await store.events_after("r1", after, 4) for after in (0, 4, 8)]
        assert [[event.seq for event in page] for page in pages] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11]]
        assert [event.seq for event in await store.events_after("r1", 0, 100, frozenset({"subagent/start"}))] == [1]
        assert await store.events_after("r1", 11, 10) == []

    @pytest.mark.anyio
    async def test_the_open_turns_result_follows_the_rule(self, store: Store) -> None:
        """turn_result of an open turn selects its output by SPEC §5 and sums its usage so far."""
        await store.create_run(spec("r1"), T0)
        await store.append("r1", [message("kept", usage=usage(3, 4)), message(usage=usage(1, 1)), chunk("later")], T0)
        run, turn = await store.turn_result("r1", None)
        assert run.status == "running" and not turn.ended
        assert turn.output == [text("kept")]
        assert turn.usage == {"inputTokens": 4, "outputTokens": 5, "cacheReadTokens": 0, "cacheWriteTokens": 0}
        snapshot_run, snapshot_turn = await store.snapshot("r1")
        assert snapshot_run.last_seq == 4 and snapshot_turn.output == [text("kept")]

    @pytest.mark.anyio
    async def test_create_with_events_is_all_or_nothing(self, store: Store) -> None:
        """A run created with events holds them at once; events the store refuses leave no run
        (the id stays free), and a repeat of the spec appends nothing."""
        with pytest.raises(UnstorableValue):
            await store.create_run_with_events(spec("r1"), [chunk("a", "e1"), chunk("b", "bad\x00id")], T0, None)
        with pytest.raises(RunNotFound):
            await store.get_run("r1")
        run, created, stored, outcome = await store.create_run_with_events(
            spec("r1"), [chunk("a", "e1"), chunk("b", "e2")], T0, None)
        assert created and outcome is not None and (outcome.accepted, outcome.last_seq) == (2, 3)
        assert (run.run_id, run.last_seq) == ("r1", 3)
        # (The chunks are among the live events only where the dialect returns them: SQLite.)
        assert (stored[0].seq, stored[0].type) == (1, "subagent/start")
        again, created, stored, outcome = await store.create_run_with_events(spec("r1"), [chunk("c", "e3")], T0, None)
        assert (created, stored, outcome, again.last_seq) == (False, [], None, 3)
        assert bodies(await store.events_after("r1", 1, 10)) == [chunk("a", "e1"), chunk("b", "e2")]

    @pytest.mark.anyio
    async def test_a_repeated_event_id_is_a_duplicate_and_a_clash_stores_nothing(self, store: Store) -> None:
        """The same eventId with the same content is counted as a duplicate and stored once; with
        other content the whole batch is refused and nothing of it is stored."""
        await store.create_run(spec("r1"), T0)
        await store.append("r1", [chunk("one", "e1")], T0)
        retry = await store.append("r1", [chunk("one", "e1"), chunk("two", "e2")], T0)
        assert (retry.accepted, retry.duplicates, retry.last_seq) == (1, 1, 3)
        with pytest.raises(EventIdConflict):
            await store.append("r1", [chunk("three", "e3"), chunk("not one", "e1")], T0)
        assert [event.body for event in await store.events_after("r1", 1, 10)] == [chunk("one", "e1"), chunk("two", "e2")]
        _, turn = await store.turn_result("r1", None)
        assert turn.output == [text("onetwo")]

    @pytest.mark.anyio
    async def test_a_large_batch_keeps_every_character_and_a_refused_one_stores_nothing(self, store: Store) -> None:
        """A batch of hundreds (PostgreSQL streams it as COPY text) keeps tabs, backslashes and
        line ends in texts and eventIds, dedupes them on a retry, and a large batch refused by its
        last event (after a turn/end) leaves the log as it was, the next batch taking the next seq."""
        await store.create_run(spec("r1"), T0)
        awkward = "tab\there\\back\nline\r\\N end"
        sent = [chunk(f"{awkward} {number}", f"{awkward}-{number}") for number in range(300)]
        first = await store.append("r1", sent, T0 + 0.125)
        assert (first.accepted, first.last_seq) == (300, 301)
        assert (await store.append("r1", sent, T0 + 1)).duplicates == 300
        with pytest.raises(RunEnded):
            await store.append("r1", [chunk(str(number)) for number in range(200)] + [turn_end(), chunk("after")], T0)
        last = await store.append("r1", [chunk("next")], T0 + 2)
        assert last.last_seq == 302
        logged = await store.events_after("r1", 1, 1000)
        assert bodies(logged) == [*sent, chunk("next")]
        assert [event.event_id for event in logged[:300]] == [f"{awkward}-{number}" for number in range(300)]
        assert {event.received_at for event in logged[:300]} == {T0 + 0.125}
        _, turn = await store.turn_result("r1", None)
        assert turn.output == [text("".join(f"{awkward} {number}" for number in range(300)) + "next")]

    @pytest.mark.anyio
    async def test_a_batch_of_hundreds_logs_each_rows_own_values(self, store: Store) -> None:
        """Batches of 250 events, some with eventIds among them (SQLite inserts the others a
        hundred at a statement), sent alone or two at once: each event is logged with its own
        seq, type, eventId and body and its append's time; a NUL in one type refuses its batch
        whole and the other commits."""
        for run_id in ("r1", "r2"):
            await store.create_run(spec(run_id), T0)
        def batch(prefix: str, size: int) -> list[dict[str, Any]]:
            return [chunk(str(number), f"{prefix}-{number}") if number % 7 == 0
                    else {"type": f"x-kind-{number % 3}", "n": number} for number in range(size)][::-1]

        alone = await store.append("r1", batch("a", 250), T0 + 0.5)
        together = await asyncio.gather(store.append("r1", batch("b", 120), T0 + 1.5),
                                        store.append("r2", batch("c", 250), T0 + 2.5))
        assert (alone.last_seq, together[0].last_seq, together[1].last_seq) == (251, 371, 251)
        expected = {"r1": [(event, T0 + 0.5) for event in batch("a", 250)]
                          + [(event, T0 + 1.5) for event in batch("b", 120)],
                    "r2": [(event, T0 + 2.5) for event in batch("c", 250)]}
        for run_id, events in expected.items():
            logged = await store.events_after(run_id, 1, 1000)
            assert [(event.seq, event.turn, event.type, event.event_id, event.received_at) for event in logged] == [
                (number + 2, 1, event["type"], event.get("eventId"), at) for number, (event, at) in enumerate(events)]
            assert bodies(logged) == [event for event, _ in events]
        spoiled = [chunk(str(number)) for number in range(250)]
        spoiled[150] = {"type": "x-\x00"}
        with pytest.raises(UnstorableValue):
            await store.append("r1", spoiled, T0)
        answers = await asyncio.gather(store.append("r1", spoiled, T0), store.append("r2", spoiled[:100], T0),
                                       return_exceptions=True)
        assert [type(answer).__name__ for answer in answers] == ["UnstorableValue", "AppendOutcome"]
        assert ((await store.get_run("r1")).last_seq, (await store.get_run("r2")).last_seq) == (371, 351)

    @pytest.mark.anyio
    async def test_appends_sent_together_each_commit_or_fail_alone(self, store: Store) -> None:
        """Small appends sent in one turn of the loop, which a group commit takes together (a
        SQLite batch, a PostgreSQL merged commit): each refused one leaves nothing of itself,
        even one refused after its rows were written or by the database, and every other
        commits, in the order sent."""
        for run_id in ("a", "b", "ended"):
            await store.create_run(spec(run_id), T0)
        await store.end_turn("ended", "completed", None, T0)
        ended_seq = (await store.get_run("ended")).last_seq
        answers = await asyncio.gather(
            store.append("a", [chunk("a1")], T0),
            store.append("b", [turn_end(), chunk("after")], T0),  # refused by its last event
            store.append("ended", [chunk("late")], T0),
            store.append("missing", [chunk("x")], T0),
            store.append("a", [chunk("a2"), turn_end(), chunk("after")], T0),  # a's second write
            store.append("b", [chunk("b1")], T0),
            store.append("a", [chunk("a3")], T0),
            return_exceptions=True,
        )
        kinds = [type(answer).__name__ for answer in answers]
        assert kinds == ["AppendOutcome", "RunEnded", "RunEnded", "RunNotFound", "RunEnded", "AppendOutcome",
                         "AppendOutcome"], answers
        assert [cast(Any, answers[index]).last_seq for index in (0, 5, 6)] == [2, 2, 3]
        # A batch the database refuses a statement of (a NUL in an eventId).
        again = await asyncio.gather(
            store.append("b", [chunk("b2")], T0),
            store.append("a", [chunk("a4", "bad\x00id")], T0),
            store.append("a", [chunk("a5")], T0),
            return_exceptions=True,
        )
        assert [type(answer).__name__ for answer in again] == ["AppendOutcome", "UnstorableValue", "AppendOutcome"]
        assert [cast(Any, again[index]).last_seq for index in (0, 2)] == [3, 4], again
        assert bodies(await store.events_after("a", 1, 10)) == [chunk("a1"), chunk("a3"), chunk("a5")]
        assert bodies(await store.events_after("b", 1, 10)) == [chunk("b1"), chunk("b2")]
        assert (await store.get_run("ended")).last_seq == ended_seq
        for run_id, output in (("a", "a1a3a5"), ("b", "b1b2")):
            run, turn = await store.turn_result(run_id, None)
            assert (run.status, turn.ended, turn.output) == ("running", False, [text(output)])

    # -- ending turns --------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_turn_end_in_a_batch_ends_the_turn_with_its_output(self, store: Store) -> None:
        """A turn/end event ends the turn: the turn row, subagent/end and the run all say so."""
        await store.create_run(spec("r1"), T0)
        outcome = await store.append("r1", [chunk("partial"), turn_end("max_tokens", usage=usage(5, 6))], T0 + 1)
        assert outcome.ended is not None
        assert (outcome.ended.stop_reason, outcome.ended.output) == ("max_tokens", [text("partial")])
        run, turn = await store.turn_result("r1", 1)
        assert run.status == "ended" and run.lease_expires_at is None
        assert (turn.ended_at, turn.stop_reason, turn.usage["inputTokens"]) == (T0 + 1, "max_tokens", 5)
        [end] = [event for event in await store.events_after("r1", 0, 10) if event.type == "subagent/end"]
        assert end.body["lastAssistantMessage"] == [text("partial")]
        assert end.body["stopReason"] == "max_tokens" and end.body["isError"] is True

    @pytest.mark.anyio
    async def test_events_after_the_end_are_refused_and_nothing_is_dropped(self, store: Store) -> None:
        """After the end, new events raise RunEnded and store nothing; a retry of stored ones is
        still answered as duplicates."""
        await store.create_run(spec("r1"), T0)
        await store.append("r1", [chunk("kept", "e1")], T0)
        await store.end_turn("r1", "cancelled", None, T0)
        before = await store.events_after("r1", 0, 10)
        with pytest.raises(RunEnded):
            await store.append("r1", [chunk("late")], T0)
        with pytest.raises(RunEnded):  # events after a turn/end in the same batch
            await store.create_run(spec("r2"), T0)
            await store.append("r2", [turn_end("completed"), chunk("after")], T0)
        assert await store.events_after("r1", 0, 10) == before
        assert (await store.append("r1", [chunk("kept", "e1")], T0)).duplicates == 1
        assert [event.type for event in await store.events_after("r2", 0, 10)] == ["subagent/start"]

    @pytest.mark.anyio
    async def test_ending_is_idempotent_and_a_different_reason_conflicts(self, store: Store) -> None:
        """The same end again changes nothing; another stop reason is refused; an empty output
        leaves lastAssistantMessage out of subagent/end."""
        await store.create_run(spec("r1"), T0)
        first = await store.end_turn("r1", "error", {"message": "boom"}, T0 + 1)
        assert first is not None and first.changed
        assert (first.turn.stop_reason, first.turn.error, first.turn.output) == ("error", {"message": "boom"}, [])
        assert "lastAssistantMessage" not in first.stored[0].body
        again = await store.end_turn("r1", "error", {"message": "boom"}, T0 + 2)
        assert again is not None and not again.changed and again.turn == first.turn
        with pytest.raises(TurnAlreadyEnded):
            await store.end_turn("r1", "completed", None, T0 + 3)
        assert (await store.get_run("r1")).last_seq == 2

    @pytest.mark.anyio
    async def test_continuable_runs_take_turns_and_close(self, store: Store) -> None:
        """A continuable run goes idle after a turn, starts turn 2 only when idle, and closes for good."""
        await store.create_run(spec("c", mode="continuable"), T0)
        with pytest.raises(Conflict):
            await store.start_turn("c", T0)  # still running
        await store.append("c", [message("one"), turn_end("completed")], T0)
        assert (await store.get_run("c")).status == "idle"
        run, [start] = await store.start_turn("c", T0 + 1)
        assert (run.status, run.turn, start.type, start.body["turn"]) == ("running", 2, "subagent/start", 2)
        await store.append("c", [chunk("two")], T0 + 1)
        closed, stored = await store.close_run("c", T0 + 2)
        assert closed.status == "ended"
        assert [event.type for event in stored][0] == "subagent/end"
        _, second = await store.turn_result("c", 2)
        assert (second.stop_reason, second.output) == ("cancelled", [text("two")])
        _, first = await store.turn_result("c", 1)
        assert first.output == [text("one")]
        with pytest.raises(TurnNotFound):
            await store.turn_result("c", 3)
        assert (await store.close_run("c", T0 + 3))[1] == []  # closing again changes nothing

    @pytest.mark.anyio
    async def test_oneshot_runs_have_one_turn(self, store: Store) -> None:
        """A oneshot run can neither start a second turn nor be closed."""
        await store.create_run(spec("o"), T0)
        await store.end_turn("o", "completed", None, T0)
        for operation in (store.start_turn("o", T0), store.close_run("o", T0)):
            with pytest.raises(NotContinuable):
                await operation

    # -- leases ----------------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_expired_runs_are_those_whose_lease_ran_out(self, store: Store) -> None:
        """A run is expired once ``now`` passes its lease (renewed by every append); lease 0 never."""
        await store.create_run(spec("short", lease=10), T0)
        await store.create_run(spec("none", lease=0), T0)
        await store.append("short", [chunk("x")], T0 + 5)  # renews: expires at T0 + 15
        assert (await store.get_run("short")).lease_expires_at == T0 + 15
        assert await store.expired_runs(T0 + 14) == []
        assert await store.expired_runs(T0 + 16) == ["short"]
        assert await store.end_turn("short", "timeout", None, T0 + 14, only_if_expired=True) is None
        ended = await store.end_turn("short", "timeout", None, T0 + 16, only_if_expired=True)
        assert ended is not None and ended.turn.output == [text("x")]
        assert await store.expired_runs(T0 + 10**9) == []

    # -- listing ------------------------------------------------------------

    @pytest.mark.anyio
    async def test_list_runs_filters_and_pages_newest_first(self, store: Store) -> None:
        """list_runs filters by parent, status and agent, newest first, paged by ``before_pk``."""
        for number in range(5):
            await store.create_run(spec(f"r{number}", parent="p" if number % 2 else None,
                                        agent="even" if number % 2 == 0 else "odd"), T0 + number)
        await store.end_turn("r4", "completed", None, T0 + 9)

        async def listed(**filters: Any) -> list[str]:
            query = {"parent_run_id": None, "status": None, "agent": None, "limit": 10, "before_pk": None, **filters}
            return [run.run_id for run in await store.list_runs(**query)]

        assert await listed() == ["r4", "r3", "r2", "r1", "r0"]
        assert await listed(parent_run_id="p") == ["r3", "r1"]
        assert await listed(agent="even", status="running") == ["r2", "r0"]
        assert await listed(status="ended") == ["r4"]
        page = await store.list_runs(parent_run_id=None, status=None, agent=None, limit=2, before_pk=None)
        rest = await listed(before_pk=page[-1].pk)
        assert [run.run_id for run in page] + rest == ["r4", "r3", "r2", "r1", "r0"]
        counts = await store.count_runs()
        assert (counts.get("running"), counts.get("idle", 0), counts.get("ended")) == (4, 0, 1)

    # -- restarts and replicas -------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_a_reopened_store_reads_back_everything(self, store: Store, database_url: str) -> None:
        """A second store opened on the database (a restart) reads the same runs, log and results,
        rebuilding the open turn's output from the log."""
        await store.create_run(spec("open"), T0)
        await store.append("open", [message("kept"), message(usage=usage(1, 1)), chunk("streamed")], T0)
        await store.create_run(spec("done"), T0)
        await store.end_turn("done", "max_tokens", None, T0)
        reopened = self.new_store(database_url)
        await reopened.open()
        try:
            for run_id in ("open", "done"):
                assert await reopened.turn_result(run_id, None) == await store.turn_result(run_id, None)
                assert bodies(await reopened.events_after(run_id, 0, 100)) == bodies(
                    await store.events_after(run_id, 0, 100))
            assert (await reopened.turn_result("open", None))[1].output == [text("kept")]
            await reopened.append("open", [chunk("more")], T0)
            assert (await reopened.get_run("open")).last_seq == 5
        finally:
            await reopened.close()

    @pytest.mark.anyio
    async def test_two_stores_feed_one_turn_and_agree(self, store: Store, database_url: str) -> None:
        """Two stores on one database (two replicas) each catch their fold up with what the other
        wrote before adding their own; the turn ends once with the whole output."""
        other = self.new_store(database_url)
        await other.open()
        try:
            await store.create_run(spec("shared"), T0)
            await store.append("shared", [chunk("one ")], T0)
            _, turn = await other.turn_result("shared", None)  # other builds its fold here
            assert turn.output == [text("one ")]
            await store.append("shared", [chunk("two ")], T0)  # other's fold is now behind
            await other.append("shared", [chunk("three")], T0)
            for reader in (store, other):
                _, turn = await reader.turn_result("shared", None)
                assert turn.output == [text("one two three")]
            ended = await other.end_turn("shared", "completed", None, T0)
            assert ended is not None and ended.changed
            again = await store.end_turn("shared", "completed", None, T0)
            assert again is not None and not again.changed
            assert again.turn.output == [text("one two three")]
            assert [event.seq for event in await store.events_after("shared", 0, 100)] == [1, 2, 3, 4, 5]
        finally:
            await other.close()

    @pytest.mark.anyio
    async def test_concurrent_appends_through_two_stores_are_gap_free(self, store: Store, database_url: str) -> None:
        """Appends racing through two stores on one run get seq 1..N: no gap, no repeat."""
        other = self.new_store(database_url)
        await other.open()
        try:
            await store.create_run(spec("raced"), T0)
            writes = [
                (store if number % 2 else other).append("raced", [chunk(f"{number} ")], T0)
                for number in range(60)
            ]
            outcomes = await asyncio.gather(*writes)
            assert sorted(outcome.last_seq for outcome in outcomes) == list(range(2, 62))
            assert [event.seq for event in await other.events_after("raced", 0, 1000)] == list(range(1, 62))
            _, turn = await store.turn_result("raced", None)
            assert sorted(turn.output[0]["text"].split()) == sorted(str(number) for number in range(60))
        finally:
            await other.close()


class LifetimeContract(ContractBase):
    """:class:`lastword.store.protocols.Lifetime`: opening a database, its schema."""

    # -- the schema --------------------------------------------------------------------------------

    def test_replicas_starting_together_create_the_schema_once(self, database_url: str) -> None:
        """Processes that open one fresh database at the same instant all start, with one schema."""
        starting = 6
        at = time.time() + 2.0
        processes = [
            subprocess.Popen([sys.executable, "-c", STARTER, database_url, str(at)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(starting)
        ]
        outcomes = [process.communicate(timeout=60) for process in processes]
        for process, (out, err) in zip(processes, outcomes, strict=True):
            assert process.returncode == 0, err.decode()[-2000:]
            assert out.decode().strip() == "opened"

    @pytest.mark.anyio
    async def test_a_schema_from_a_newer_release_is_refused(self, store: Store, database_url: str) -> None:
        """A database whose schema is newer than the code is not opened (nor downgraded)."""
        await store._write(lambda tx: tx.run("UPDATE meta SET value = '99' WHERE key = 'schema_version'"))  # type: ignore[attr-defined]
        newer = self.new_store(database_url)
        with pytest.raises(RuntimeError, match="schema version 99"):
            await newer.open()
        await newer.close()


class FeedContract(ContractBase):
    """:class:`lastword.store.protocols.Feed`: the firehose of every run's lifecycle events."""

    @pytest.mark.anyio
    async def test_the_feed_holds_every_lifecycle_event_in_order(self, store: Store) -> None:
        """feed_after returns starts and ends of every run in commit order, filterable by parent."""
        await store.create_run(spec("a"), T0)
        await store.create_run(spec("b", parent="a"), T0)
        await store.append("a", [chunk("not in the feed")], T0)
        await store.end_turn("b", "completed", None, T0)
        feed = await store.feed_after(0, None, 100)
        assert [(event.run_id, event.type) for event in feed] == [
            ("a", "subagent/start"), ("b", "subagent/start"), ("b", "subagent/end"),
        ]
        ids = [event.feed_id for event in feed if event.feed_id is not None]
        assert ids == sorted(ids) and len(set(ids)) == 3
        assert await store.last_feed_id() == ids[-1]
        assert [event.type for event in await store.feed_after(ids[0], "a", 100)] == ["subagent/start", "subagent/end"]
        assert await store.feed_after(ids[-1], None, 100) == []

    @pytest.mark.anyio
    async def test_the_highest_id_issued_outlives_the_rows_retention_deletes(self, store: Feed) -> None:
        """An empty feed starts at 0; once retention deleted the rows, ``last_feed_id`` goes back
        but ``highest_feed_id_issued`` still covers every id given out (a resume point up to it
        is one the firehose may have sent)."""
        assert (await store.last_feed_id(), await store.highest_feed_id_issued()) == (0, 0)
        log = cast(RunLog, store)
        await log.create_run(spec("gone"), T0)
        await log.end_turn("gone", "completed", None, T0 + 1)
        issued = await store.last_feed_id()
        assert issued > 0 and await store.highest_feed_id_issued() == issued
        assert await cast(Store, store).delete_ended_runs(T0 + 50, T0 + 60) == ["gone"]
        assert await store.feed_after(0, None, 10) == []
        assert await store.last_feed_id() == 0
        assert await store.highest_feed_id_issued() == issued


class RetentionContract(ContractBase):
    """:class:`lastword.store.protocols.Retention`: deleting runs that ended long ago."""

    @pytest.mark.anyio
    async def test_retention_deletes_ended_runs_and_leaves_a_tombstone(self, store: Store) -> None:
        """Runs ended before the cut-off are deleted (then read as Gone); others stay."""
        await store.create_run(spec("old"), T0)
        await store.end_turn("old", "completed", None, T0 + 1)
        await store.create_run(spec("open"), T0)
        await store.create_run(spec("recent"), T0)
        await store.end_turn("recent", "completed", None, T0 + 100)
        assert await store.delete_ended_runs(T0 + 50, T0 + 200) == ["old"]
        with pytest.raises(RunDeleted):
            await store.get_run("old")
        assert {run.run_id for run in await store.list_runs(parent_run_id=None, status=None, agent=None,
                                                            limit=10, before_pk=None)} == {"open", "recent"}

    @pytest.mark.anyio
    async def test_retention_deletes_a_runs_durable_streams_producers_with_it(self, store: Store) -> None:
        """A run written by an idempotent producer (SPEC §17) keeps the producer's epoch and seq
        in ``ds_producers``; they go with the run, not left behind for ever (a deleted run's id is
        never given out again, so nothing could read them)."""
        for run_id in ("old", "kept"):
            await store.create_run(spec(run_id), T0)
            await store.append_as_producer(run_id, [message("hi")], T0, None, Producer("child", 0, 0))
        await store.end_turn("old", "completed", None, T0 + 1)
        assert await producer_rows(store) == {"run:old", "run:kept"}
        assert await store.delete_ended_runs(T0 + 50, T0 + 200) == ["old"]
        assert await producer_rows(store) == {"run:kept"}


class StatsContract(ContractBase):
    """:class:`lastword.store.protocols.Stats`: the counts ``/metrics`` shows."""

    @pytest.mark.anyio
    async def test_count_runs_counts_each_status(self, store: Stats) -> None:
        """Runs are counted in the status they are in now: a turn's end moves its run along."""
        assert await store.count_runs() == {}
        log = cast(RunLog, store)
        for run_id in ("a", "b"):
            await log.create_run(spec(run_id), T0)
        for run_id in ("c", "d"):
            await log.create_run(spec(run_id, mode="continuable"), T0)
        await log.end_turn("a", "completed", None, T0 + 1)
        await log.end_turn("c", "completed", None, T0 + 1)
        assert await store.count_runs() == {"ended": 1, "running": 2, "idle": 1}
        await log.close_run("c", T0 + 2)
        assert await store.count_runs() == {"ended": 2, "running": 2}


class OutboxContract(ContractBase):
    """:class:`lastword.store.protocols.Outbox`: deliveries written with the end they announce,
    leased to one sender at a time, their attempts stored only under the lease still held."""

    HOOK = WebhookTarget(url="https://hooks.example/lastword", secret="whsec_c2VjcmV0")

    async def ended_with_webhook(self, store: Outbox, run_id: str, at: float = T0 + 1) -> None:
        log = cast(RunLog, store)
        await log.create_run(replace(spec(run_id), webhook=self.HOOK), T0)
        await log.end_turn(run_id, "completed", None, at)

    @pytest.mark.anyio
    async def test_an_end_enqueues_one_pending_delivery_of_a_run_with_a_webhook(self, store: Outbox) -> None:
        log = cast(RunLog, store)
        assert (await store.outbox_stats(), await store.next_delivery_due()) == ((0, None), None)
        await self.ended_with_webhook(store, "hooked")
        await log.create_run(spec("plain"), T0)
        await log.end_turn("plain", "completed", None, T0 + 1)
        [delivery] = await store.deliveries("hooked")
        assert (delivery.run_id, delivery.turn, delivery.state, delivery.attempts) == ("hooked", 1, "pending", [])
        assert delivery.last_status is None and delivery.next_attempt_at == T0 + 1
        assert await store.deliveries("plain") == []
        assert await store.outbox_stats() == (1, T0 + 1)
        assert await store.next_delivery_due() == T0 + 1
        await self.ended_with_webhook(store, "later", at=T0 + 5)
        assert await store.outbox_stats() == (2, T0 + 1)  # how many, and the oldest
        assert await store.next_delivery_due() == T0 + 1
        with pytest.raises(RunNotFound):
            await store.deliveries("nope")

    @pytest.mark.anyio
    async def test_a_claim_leases_a_due_delivery_to_one_caller_until_the_lease_runs_out(self, store: Outbox) -> None:
        await self.ended_with_webhook(store, "hooked")
        assert await store.claim_deliveries(T0, 30, 10) == []  # not due yet
        [job] = await store.claim_deliveries(T0 + 1, 30, 10)
        assert (job.url, job.secret, job.attempts, job.leased_until) == (self.HOOK.url, self.HOOK.secret, [], T0 + 31)
        sent = orjson.loads(job.payload)
        assert (sent["type"], sent["data"]["runId"], sent["data"]["stopReason"]) == (
            "subagent.end", "hooked", "completed")
        assert await store.claim_deliveries(T0 + 30, 30, 10) == []  # leased
        assert await store.next_delivery_due() == T0 + 31  # due again when the lease runs out
        [again] = await store.claim_deliveries(T0 + 32, 30, 10)  # the lease ran out
        assert (again.id, again.leased_until) == (job.id, T0 + 62)

    @pytest.mark.anyio
    async def test_an_attempt_is_stored_only_under_the_lease_still_held(self, store: Outbox) -> None:
        await self.ended_with_webhook(store, "hooked")
        [stale] = await store.claim_deliveries(T0 + 1, 10, 10)
        [held] = await store.claim_deliveries(T0 + 20, 10, 10)  # another sender, after the lease ran out
        tried = [{"at": T0 + 21, "status": 200}]
        assert not await store.record_attempt(stale, [{"at": T0 + 5, "status": 500}], "pending", 500, T0 + 60)
        assert await store.record_attempt(held, tried, "delivered", 200, None)
        [delivery] = await store.deliveries("hooked")
        assert (delivery.state, delivery.last_status, delivery.attempts) == ("delivered", 200, tried)
        assert (await store.outbox_stats(), await store.next_delivery_due()) == ((0, None), None)
        assert await store.claim_deliveries(T0 + 10**6, 10, 10) == []

    @pytest.mark.anyio
    async def test_a_retry_is_due_at_its_time_with_the_attempts_so_far(self, store: Outbox) -> None:
        await self.ended_with_webhook(store, "hooked")
        [job] = await store.claim_deliveries(T0 + 1, 10, 10)
        tried = [{"at": T0 + 1, "status": 503}]
        assert await store.record_attempt(job, tried, "pending", 503, T0 + 100)
        assert await store.next_delivery_due() == T0 + 100
        assert await store.outbox_stats() == (1, T0 + 1)
        assert await store.claim_deliveries(T0 + 99, 10, 10) == []
        [retry] = await store.claim_deliveries(T0 + 100, 10, 10)
        assert (retry.id, retry.attempts) == (job.id, tried)

    @pytest.mark.anyio
    async def test_released_leases_are_due_again_at_once_and_a_stale_one_is_left_alone(self, store: Outbox) -> None:
        await self.ended_with_webhook(store, "one")
        await self.ended_with_webhook(store, "two")
        jobs = await store.claim_deliveries(T0 + 1, 30, 10)
        assert len(jobs) == 2
        assert await store.release_deliveries(jobs) == 2
        again = await store.claim_deliveries(T0 + 2, 30, 10)
        assert sorted(job.id for job in again) == sorted(job.id for job in jobs)
        assert await store.release_deliveries(jobs) == 0  # those leases are no longer the caller's
        assert await store.claim_deliveries(T0 + 3, 30, 10) == []
        [delivery] = await store.deliveries("one")
        assert (delivery.state, delivery.attempts) == ("pending", [])

    @pytest.mark.anyio
    async def test_two_stores_claiming_at_once_get_disjoint_deliveries(self, store: Outbox, database_url: str) -> None:
        """Two replicas' senders never lease the same delivery (PostgreSQL: SKIP LOCKED)."""
        for number in range(12):
            await self.ended_with_webhook(store, f"r{number}")
        other = self.new_store(database_url)
        await other.open()
        try:
            for round_ in range(20):
                now = T0 + 1 + round_ * 100  # each round after the last round's leases ran out
                mine, theirs = await asyncio.gather(store.claim_deliveries(now, 50, 5),
                                                    other.claim_deliveries(now, 50, 5))
                ids = [job.id for job in mine + theirs]
                assert len(ids) == len(set(ids)) == 10
        finally:
            await other.close()
