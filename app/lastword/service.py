"""The run service: what the HTTP API asks for, on top of the store and the hub.

It turns requests into store operations, publishes what they committed to live subscribers,
ends turns whose lease expired, and waits for turn ends on behalf of long-polling readers.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from lastword.errors import Conflict, NotFound
from lastword.hub import Hub
from lastword.ids import new_run_id
from lastword.metrics import Metrics
from lastword.schemas import RunCreate
from lastword.store.base import AppendOutcome, EndOutcome, RunRecord, RunSpec, Store, StoredEvent, TurnRecord
from lastword.store.sql import LIVE_TYPES

if TYPE_CHECKING:
    from lastword.notify import Notice

log = logging.getLogger("lastword")

CHILDREN_PAGE = 500
RETENTION_BATCH = 200


class RunService:
    def __init__(
        self,
        store: Store,
        hub: Hub,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.hub = hub
        self.metrics = metrics
        self.clock = clock
        #: False when a notice listener feeds the hub (PostgreSQL): see :meth:`publish_committed`.
        self.publish_on_commit = True

    def _published(self, stored: Sequence[StoredEvent]) -> None:
        if stored and self.publish_on_commit:
            self.hub.publish(stored)

    async def publish_committed(self, notices: Sequence[Notice]) -> None:
        """Publish what a batch of commit notices (from any replica, this one too) committed.

        With several replicas the hub is fed only from here, never straight after a local
        commit: notices arrive in commit order, and publishing a local commit at once could
        overtake another replica's earlier commit of the same run (or an earlier feed id),
        which a live stream would then drop as already passed. The events are read from the
        log, and only for what someone here follows: a run with a subscriber or a ``?wait=``
        waiter, or the firehose when it has subscribers.
        """
        feed_ids = [n.feed_id for n in notices if n.feed_id is not None] if self.hub.has_feed_subscribers else []
        spans: dict[str, list[tuple[int, int, int]]] = {}  # run → (first seq, last seq, notice index)
        for index, notice in enumerate(notices):
            if self.hub.watches(notice.run_id):
                spans.setdefault(notice.run_id, []).append((notice.first_seq, notice.last_seq, index))
        if not feed_ids and not spans:
            return
        ordered: list[tuple[int, int, StoredEvent]] = []  # (notice index, seq, event)
        if feed_ids:
            # Feed ids commit in id order, so the batch's notices hold every id in this range.
            low, high = min(feed_ids), max(feed_ids)
            by_feed_id = {n.feed_id: index for index, n in enumerate(notices) if n.feed_id is not None}
            for event in await self.store.feed_after(low - 1, None, high - low + 1):
                if event.feed_id is not None and event.feed_id in by_feed_id:
                    ordered.append((by_feed_id[event.feed_id], event.seq, event))
        # Lifecycle events came with the feed when it was read; chunks come from each run's log.
        types = frozenset({"assistant/chunk"}) if feed_ids else LIVE_TYPES
        for run_id, ranges in spans.items():
            # One run's notices come in seq order: its ranges are sorted and do not overlap.
            firsts = [first for first, _, _ in ranges]
            low, high = ranges[0][0], ranges[-1][1]
            for event in await self.store.events_after(run_id, low - 1, high - low + 1, types):
                at = bisect.bisect_right(firsts, event.seq) - 1
                if at >= 0 and event.seq <= ranges[at][1]:
                    ordered.append((ranges[at][2], event.seq, event))
        ordered.sort(key=lambda item: (item[0], item[1]))
        self.hub.publish(event for _, _, event in ordered)

    async def create(self, request: RunCreate) -> tuple[RunRecord, bool]:
        body = request.model_dump()
        run_id = request.runId or new_run_id(self.clock())
        body["runId"] = run_id
        spec = RunSpec(
            run_id=run_id,
            parent_run_id=request.parentRunId,
            agent=request.agent,
            mode=request.mode,
            metadata=request.metadata,
            lease_seconds=request.leaseSeconds,
            canonical=orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode(),
        )
        run, created, stored = await self.store.create_run(spec, self.clock())
        self._published(stored)
        if created:
            self.metrics.runs_created.inc()
        return run, created

    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        started = time.perf_counter()
        outcome = await self.store.append(run_id, events, self.clock(), encoded)
        self.metrics.observe_ingest(events, outcome, time.perf_counter() - started)
        self._published(outcome.stored)
        if outcome.ended is not None:
            self.metrics.turns_ended.labels(outcome.ended.stop_reason).inc()
        return outcome

    async def end(self, run_id: str, stop_reason: str, error: Any, *, cascade: bool = False) -> EndOutcome:
        outcome = await self.store.end_turn(run_id, stop_reason, error, self.clock())
        assert outcome is not None  # only the sweep asks for a conditional end
        self._after_end(outcome)
        if cascade:
            await self._cascade(run_id)
        return outcome

    def _after_end(self, outcome: EndOutcome) -> None:
        self._published(outcome.stored)
        if outcome.changed:
            self.metrics.turns_ended.labels(outcome.turn.stop_reason or "").inc()

    async def _cascade(self, run_id: str) -> None:
        """End the open turns of every descendant with ``cancelled`` (asked for explicitly).

        The walk goes through every child, whatever its status: an idle or ended child can
        still have running children of its own. ``parentRunId`` is not checked at creation,
        so runs can name each other as parents; each run is visited once.
        """
        error = {"message": f"parent run {run_id} ended (cascade)"}
        visited = {run_id}
        pending = [run_id]
        while pending:
            parent = pending.pop()
            for child in await self._children(parent):
                if child.run_id in visited:
                    continue
                visited.add(child.run_id)
                pending.append(child.run_id)
                if child.status != "running":
                    continue
                try:
                    outcome = await self.store.end_turn(child.run_id, "cancelled", error, self.clock())
                except (Conflict, NotFound):
                    continue  # it ended another way (or went away) since it was listed
                if outcome is not None:
                    self._after_end(outcome)

    async def _children(self, run_id: str) -> list[RunRecord]:
        children: list[RunRecord] = []
        before: int | None = None
        while True:
            page = await self.store.list_runs(
                parent_run_id=run_id, status=None, agent=None, limit=CHILDREN_PAGE, before_pk=before
            )
            children.extend(page)
            if len(page) < CHILDREN_PAGE:
                return children
            before = page[-1].pk

    async def next_turn(self, run_id: str) -> RunRecord:
        run, stored = await self.store.start_turn(run_id, self.clock())
        self._published(stored)
        return run

    async def close(self, run_id: str) -> RunRecord:
        run, stored = await self.store.close_run(run_id, self.clock())
        self._published(stored)
        for event in stored:
            if event.type == "subagent/end":
                self.metrics.turns_ended.labels(event.body["stopReason"]).inc()
        return run

    async def result(self, run_id: str, turn: int | None, wait: float) -> tuple[RunRecord, TurnRecord]:
        """The run and the turn's result, waiting up to ``wait`` seconds for the turn to end."""
        deadline = time.monotonic() + wait
        signal = self.hub.turn_end_signal(run_id) if wait > 0 else None
        if signal is not None:
            self.metrics.result_waiters.inc()
        try:
            while True:
                # Cleared before the read: an end published while the read runs stays set.
                if signal is not None:
                    signal.clear()
                run, record = await self.store.turn_result(run_id, turn)
                remaining = deadline - time.monotonic()
                if record.ended or signal is None or remaining <= 0 or self.hub.draining:
                    return run, record
                try:
                    await asyncio.wait_for(signal.wait(), remaining)
                except TimeoutError:
                    pass
        finally:
            if signal is not None:
                self.hub.release(run_id, signal)
                self.metrics.result_waiters.dec()

    async def sweep_once(self) -> int:
        """End every turn whose lease has expired; the count ended."""
        ended = 0
        now = self.clock()
        for run_id in await self.store.expired_runs(now):
            try:
                outcome = await self.store.end_turn(
                    run_id, "timeout", {"message": "the run's lease expired"}, now, only_if_expired=True
                )
            except NotFound:
                continue
            if outcome is not None:
                ended += 1
                self.metrics.leases_expired.inc()
                self._after_end(outcome)
        return ended

    async def delete_expired_runs(self, retention_hours: float) -> int:
        """Delete runs that ended more than ``retention_hours`` ago; the count deleted."""
        now = self.clock()
        cutoff = now - retention_hours * 3600
        total = 0
        while True:
            deleted = await self.store.delete_ended_runs(cutoff, now, RETENTION_BATCH)
            total += len(deleted)
            self.metrics.runs_deleted.inc(len(deleted))
            if len(deleted) < RETENTION_BATCH:
                return total

    @staticmethod
    async def every(interval: float, job: Callable[[], Awaitable[object]], name: str) -> None:
        """Run ``job`` every ``interval`` seconds until cancelled, surviving its failures."""
        while True:
            try:
                await job()
            except Exception:  # a passing store failure must not end the background job
                log.exception("%s failed", name)
            await asyncio.sleep(interval)
